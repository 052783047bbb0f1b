package vmtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/testenv/golden"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func goldenImage() *Image {
	return &Image{
		Busybox:     "/bin/busybox",
		TestTimeout: 16 * time.Minute,
		Tests: []TestEntry{
			{Package: Package{ImportPath: "github.com/nodeshim/nodeshim/cgroup", Rel: "cgroup", Name: "cgroup", Tests: []string{"TestPressureGuest"}}},
			{Package: Package{ImportPath: "github.com/nodeshim/nodeshim/testenv/vmtest", Rel: "testenv/vmtest", Name: "testenv_vmtest", Tests: []string{"TestGuestMounts", "TestGuestPureCgroup2"}}},
			{Package: Package{ImportPath: "github.com/nodeshim/nodeshim/shim/status", Rel: "shim/status", Name: "shim_status", HostSuite: true}},
		},
		Lacks: []string{"go", "kube-apiserver"},
	}
}

func TestInitScriptGolden(t *testing.T) {
	got := goldenImage().InitScript()
	golden.Check(t, "init.golden", []byte(got))
	// The script must parse as POSIX shell.
	sh := testutil.RequireBinary(t, "sh")
	if out, err := exec.Command(sh, "-n", "-c", got).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
}

// TestInitScriptBench: with Bench set, each test binary runs the matching
// benchmarks and no test; the script still parses.
func TestInitScriptBench(t *testing.T) {
	im := goldenImage()
	im.Bench, im.BenchTime = "GuestDetectionLatency", "10x"
	got := im.InitScript()
	want := `-test.run '^$' -test.bench 'GuestDetectionLatency' -test.benchtime '10x')`
	if !strings.Contains(got, want) || strings.Contains(got, `-test.run "$pattern"`) {
		t.Fatalf("init script does not run only the benchmarks (%s):\n%s", want, got)
	}
	sh := testutil.RequireBinary(t, "sh")
	if out, err := exec.Command(sh, "-n", "-c", got).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
}

// cpioList returns the names in a gzip-compressed newc archive.
func cpioList(t *testing.T, archive string) []string {
	t.Helper()
	cmd := exec.Command("sh", "-c", `gzip -dc "$1" | cpio -it --quiet`, "sh", archive)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("list %s: %v", archive, err)
	}
	names := strings.Fields(string(out))
	sort.Strings(names)
	return names
}

// cpioFile returns one file's content from the archive.
func cpioFile(t *testing.T, archive, name string) string {
	t.Helper()
	out, err := exec.Command("sh", "-c", `gzip -dc "$1" | cpio -i --quiet --to-stdout "$2"`, "sh", archive, name).Output()
	if err != nil {
		t.Fatalf("extract %s from %s: %v", name, archive, err)
	}
	return string(out)
}

