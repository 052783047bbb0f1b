package vmtest

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func TestGuestOnly(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want bool
	}{
		{"vmtest tag", "//go:build vmtest\n\npackage a\n", true},
		{"vmtest and linux", "// Copyright\n\n//go:build vmtest && linux\n\npackage a\n", true},
		{"no constraint", "package a\n", false},
		{"linux only", "//go:build linux\n\npackage a\n", false},
		{"vmtest or linux builds on the host too", "//go:build vmtest || linux\n\npackage a\n", false},
		{"not vmtest", "//go:build !vmtest\n\npackage a\n", false},
		{"constraint after the package clause is ignored", "package a\n\n//go:build vmtest\n", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := GuestOnly([]byte(tc.src))
			if err != nil || got != tc.want {
				t.Fatalf("GuestOnly() = %v, %v, want %v", got, err, tc.want)
			}
		})
	}
	if _, err := GuestOnly([]byte("//go:build vmtest &&\n\npackage a\n")); err == nil {
		t.Fatal("a malformed constraint parsed")
	}
}

func TestTestNames(t *testing.T) {
	src := `package a
import "testing"
func TestA(t *testing.T) {}
func Test(t *testing.T) {}
func TestÉ(t *testing.T) {}
func Testify(t *testing.T) {}
func TestMain(m *testing.M) {}
func BenchmarkA(b *testing.B) {}
func helper(t *testing.T) {}
type s struct{}
func (s) TestMethod(t *testing.T) {}
`
	got, err := TestNames("a_vm_test.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"TestA", "Test", "TestÉ"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("TestNames() = %q, want %q", got, want)
	}
}

func TestBinaryName(t *testing.T) {
	for rel, want := range map[string]string{".": "root", "cgroup": "cgroup", "testenv/vmtest": "testenv_vmtest", "kernel/seccomp": "kernel_seccomp"} {
		if got := BinaryName(rel); got != want {
			t.Errorf("BinaryName(%q) = %q, want %q", rel, got, want)
		}
	}
}

