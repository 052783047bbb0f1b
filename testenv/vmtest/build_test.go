package vmtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func TestParseLdd(t *testing.T) {
	cases := []struct {
		name    string
		out     string
		want    []string
		wantErr bool
	}{
		{
			name: "cgo test binary",
			out: "\tlinux-vdso.so.1 (0x00007ffc1d7e5000)\n" +
				"\tlibseccomp.so.2 => /lib/x86_64-linux-gnu/libseccomp.so.2 (0x00007f0b1c4d0000)\n" +
				"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0b1c2ef000)\n" +
				"\t/lib64/ld-linux-x86-64.so.2 (0x00007f0b1c503000)\n",
			want: []string{"/lib/x86_64-linux-gnu/libseccomp.so.2", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"},
		},
		{name: "static", out: "\tstatically linked\n", want: nil},
		{name: "old vdso form", out: "\tlinux-vdso.so.1 =>  (0x00007ffc1d7e5000)\n\tlibc.so.6 => /lib/libc.so.6 (0x1)\n", want: []string{"/lib/libc.so.6"}},
		{name: "duplicates", out: "\ta.so => /lib/a.so (0x1)\n\ta.so => /lib/./a.so (0x1)\n", want: []string{"/lib/a.so"}},
		{name: "library not found", out: "\tlibseccomp.so.2 => not found\n", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLdd([]byte(tc.out))
			if tc.wantErr {
				if !errors.Is(err, ErrLdd) {
					t.Fatalf("ParseLdd() = %q, %v, want ErrLdd", got, err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseLdd() = %q, %v, want %q", got, err, tc.want)
			}
		})
	}
}

func FuzzParseLdd(f *testing.F) {
	f.Add("\tlinux-vdso.so.1 (0x00007ffc1d7e5000)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x1)\n\t/lib64/ld-linux-x86-64.so.2 (0x2)\n")
	f.Add("\tx => not found\n")
	f.Add("=>\n=> (\n /\n")
	f.Fuzz(func(t *testing.T, out string) {
		libs, err := ParseLdd([]byte(out))
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, l := range libs {
			if !filepath.IsAbs(l) || filepath.Clean(l) != l || seen[l] {
				t.Fatalf("ParseLdd(%q) = %q: %q is not a clean, unique absolute path", out, libs, l)
			}
			seen[l] = true
		}
	})
}

// TestBuilder builds the fixture's test binaries for real: the pure Go one
// static, the cgo one dynamic with its libraries and loader.
func TestBuilder(t *testing.T) {
	goTool := testutil.RequireBinary(t, "go")
	testutil.RequireBinary(t, "gcc")
	testutil.RequireBinary(t, "ldd")
	root := fixtureModule(t)
	pkgs, err := Discover(context.Background(), ExecRunner, goTool, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := &Builder{Go: goTool, Root: root, OutDir: t.TempDir(), Run: ExecRunner}
	for i := range pkgs {
		p := &pkgs[i]
		t.Run(p.Name, func(t *testing.T) {
			bin, err := b.TestBinary(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			dynamic, err := IsDynamic(bin.Path)
			if err != nil {
				t.Fatal(err)
			}
			wantCgo := p.Name == "withcgo"
			if p.Cgo != wantCgo || dynamic != wantCgo {
				t.Fatalf("%s: cgo %v, dynamic %v, want both %v", p.Name, p.Cgo, dynamic, wantCgo)
			}
			if !wantCgo {
				if len(bin.Libs) != 0 {
					t.Fatalf("static binary with libraries %q", bin.Libs)
				}
				return
			}
			var libc, loader bool
			for _, l := range bin.Libs {
				libc = libc || filepath.Base(l) == "libc.so.6"
				loader = loader || strings.HasPrefix(filepath.Base(l), "ld-linux")
			}
			if !libc || !loader {
				t.Fatalf("cgo binary libraries %q lack libc or the loader", bin.Libs)
			}
		})
	}
}

func TestBuilderReportsBuildFailure(t *testing.T) {
	goTool := testutil.RequireBinary(t, "go")
	root := writeModule(t, map[string]string{
		"p/p.go":         "package p\n",
		"p/p_vm_test.go": "//go:build vmtest\n\npackage p\n\nimport \"testing\"\n\nfunc TestGuest(t *testing.T) { undefined() }\n",
	})
	p := Package{ImportPath: "example.com/m/p", Name: "p", Tests: []string{"TestGuest"}}
	b := &Builder{Go: goTool, Root: root, OutDir: t.TempDir(), Run: ExecRunner}
	_, err := b.TestBinary(context.Background(), &p)
	if err == nil || !strings.Contains(err.Error(), "build test binary of example.com/m/p") || !strings.Contains(err.Error(), "undefined") {
		t.Fatalf("TestBinary() error %v, want the compiler's message", err)
	}
	if _, err := os.Stat(filepath.Join(b.OutDir, "p.test")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed build left a binary: %v", err)
	}
}
