package deploy

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/nodeshim/nodeshim/criu"
	"github.com/nodeshim/nodeshim/internal/runtimetest"
	"github.com/nodeshim/nodeshim/internal/testutil"
)

// envCriuRoot names a root holding Debian trixie's criu package and its
// libraries unpacked (mk/criu.mk: .tools/criu-trixie), from which the test
// image takes CRIU's files as the Dockerfile's criu stage takes them from
// the package.
const envCriuRoot = "NODESHIM_CRIU_ROOT"

// CRIU's files in the image, at Debian's own paths (the Dockerfile's criu
// stage): criu at criu.DefaultPath, glibc's loader at criu's ELF
// interpreter path, and the libraries of CRIU_LIBS by soname in imageLibDir.
const (
	imageLoader = "/lib64/ld-linux-x86-64.so.2"
	imageLibDir = "/usr/lib/x86_64-linux-gnu"
)

// dockerArg returns the default value of `ARG name=value` in the
// Dockerfile, unquoted.
func dockerArg(dockerfile, name string) (string, error) {
	data, err := os.ReadFile(dockerfile)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(data), "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "ARG "+name+"=")
		if !ok {
			continue
		}
		words, err := shellWords(v)
		if err != nil || len(words) != 1 {
			return "", fmt.Errorf("%s: ARG %s=%s: want one word (%v)", dockerfile, name, v, err)
		}
		return words[0], nil
	}
	return "", fmt.Errorf("%s: no ARG %s=", dockerfile, name)
}

// dockerCriu reads the criu stage's CRIU_VERSION and CRIU_LIBS.
func dockerCriu(t *testing.T) (version string, libs []string) {
	t.Helper()
	version, err := dockerArg("../Dockerfile", "CRIU_VERSION")
	if err != nil {
		t.Fatal(err)
	}
	list, err := dockerArg("../Dockerfile", "CRIU_LIBS")
	if err != nil {
		t.Fatal(err)
	}
	return version, strings.Fields(list)
}

// criuRoot gates t on $NODESHIM_CRIU_ROOT and returns it.
func criuRoot(t *testing.T) string {
	t.Helper()
	root := os.Getenv(envCriuRoot)
	if root == "" {
		testutil.Skip(t, "needs $%s: a root with Debian trixie's criu and its libraries unpacked (make builds .tools/criu-trixie)", envCriuRoot)
	}
	testutil.RequireFile(t, filepath.Join(root, criu.DefaultPath))
	return root
}

// criuImageFiles are CRIU's files in the image, read from root as the
// Dockerfile's criu stage copies them from the package (symlinks
// followed): criu, the loader and CRIU_LIBS.
func criuImageFiles(t *testing.T, root string) []runtimetest.ImageFile {
	t.Helper()
	_, libs := dockerCriu(t)
	paths := []string{criu.DefaultPath, imageLoader}
	for _, l := range libs {
		paths = append(paths, filepath.Join(imageLibDir, l))
	}
	var files []runtimetest.ImageFile
	for _, p := range paths {
		data, err := os.ReadFile(filepath.Join(root, p))
		if errors.Is(err, os.ErrNotExist) && !strings.HasPrefix(p, "/usr/") {
			// A package unpacked with dpkg -x has no merged-/usr links
			// (/lib64 -> usr/lib64): the file is under usr/.
			data, err = os.ReadFile(filepath.Join(root, "usr", p))
		}
		if err != nil {
			t.Fatalf("CRIU's file %s for the image: %v", p, err)
		}
		files = append(files, runtimetest.ImageFile{Name: strings.TrimPrefix(p, "/"), Mode: 0o755, Data: data})
	}
	return files
}

// imageFiles are the nodeshim image's files, as the Dockerfile's run stage
// assembles them: the static binary bin as /usr/bin/nodeshim (the
// entrypoint) and CRIU from root. A file the image gains is added here and
// in the Dockerfile.
func imageFiles(t *testing.T, bin, root string) []runtimetest.ImageFile {
	t.Helper()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	files := []runtimetest.ImageFile{{Name: "usr/bin/nodeshim", Mode: 0o755, Data: data}}
	return append(files, criuImageFiles(t, root)...)
}

// elfClosure returns the sonames that exe needs, directly or through
// another library, resolved in libDir, and exe's ELF interpreter.
func elfClosure(exe, libDir string) (needed []string, interp string, err error) {
	f, err := elf.Open(exe)
	if err != nil {
		return nil, "", err
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				f.Close()
				return nil, "", fmt.Errorf("%s: PT_INTERP: %w", exe, err)
			}
			interp = string(bytes.TrimRight(b, "\x00"))
		}
	}
	f.Close()
	seen := map[string]bool{}
	queue := []string{exe}
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		f, err := elf.Open(path)
		if err != nil {
			return nil, "", err
		}
		libs, err := f.ImportedLibraries()
		f.Close()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return nil, "", fmt.Errorf("%s: DT_NEEDED: %w", path, err)
		}
		for _, l := range libs {
			if !seen[l] {
				seen[l] = true
				queue = append(queue, filepath.Join(libDir, l))
			}
		}
	}
	for l := range seen {
		needed = append(needed, l)
	}
	slices.Sort(needed)
	return needed, interp, nil
}

// TestImageCriu holds the Dockerfile's criu stage and the test image to
// each other and to the package: CRIU_LIBS plus the loader are exactly the
// closure of trixie's criu (DT_NEEDED, recursively), criu's interpreter is
// the loader the image carries, and the image's files, alone under a new
// root, run criu of CRIU_VERSION with nothing from the host.
func TestImageCriu(t *testing.T) {
	testutil.RequireRoot(t) // chroot
	root := criuRoot(t)
	version, libs := dockerCriu(t)
	needed, interp, err := elfClosure(filepath.Join(root, criu.DefaultPath), filepath.Join(root, imageLibDir))
	if err != nil {
		t.Fatal(err)
	}
	if interp != imageLoader {
		t.Errorf("criu's ELF interpreter is %s, the image's loader %s", interp, imageLoader)
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
	for _, p := range []string{criu.DefaultPath, imageLoader, imageLibDir + "/$l"} {
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
	cmd := exec.Command(criu.DefaultPath, "--version")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: dir}
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chroot %s %s --version: %v\n%s", dir, criu.DefaultPath, err, out)
	}
	v, err := criu.ParseVersion(string(out))
	if err != nil {
		t.Fatal(err)
	}
	if v.String() != version {
		t.Errorf("the image's criu is %s, the Dockerfile's CRIU_VERSION %s", v, version)
	}
}
