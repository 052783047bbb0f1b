package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// Kernel says where the Debian kernel of one label comes from.
type Kernel struct {
	// Label is what KERNELS names, e.g. "6.1"; the guest sees it as NODESHIM_GUEST.
	Label string
	// Suite is the Debian suite that carries the kernel, e.g. "bookworm".
	Suite string
	// Meta is the metapackage whose first dependency is the image package.
	Meta string
	// ImagePrefix is what the image package's name must start with, so that a
	// suite that moves on to another kernel series fails instead of testing
	// the wrong kernel.
	ImagePrefix string
}

// Kernels lists the labels `make vmtest KERNELS=...` accepts.
func Kernels() map[string]Kernel {
	return map[string]Kernel{
		// bookworm's kernel: linux-image-amd64 depends on linux-image-6.1.0-N-amd64.
		"6.1": {Label: "6.1", Suite: "bookworm", Meta: "linux-image-amd64", ImagePrefix: "linux-image-6.1.0-"},
		// trixie's kernel: linux-image-amd64 depends on linux-image-6.12.N+deb13-amd64.
		"6.12": {Label: "6.12", Suite: "trixie", Meta: "linux-image-amd64", ImagePrefix: "linux-image-6.12."},
	}
}

// LookupKernel returns the Kernel of label, or an error that lists the known labels.
func LookupKernel(label string) (Kernel, error) {
	k, ok := Kernels()[label]
	if !ok {
		var known []string
		for l := range Kernels() {
			known = append(known, l)
		}
		return Kernel{}, fmt.Errorf("kernel %q: unknown label (known: %s)", label, strings.Join(sortedCopy(known), " "))
	}
	return k, nil
}

// ErrKernelFetch wraps every failure to get a kernel image, so that `make
// vmtest` can say that the kernel could not be fetched rather than that a
// test failed.
var ErrKernelFetch = errors.New("cannot fetch kernel")

// Runner runs a command with its working directory, returning its standard
// output; standard error is included in the error. Tests replace it.
type Runner func(ctx context.Context, dir string, name string, args ...string) ([]byte, error)

// ExecRunner runs commands for real.
func ExecRunner(ctx context.Context, dir string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s: %w: %s", commandLine(name, args), err, strings.TrimSpace(lastLines(stderr.String(), 15)))
	}
	return out, nil
}

// commandLine shows a command for an error message, without apt's long
// "-o Option=value" pairs.
func commandLine(name string, args []string) string {
	shown := []string{name}
	for i := 0; i < len(args); i++ {
		if args[i] == "-o" {
			i++
			continue
		}
		shown = append(shown, args[i])
	}
	return strings.Join(shown, " ")
}

// Fetcher downloads Debian kernel images through a private apt configuration
// under CacheDir, leaving the machine's own apt sources, lists and caches alone.
type Fetcher struct {
	// CacheDir holds apt's private state and the unpacked kernels.
	CacheDir string
	// Mirror is the Debian archive, e.g. "http://deb.debian.org/debian".
	Mirror string
	// Keyring verifies the archive's Release files.
	Keyring string
	// Run runs apt-get, apt-cache and dpkg-deb.
	Run Runner
	// Refresh resolves the image package again even when a kernel is cached.
	Refresh bool
	// Modules are the modules kept from the kernel package; GuestModules()
	// when nil. A kernel cached with another list is fetched again, so a
	// harness with its own list keeps its own CacheDir.
	Modules []Module
}

// modules returns the modules f keeps.
func (f *Fetcher) modules() []Module {
	if f.Modules != nil {
		return f.Modules
	}
	return GuestModules()
}

// KernelImage is a fetched kernel.
type KernelImage struct {
	// Package is the Debian image package, e.g. linux-image-6.1.0-50-amd64.
	Package string
	// Vmlinuz is the bootable image.
	Vmlinuz string
	// Root holds the package's files the guest gets besides the image:
	// boot/config-<release>, which `nodeshim report` reads, and under
	// lib/modules/<release> the modules of GuestModules, uncompressed, with
	// the package's modules.order and modules.builtin for depmod.
	Root string
}

// Fetch returns the cached kernel of k, fetching it first when it is not
// cached.
func (f *Fetcher) Fetch(ctx context.Context, k Kernel) (KernelImage, error) {
	labelFile := filepath.Join(f.CacheDir, "kernels", "label-"+k.Label)
	if !f.Refresh {
		if b, err := os.ReadFile(labelFile); err == nil {
			img := f.image(strings.TrimSpace(string(b)))
			_, errImage := os.Stat(img.Vmlinuz)
			kept, errRoot := os.ReadFile(filepath.Join(img.Root, "lib", "modules", modulesListFile))
			if errImage == nil && errRoot == nil && string(kept) == modulesList(f.modules()) {
				return img, nil
			}
		}
	}
	pkg, err := f.resolve(ctx, k)
	if err != nil {
		return KernelImage{}, fmt.Errorf("%w %s (Debian %s from %s): %w", ErrKernelFetch, k.Label, k.Suite, f.Mirror, err)
	}
	if err := f.download(ctx, k, pkg); err != nil {
		return KernelImage{}, fmt.Errorf("%w %s (Debian %s from %s, %s): %w", ErrKernelFetch, k.Label, k.Suite, f.Mirror, pkg, err)
	}
	if err := writeFileAtomic(labelFile, []byte(pkg+"\n"), 0o644); err != nil {
		return KernelImage{}, err
	}
	return f.image(pkg), nil
}

