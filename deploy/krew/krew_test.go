package krew

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// envKrew names krew's binary (mk/krew.mk builds it).
const envKrew = "NODESHIM_KREW"

// TestKrewInstalls builds the plugin, archives it and writes its
// manifest, and has krew itself install that archive into a krew root of
// the test's own: krew checks the manifest and the archive's sha256, links
// kubectl-nodeshim into its bin directory, where it answers as the
// plugin, lists it, and uninstalls it.
func TestKrewInstalls(t *testing.T) {
	krewBin := os.Getenv(envKrew)
	if krewBin == "" {
		testutil.Skip(t, "needs krew: %s names it (make test builds it under .tools)", envKrew)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, Binary)
	if out, err := exec.Command("go", "build", "-trimpath", "-o", bin, "../../cmd/kubectl-nodeshim").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	archive := filepath.Join(dir, "kubectl-nodeshim.tar.gz")
	f, err := os.Create(archive)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Archive(f, bin)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	m, err := Manifest("v0.1.0", []Platform{
		{OS: runtime.GOOS, Arch: runtime.GOARCH, URI: "https://example.invalid/kubectl-nodeshim.tar.gz", SHA256: sum},
		{OS: "linux", Arch: "arm64", URI: "https://example.invalid/kubectl-nodeshim-arm64.tar.gz", SHA256: strings.Repeat("0", 64)},
	})
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, Name+".yaml")
	if err := os.WriteFile(manifest, m, 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "krew")
	// krew's list and uninstall want a local index: an empty git
	// repository of plugins stands for krew-index, which this machine
	// cannot clone (an install from a manifest needs none).
	index := filepath.Join(root, "index", "default")
	if err := os.MkdirAll(filepath.Join(index, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(testutil.RequireBinary(t, "git"), "init", "-q", index).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	krew := func(args ...string) (string, error) {
		cmd := exec.Command(krewBin, args...)
		cmd.Env = append(os.Environ(), "KREW_ROOT="+root, "HOME="+dir, "KREW_NO_UPGRADE_CHECK=1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := krew("install", "--manifest="+manifest, "--archive="+archive); err != nil {
		t.Fatalf("krew install: %v\n%s\nmanifest:\n%s", err, out, m)
	}
	plugin := filepath.Join(root, "bin", Binary)
	out, err := exec.Command(plugin, "help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "kubectl nodeshim migrate POD") || !strings.Contains(string(out), "kubectl nodeshim drain NODE") {
		t.Fatalf("%s help: %v\n%s", plugin, err, out)
	}
	if out, err := krew("list"); err != nil || !strings.Contains(out, Name) {
		t.Errorf("krew list: %v\n%s", err, out)
	}
	if out, err := krew("uninstall", Name); err != nil {
		t.Fatalf("krew uninstall: %v\n%s", err, out)
	}
	if _, err := os.Lstat(plugin); !os.IsNotExist(err) {
		t.Errorf("%s after uninstall: %v", plugin, err)
	}

	// An archive that is not the one the manifest names is refused.
	b, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(archive, append(b, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := krew("install", "--manifest="+manifest, "--archive="+archive); err == nil || !strings.Contains(strings.ToLower(out), "checksum") {
		t.Errorf("krew install of a changed archive: %v\n%s", err, out)
	}
}

// TestArchive: one entry, the executable, with a fixed time: the same
// binary makes the same archive.
func TestArchive(t *testing.T) {
	bin := filepath.Join(t.TempDir(), Binary)
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho plugin\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	sa, err := Archive(&a, bin)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := Archive(&b, bin)
	if err != nil || sa != sb || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatalf("two archives of one binary differ: %s %s %v", sa, sb, err)
	}
	gz, err := gzip.NewReader(&a)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	hdr, err := tr.Next()
	if err != nil || hdr.Name != Binary || hdr.Mode != 0o755 {
		t.Fatalf("entry %+v, %v", hdr, err)
	}
	if body, _ := io.ReadAll(tr); string(body) != "#!/bin/sh\necho plugin\n" {
		t.Errorf("body %q", body)
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("a second entry: %v", err)
	}
	if _, err := Archive(io.Discard, t.TempDir()); err == nil {
		t.Error("a directory archived")
	}
}

func TestManifestRefuses(t *testing.T) {
	ok := Platform{OS: "linux", Arch: "amd64", URI: "https://example.invalid/a.tar.gz", SHA256: strings.Repeat("a", 64)}
	for _, tt := range []struct {
		name, version string
		platforms     []Platform
		says          string
	}{
		{"no v", "0.1.0", []Platform{ok}, `version "0.1.0"`},
		{"not semver", "v1.2", []Platform{ok}, `version "v1.2"`},
		{"no platform", "v0.1.0", nil, "no platform"},
		{"twice", "v0.1.0", []Platform{ok, ok}, "linux/amd64 given twice"},
		{"bad sum", "v0.1.0", []Platform{{OS: "linux", Arch: "amd64", URI: "u", SHA256: "abc"}}, "not 64 hex digits"},
		{"no uri", "v0.1.0", []Platform{{OS: "linux", Arch: "amd64", SHA256: ok.SHA256}}, "no uri"},
		{"bad arch", "v0.1.0", []Platform{{OS: "linux", Arch: "x86-64", URI: "u", SHA256: ok.SHA256}}, `"linux"/"x86-64"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Manifest(tt.version, tt.platforms); err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("Manifest: %v, want an error saying %q", err, tt.says)
			}
		})
	}
}