// TestImageContents stages and packs an image with a dynamically linked
// "test binary" (/bin/true and its libraries) and checks what is in it.
func TestImageContents(t *testing.T) {
	busybox := "/bin/busybox"
	testutil.RequireFile(t, busybox)
	for _, b := range []string{"cpio", "gzip", "ldd"} {
		testutil.RequireBinary(t, b)
	}
	trueBin := testutil.RequireBinary(t, "true")
	ldd, err := exec.Command("ldd", trueBin).Output()
	if err != nil {
		t.Fatal(err)
	}
	libs, err := ParseLdd(ldd)
	if err != nil || len(libs) == 0 {
		t.Fatalf("ldd %s: %q, %v", trueBin, libs, err)
	}
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "testdata", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "testdata", "sub", "case.golden"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	im := goldenImage()
	im.Busybox = busybox
	im.Tests[0].Package.Dir = src
	im.Tests[0].Binary = Binary{Path: trueBin, Libs: libs}
	im.Tests[1].Package.Dir = t.TempDir() // no testdata
	im.Tests[1].Binary = Binary{Path: trueBin}
	im.Tests[2].Package.Dir = t.TempDir()
	im.Tests[2].Binary = Binary{Path: trueBin}
	// The module's own testdata goes in; a package's is not copied twice.
	shared := t.TempDir()
	if err := os.WriteFile(filepath.Join(shared, "hosts"), []byte("h"), 0o644); err != nil {
		t.Fatal(err)
	}
	im.Testdata = []Tree{{Src: shared, Rel: "testdata"}, {Src: filepath.Join(src, "testdata"), Rel: "cgroup/testdata"}}
	im.Nodeshim = &Binary{Path: trueBin, Libs: libs}
	im.Programs = []Binary{{Path: trueBin, Libs: libs}}

	dir := t.TempDir()
	stage := filepath.Join(dir, "stage")
	if err := im.Stage(stage); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "initramfs.cpio.gz")
	if err := Pack(context.Background(), stage, archive); err != nil {
		t.Fatal(err)
	}
	got := cpioList(t, archive)
	want := []string{".", "bin", "bin/busybox", "bin/sh", "dev", "etc", "etc/hosts", "init", "proc", "root", "sys", "tmp",
		"usr", "usr/local", "usr/local/bin", "usr/local/bin/nodeshim", "usr/local/bin/true",
		"vmtest", "vmtest/bin", "vmtest/bin/cgroup.test", "vmtest/bin/testenv_vmtest.test", "vmtest/bin/shim_status.test",
		"vmtest/src", "vmtest/src/cgroup", "vmtest/src/cgroup/testdata", "vmtest/src/cgroup/testdata/sub",
		"vmtest/src/cgroup/testdata/sub/case.golden", "vmtest/src/testenv", "vmtest/src/testenv/vmtest",
		"vmtest/src/shim", "vmtest/src/shim/status", "vmtest/src/testdata", "vmtest/src/testdata/hosts"}
	for _, l := range libs {
		rel := strings.TrimPrefix(l, "/")
		want = append(want, rel)
		for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
			want = append(want, d)
		}
	}
	want = uniqueSorted(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("archive holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if init := cpioFile(t, archive, "init"); init != im.InitScript() {
		t.Fatalf("archived /init differs from InitScript():\n%s", init)
	}
	if b, err := os.ReadFile(busybox); err != nil || cpioFile(t, archive, "bin/busybox") != string(b) {
		t.Fatalf("archived busybox differs from %s (%v)", busybox, err)
	}
	// Packing the same tree again gives the same bytes.
	again := filepath.Join(dir, "again.cpio.gz")
	if err := Pack(context.Background(), stage, again); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(archive)
	b, _ := os.ReadFile(again)
	if string(a) != string(b) {
		t.Fatal("packing the same tree twice gave different archives")
	}
}

func uniqueSorted(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func TestImageFaults(t *testing.T) {
	testutil.RequireFile(t, "/bin/busybox")
	trueBin := testutil.RequireBinary(t, "true")
	cases := []struct {
		fault      string
		initHas    string
		wantBinary bool
	}{
		{fault: "", wantBinary: true},
		{fault: "panic", initHas: "exit 1 # fault injected", wantBinary: true},
		{fault: "hang", initHas: "sleep 2147483647 # fault injected", wantBinary: true},
		{fault: "missing", wantBinary: false},
	}
	for _, tc := range cases {
		t.Run("fault="+tc.fault, func(t *testing.T) {
			im := goldenImage()
			im.Busybox = "/bin/busybox"
			im.Fault = tc.fault
			for i := range im.Tests {
				im.Tests[i].Package.Dir = t.TempDir()
				im.Tests[i].Binary = Binary{Path: trueBin}
			}
			script := im.InitScript()
			if tc.initHas != "" && !strings.Contains(script, tc.initHas) {
				t.Errorf("init lacks %q", tc.initHas)
			}
			if tc.fault == "" && strings.Contains(script, "fault injected") {
				t.Errorf("a real run's init injects a fault:\n%s", script)
			}
			stage := filepath.Join(t.TempDir(), "stage")
			if err := im.Stage(stage); err != nil {
				t.Fatal(err)
			}
			_, err := os.Stat(filepath.Join(stage, "vmtest", "bin", "cgroup.test"))
			if got := err == nil; got != tc.wantBinary {
				t.Errorf("first test binary staged = %v, want %v", got, tc.wantBinary)
			}
			if _, err := os.Stat(filepath.Join(stage, "vmtest", "bin", "testenv_vmtest.test")); err != nil {
				t.Errorf("second test binary: %v", err)
			}
		})
	}
}