// image names the cached files of pkg.
func (f *Fetcher) image(pkg string) KernelImage {
	dir := filepath.Join(f.CacheDir, "kernels", pkg)
	return KernelImage{Package: pkg, Vmlinuz: filepath.Join(dir, "vmlinuz"), Root: filepath.Join(dir, "root")}
}

// aptDir is the private apt directory of one suite.
func (f *Fetcher) aptDir(suite string) string { return filepath.Join(f.CacheDir, "apt", suite) }

// aptOptions points apt at the private sources list, state and cache of suite.
func (f *Fetcher) aptOptions(suite string) []string {
	d := f.aptDir(suite)
	return []string{
		"-o", "Dir::Etc::sourcelist=" + filepath.Join(d, "sources.list"),
		"-o", "Dir::Etc::sourceparts=/dev/null",
		"-o", "Dir::State=" + filepath.Join(d, "state"),
		"-o", "Dir::State::Lists=" + filepath.Join(d, "state", "lists"),
		"-o", "Dir::State::status=" + filepath.Join(d, "state", "status"),
		"-o", "Dir::Cache=" + filepath.Join(d, "cache"),
		"-o", "Acquire::Languages=none",
		"-o", "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false",
		// The private directories belong to root; apt's _apt sandbox user
		// could not write them.
		"-o", "APT::Sandbox::User=root",
	}
}

// SourcesList returns the private sources.list line of suite.
func (f *Fetcher) SourcesList(suite string) string {
	return fmt.Sprintf("deb [signed-by=%s] %s %s main\n", f.Keyring, f.Mirror, suite)
}

// resolve updates the private package lists of k's suite and returns the name
// of the image package that k's metapackage depends on.
func (f *Fetcher) resolve(ctx context.Context, k Kernel) (string, error) {
	d := f.aptDir(k.Suite)
	for _, sub := range []string{"state/lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(d, sub), 0o755); err != nil {
			return "", fmt.Errorf("create apt dir: %w", err)
		}
	}
	if err := writeFileAtomic(filepath.Join(d, "sources.list"), []byte(f.SourcesList(k.Suite)), 0o644); err != nil {
		return "", err
	}
	status := filepath.Join(d, "state", "status")
	if _, err := os.Stat(status); errors.Is(err, os.ErrNotExist) {
		if err := writeFileAtomic(status, nil, 0o644); err != nil {
			return "", err
		}
	}
	opts := f.aptOptions(k.Suite)
	if _, err := f.Run(ctx, d, "apt-get", append(append([]string{"-q"}, opts...), "update")...); err != nil {
		return "", err
	}
	out, err := f.Run(ctx, d, "apt-cache", append(opts, "show", "--no-all-versions", k.Meta)...)
	if err != nil {
		return "", err
	}
	pkg, err := FirstDependency(out)
	if err != nil {
		return "", fmt.Errorf("apt-cache show %s: %w", k.Meta, err)
	}
	if !strings.HasPrefix(pkg, k.ImagePrefix) {
		return "", fmt.Errorf("%s in %s depends on %s, not on a %s* package: the suite has moved to another kernel series", k.Meta, k.Suite, pkg, k.ImagePrefix)
	}
	return pkg, nil
}

// download fetches pkg with apt-get download and unpacks its boot/vmlinuz-*
// and boot/config-* into the cache.
func (f *Fetcher) download(ctx context.Context, k Kernel, pkg string) error {
	img := f.image(pkg)
	dir := filepath.Dir(img.Vmlinuz)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("create kernel cache: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".download-")
	if err != nil {
		return fmt.Errorf("create kernel cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	if _, err := f.Run(ctx, tmp, "apt-get", append(append([]string{"-q"}, f.aptOptions(k.Suite)...), "download", pkg)...); err != nil {
		return err
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, pkg+"_*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("apt-get download %s left %d .deb files in %s", pkg, len(debs), tmp)
	}
	unpacked := filepath.Join(tmp, "root")
	if err := os.Mkdir(unpacked, 0o755); err != nil {
		return fmt.Errorf("unpack %s: %w", debs[0], err)
	}
	// The image, its config and the modules (100-400 MB unpacked), of
	// which keepModules keeps the few the guests load.
	const unpack = `dpkg-deb --fsys-tarfile "$1" | tar -x -C "$2" --wildcards './boot/vmlinuz-*' './boot/config-*' '*/modules/*'`
	if _, err := f.Run(ctx, tmp, "sh", "-c", unpack, "sh", debs[0], unpacked); err != nil {
		return err
	}
	if err := keepModules(ctx, f.Run, unpacked, f.modules()); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(debs[0]), err)
	}
	for _, pattern := range []string{"vmlinuz-*", "config-*"} {
		if m, _ := filepath.Glob(filepath.Join(unpacked, "boot", pattern)); len(m) != 1 {
			return fmt.Errorf("%s holds %d boot/%s files, want 1", filepath.Base(debs[0]), len(m), pattern)
		}
	}
	images, _ := filepath.Glob(filepath.Join(unpacked, "boot", "vmlinuz-*"))
	if err := os.Rename(images[0], filepath.Join(tmp, "vmlinuz")); err != nil {
		return fmt.Errorf("keep %s: %w", images[0], err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("replace %s: %w", dir, err)
	}
	if err := os.Remove(debs[0]); err != nil {
		return fmt.Errorf("remove %s: %w", debs[0], err)
	}
	// tmp now holds vmlinuz and root/boot/config-*: it becomes the cache entry.
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("keep %s: %w", dir, err)
	}
	return nil
}