// writeModule writes a Go module of files (path -> content) and returns its root.
func writeModule(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	files["go.mod"] = "module example.com/m\n\ngo 1.25\n"
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// fixtureModule has a pure Go package with guest tests, a package with host
// tests only, and a cgo package with guest tests.
func fixtureModule(t *testing.T) string {
	return writeModule(t, map[string]string{
		"pure/pure.go":              "package pure\n\nfunc One() int { return 1 }\n",
		"pure/pure_test.go":         "package pure\n\nimport \"testing\"\n\nfunc TestHost(t *testing.T) {}\n",
		"pure/pure_vm_test.go":      "//go:build vmtest\n\npackage pure\n\nimport \"testing\"\n\nfunc TestGuestB(t *testing.T) {}\nfunc TestGuestA(t *testing.T) {}\n",
		"pure/x_vm_test.go":         "//go:build vmtest\n\npackage pure_test\n\nimport \"testing\"\n\nfunc TestGuestX(t *testing.T) {}\n",
		"pure/testdata/case.golden": "golden\n",
		"hostonly/h.go":             "package hostonly\n",
		"hostonly/h_test.go":        "package hostonly\n\nimport \"testing\"\n\nfunc TestH(t *testing.T) {}\n",
		"withcgo/c.go":              "package withcgo\n\n// int two(void) { return 2; }\nimport \"C\"\n\nfunc Two() int { return int(C.two()) }\n",
		"withcgo/c_vm_test.go":      "//go:build vmtest\n\npackage withcgo\n\nimport \"testing\"\n\nfunc TestCgo(t *testing.T) {\n\tif Two() != 2 {\n\t\tt.Fatal(Two())\n\t}\n}\n",
	})
}

func TestDiscover(t *testing.T) {
	goTool := testutil.RequireBinary(t, "go")
	root := fixtureModule(t)
	cases := []struct {
		name  string
		suite []Decision
		want  []string
	}{
		{"guest tests only", nil, []string{
			"example.com/m/pure pure ^(TestGuestA|TestGuestB|TestGuestX)$",
			"example.com/m/withcgo withcgo ^(TestCgo)$",
		}},
		{"host suites", []Decision{{"pure", true, "p"}, {"hostonly", true, "h"}}, []string{
			"example.com/m/hostonly hostonly .",
			"example.com/m/pure pure .",
			"example.com/m/withcgo withcgo ^(TestCgo)$",
		}},
		{"host suite left out", []Decision{{"pure", false, "p"}, {"hostonly", false, "h"}}, []string{
			"example.com/m/pure pure ^(TestGuestA|TestGuestB|TestGuestX)$",
			"example.com/m/withcgo withcgo ^(TestCgo)$",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pkgs, err := Discover(context.Background(), ExecRunner, goTool, root, tc.suite)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range pkgs {
				got = append(got, p.ImportPath+" "+p.Name+" "+p.RunPattern())
				if p.Dir != filepath.Join(root, p.Rel) {
					t.Errorf("%s: Dir %s, Rel %s", p.ImportPath, p.Dir, p.Rel)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Discover() =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestDiscoverChecksTheHostSuite: a package with ordinary tests that the
// list does not decide, an entry without such a package and an entry
// twice each fail with a message that names the package.
func TestDiscoverChecksTheHostSuite(t *testing.T) {
	goTool := testutil.RequireBinary(t, "go")
	root := fixtureModule(t)
	cases := []struct {
		name  string
		suite []Decision
		want  string
	}{
		{"undecided", []Decision{{"pure", true, "p"}}, "decide whether the guests run the tests of hostonly"},
		{"gone", []Decision{{"pure", true, "p"}, {"hostonly", true, "h"}, {"gone", false, "g"}}, "no package with tests at gone"},
		{"no ordinary tests", []Decision{{"pure", true, "p"}, {"hostonly", true, "h"}, {"withcgo", true, "c"}}, "withcgo has no ordinary tests"},
		{"twice", []Decision{{"pure", true, "p"}, {"pure", false, "p"}}, "pure decided twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Discover(context.Background(), ExecRunner, goTool, root, tc.suite)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Discover() error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestHostSuiteDecidesEveryPackage checks the real list against this
// module, as every `make vmtest` does, and that each decision says why.
func TestHostSuiteDecidesEveryPackage(t *testing.T) {
	goTool := testutil.RequireBinary(t, "go")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Discover(context.Background(), ExecRunner, goTool, root, HostSuite()); err != nil {
		t.Fatal(err)
	}
	for _, d := range HostSuite() {
		if strings.TrimSpace(d.Why) == "" {
			t.Errorf("%s: no reason", d.Rel)
		}
	}
	for _, p := range GuestLacks() {
		if p.Name == "" || strings.ContainsAny(p.Name, " '") || strings.TrimSpace(p.Why) == "" {
			t.Errorf("peer %+v: a name without blanks or quotes and a reason, please", p)
		}
	}
}

func TestModuleTestdata(t *testing.T) {
	root := writeModule(t, map[string]string{
		"testdata/hosts/a":         "a",
		"p/testdata/x.golden":      "x",
		"p/testdata/testdata/y":    "y",
		"p/q/testdata/z":           "z",
		".cache/m/testdata/ignore": "i",
		"_old/testdata/ignore":     "i",
		"p/p.go":                   "package p\n",
	})
	trees, err := ModuleTestdata(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tr := range trees {
		got = append(got, tr.Rel)
		if tr.Src != filepath.Join(root, tr.Rel) {
			t.Errorf("%s: Src %s", tr.Rel, tr.Src)
		}
	}
	if want := []string{"p/q/testdata", "p/testdata", "testdata"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ModuleTestdata() = %q, want %q", got, want)
	}
}

func TestDiscoverRejectsUntaggedVMFile(t *testing.T) {
	goTool := testutil.RequireBinary(t, "go")
	root := writeModule(t, map[string]string{
		"p/p.go":            "package p\n",
		"p/oops_vm_test.go": "package p\n\nimport \"testing\"\n\nfunc TestGuest(t *testing.T) {}\n",
	})
	_, err := Discover(context.Background(), ExecRunner, goTool, root, nil)
	if err == nil || !strings.Contains(err.Error(), "oops_vm_test.go: a _vm_test.go file must start with //go:build vmtest") {
		t.Fatalf("Discover() error %v, want one naming the untagged file", err)
	}
}
