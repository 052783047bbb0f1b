package deploy

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/testenv/dockerfile"
	"github.com/nodeshim/nodeshim/testenv/runtimetest"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// envCriuRoot names a root holding Debian trixie's criu package and its
// libraries unpacked (mk/criu.mk: .tools/criu-trixie), from which the test
// image takes CRIU's files as the Dockerfile's criu stage takes them from
// the package.
const envCriuRoot = "NODESHIM_CRIU_ROOT"

// CRIU's files in the image, at Debian's own paths (the Dockerfile's criu
// stage): CRIU_PROGRAMS (criu at criu.DefaultPath, and the tar, gzip and
// sh it runs), glibc's loader at their ELF interpreter path, and the libraries
// of CRIU_LIBS by soname in imageLibDir.
const (
	imageLoader = "/lib64/ld-linux-x86-64.so.2"
	imageLibDir = "/usr/lib/x86_64-linux-gnu"
)

// dockerArg returns the default value of `ARG name=value` in the
// Dockerfile at path, unquoted.
func dockerArg(path, name string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	v, err := dockerfile.Arg(string(data), name)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// dockerCriu reads the criu stage's CRIU_VERSION, CRIU_PROGRAMS and
// CRIU_LIBS.
func dockerCriu(t *testing.T) (version string, programs, libs []string) {
	t.Helper()
	version, err := dockerArg("../Dockerfile", "CRIU_VERSION")
	if err != nil {
		t.Fatal(err)
	}
	progs, err := dockerArg("../Dockerfile", "CRIU_PROGRAMS")
	if err != nil {
		t.Fatal(err)
	}
	list, err := dockerArg("../Dockerfile", "CRIU_LIBS")
	if err != nil {
		t.Fatal(err)
	}
	return version, strings.Fields(progs), strings.Fields(list)
}

// criuRoot gates t on $NODESHIM_CRIU_ROOT, or else the checkout's
// .tools/criu-trixie where make unpacks it, and returns it.
func criuRoot(t *testing.T) string {
	t.Helper()
	root := os.Getenv(envCriuRoot)
	if root == "" {
		root = "../.tools/criu-trixie"
	}
	_, programs, _ := dockerCriu(t)
	for _, p := range programs {
		if _, err := os.Stat(inRoot(root, p)); err != nil {
			testutil.Skip(t, "needs %s in %s (mk/criu.mk's CRIU_PACKAGES; make unpacks a prefix from an older list again): %v", p, root, err)
		}
	}
	return root
}

// inRoot returns the path of p under root. Packages unpacked with dpkg -x
// have no merged-/usr links (/bin -> usr/bin, /lib64 -> usr/lib64): a p
// outside /usr that is missing from root is looked up under root/usr.
func inRoot(root, p string) string {
	if _, err := os.Lstat(filepath.Join(root, p)); err != nil && !strings.HasPrefix(p, "/usr/") {
		return filepath.Join(root, "usr", p)
	}
	return filepath.Join(root, p)
}

// criuImageFiles are CRIU's files in the image, read from root as the
// Dockerfile's criu stage copies them from the packages (symlinks
// followed): CRIU_PROGRAMS, the loader and CRIU_LIBS.
func criuImageFiles(t *testing.T, root string) []runtimetest.ImageFile {
	t.Helper()
	_, programs, libs := dockerCriu(t)
	paths := append(slices.Clone(programs), imageLoader)
	for _, l := range libs {
		paths = append(paths, filepath.Join(imageLibDir, l))
	}
	var files []runtimetest.ImageFile
	for _, p := range paths {
		data, err := os.ReadFile(inRoot(root, p))
		if err != nil {
			t.Fatalf("CRIU's file %s for the image: %v", p, err)
		}
		files = append(files, runtimetest.ImageFile{Name: strings.TrimPrefix(p, "/"), Mode: 0o755, Data: data})
	}
	return files
}

// imageFiles are the nodeshim image's files, as the Dockerfile's run stage
// assembles them: the static binary bin as /usr/bin/nodeshim (the
// entrypoint), the reporter's binary reporterBin as
// /usr/bin/nodeshim-reporter, and CRIU from root. A file the image gains is
// added here and in the Dockerfile.
func imageFiles(t *testing.T, bin, reporterBin, root string) []runtimetest.ImageFile {
	t.Helper()
	var files []runtimetest.ImageFile
	for _, f := range []struct{ name, path string }{{"usr/bin/nodeshim", bin}, {"usr/bin/nodeshim-reporter", reporterBin}} {
		data, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, runtimetest.ImageFile{Name: f.name, Mode: 0o755, Data: data})
	}
	return append(files, criuImageFiles(t, root)...)
}