// dependsName matches one package name at the start of a Depends alternative.
var dependsName = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+`)

// FirstDependency returns the first package named in the Depends field of
// the first stanza of `apt-cache show` output.
func FirstDependency(show []byte) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(show))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break // end of the first stanza
		}
		v, ok := strings.CutPrefix(line, "Depends:")
		if !ok {
			continue
		}
		first := strings.TrimSpace(strings.Split(strings.Split(v, ",")[0], "|")[0])
		name := dependsName.FindString(first)
		if name == "" {
			return "", fmt.Errorf("the Depends field %q names no package", strings.TrimSpace(v))
		}
		return name, nil
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read apt-cache output: %w", err)
	}
	return "", errors.New("no Depends field")
}

// keepModules replaces the module trees that the kernel package unpacked
// under root (lib/modules/<release>, or usr/lib/modules/<release> in a
// merged-/usr package) with root/lib/modules/<release> holding only the
// modules named in mods, uncompressed (busybox's modprobe loads plain .ko
// files), and the package's modules.order, modules.builtin and
// modules.builtin.modinfo. A module that the package does not carry is
// built in or absent: the guest's tests say which. root/lib/modules exists
// afterwards, empty for a package without modules.
func keepModules(ctx context.Context, run Runner, root string, mods []Module) error {
	want := map[string]bool{}
	for _, m := range mods {
		want[m.Name] = true
	}
	var trees []string
	for _, d := range []string{"lib/modules", "usr/lib/modules"} {
		rels, _ := filepath.Glob(filepath.Join(root, d, "*"))
		trees = append(trees, rels...)
	}
	kept := filepath.Join(root, ".modules")
	for _, tree := range trees {
		dst := filepath.Join(kept, filepath.Base(tree))
		for _, name := range []string{"modules.order", "modules.builtin", "modules.builtin.modinfo"} {
			if _, err := os.Stat(filepath.Join(tree, name)); err == nil {
				if err := copyFile(filepath.Join(tree, name), filepath.Join(dst, name), 0o644); err != nil {
					return err
				}
			}
		}
		err := filepath.WalkDir(filepath.Join(tree, "kernel"), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			base, ext, ok := strings.Cut(d.Name(), ".ko")
			if !ok || !want[strings.ReplaceAll(base, "-", "_")] {
				return nil
			}
			rel, err := filepath.Rel(tree, p)
			if err != nil {
				return err
			}
			out := filepath.Join(dst, strings.TrimSuffix(rel, ext))
			if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
				return err
			}
			switch ext {
			case "":
				return copyFile(p, out, 0o644)
			case ".xz", ".zst":
				tool := map[string]string{".xz": "xz", ".zst": "zstd"}[ext]
				if _, err := run(ctx, root, "sh", "-c", tool+` -dc "$1" > "$2"`, "sh", p, out); err != nil {
					return fmt.Errorf("decompress %s: %w", p, err)
				}
				return nil
			default:
				return fmt.Errorf("module %s: unknown compression %s", p, ext)
			}
		})
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("keep the guests' modules: %w", err)
		}
	}
	for _, d := range []string{"lib", "usr"} {
		if err := os.RemoveAll(filepath.Join(root, d)); err != nil {
			return fmt.Errorf("drop the other modules: %w", err)
		}
	}
	if err := os.MkdirAll(kept, 0o755); err != nil {
		return fmt.Errorf("keep the guests' modules: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(root, "lib"), 0o755); err != nil {
		return fmt.Errorf("keep the guests' modules: %w", err)
	}
	if err := os.WriteFile(filepath.Join(kept, modulesListFile), []byte(modulesList(mods)), 0o644); err != nil {
		return fmt.Errorf("keep the guests' modules: %w", err)
	}
	if err := os.Rename(kept, filepath.Join(root, "lib", "modules")); err != nil {
		return fmt.Errorf("keep the guests' modules: %w", err)
	}
	return nil
}

// modulesListFile, under a cached kernel's lib/modules, names the modules
// kept from its package: a kernel cached with another list is fetched again.
const modulesListFile = "nodeshim-guest-modules"

func modulesList(mods []Module) string {
	var b strings.Builder
	for _, m := range mods {
		b.WriteString(m.Name + "\n")
	}
	return b.String()
}