// elfInterp returns exe's ELF interpreter ("" for none).
func elfInterp(exe string) (string, error) {
	f, err := elf.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return "", fmt.Errorf("%s: PT_INTERP: %w", exe, err)
			}
			return string(bytes.TrimRight(b, "\x00")), nil
		}
	}
	return "", nil
}

// elfClosure returns the sonames that the executables exes need, directly
// or through another library, resolved in libDir.
func elfClosure(exes []string, libDir string) ([]string, error) {
	seen := map[string]bool{}
	queue := slices.Clone(exes)
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		f, err := elf.Open(path)
		if err != nil {
			return nil, err
		}
		libs, err := f.ImportedLibraries()
		f.Close()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, fmt.Errorf("%s: DT_NEEDED: %w", path, err)
		}
		for _, l := range libs {
			if !seen[l] {
				seen[l] = true
				queue = append(queue, filepath.Join(libDir, l))
			}
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// TestImageCriu holds the Dockerfile's criu stage and the test image to
// each other and to the packages: CRIU_LIBS plus the loader are exactly
// the closure of trixie's criu, tar, gzip and sh (DT_NEEDED, recursively),
// their interpreter is the loader the image carries, and the image's
// files, alone under a new root and with nothing from the host, run criu
// of CRIU_VERSION and tar --gzip (tar, /bin/sh, gzip) as CRIU runs it.
func TestImageCriu(t *testing.T) {
	testutil.RequireRoot(t) // chroot
	root := criuRoot(t)
	version, programs, libs := dockerCriu(t)
	if !slices.Contains(programs, criu.DefaultPath) {
		t.Errorf("CRIU_PROGRAMS %v lack criu.DefaultPath %s", programs, criu.DefaultPath)
	}
	var exes []string
	for _, p := range programs {
		exe := inRoot(root, p)
		exes = append(exes, exe)
		interp, err := elfInterp(exe)
		if err != nil {
			t.Fatal(err)
		}
		if interp != imageLoader {
			t.Errorf("%s's ELF interpreter is %s, the image's loader %s", p, interp, imageLoader)
		}
	}
	needed, err := elfClosure(exes, filepath.Join(root, imageLibDir))
	if err != nil {
		t.Fatal(err)
	}
	want := slices.DeleteFunc(slices.Clone(needed), func(l string) bool { return l == filepath.Base(imageLoader) })
	got := slices.Sorted(slices.Values(libs))
	if !slices.Equal(got, want) {
		t.Errorf("the Dockerfile's CRIU_LIBS are\n  %s\ncriu's closure is\n  %s", strings.Join(got, " "), strings.Join(want, " "))
	}
	// The Dockerfile's criu stage copies to the same paths.
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"$p", imageLoader, imageLibDir + "/$l"} {
		if !strings.Contains(string(data), `/out`+p) {
			t.Errorf("the Dockerfile's criu stage copies nothing to /out%s", p)
		}
	}

	// The image's files alone: criu runs through the image's loader and
	// libraries only.
	dir := t.TempDir()
	for _, f := range criuImageFiles(t, root) {
		p := filepath.Join(dir, f.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f.Data, os.FileMode(f.Mode)); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: dir}
		cmd.Env = []string{}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("chroot %s %s %s: %v\n%s", dir, name, strings.Join(args, " "), err, stderr.Bytes())
		}
		return out
	}
	// As CRIU dumps a tmpfs: tar runs gzip through /bin/sh.
	if gz := run("/usr/bin/tar", "--create", "--gzip", "--directory", "/usr/sbin", "."); !bytes.HasPrefix(gz, []byte{0x1f, 0x8b}) {
		t.Errorf("tar --create --gzip wrote no gzip stream (%d bytes)", len(gz))
	}
	out := run(criu.DefaultPath, "--version")
	v, err := criu.ParseVersion(string(out))
	if err != nil {
		t.Fatal(err)
	}
	if v.String() != version {
		t.Errorf("the image's criu is %s, the Dockerfile's CRIU_VERSION %s", v, version)
	}
}
