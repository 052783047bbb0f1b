package nodevm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodeshim/nodeshim/runtimes/restoring"
	"github.com/nodeshim/nodeshim/testenv/vmtest"
)

// Binaries are the host-built programs the node carries.
type Binaries struct {
	// Runc is runc (built with seccomp).
	Runc string
	// ContainerdDir holds containerd, containerd-shim-runc-v2 and ctr.
	ContainerdDir string
	// Containerd24Dir, when set, holds the same of containerd v2.4, for
	// Containerd24Bin.
	Containerd24Dir string
	// Crictl is crictl.
	Crictl string
	// Nodeshim is nodeshim, built for this run.
	Nodeshim string
	// Kubelet, when set, is kubelet.
	Kubelet string
	// RuntimeClass, when set, is the directory of nodeshim-runc and
	// nodeshim-runc-restore, built for this run, for RuntimeClassBin.
	RuntimeClass string
	// Test is the scenarios' test binary.
	Test string
	// Images are OCI image tars for the node's NodeLib/images.
	Images []string
	// Tools are more programs for NodeBin, by name (kubectl,
	// checkpointctl).
	Tools map[string]string
}

// containerdPrograms are the programs of a containerd directory.
var containerdPrograms = []string{"containerd", "containerd-shim-runc-v2", "ctr"}

// programs maps each binary to its name under NodeBin.
func (b Binaries) programs() map[string]string {
	m := map[string]string{
		"runc":     b.Runc,
		"crictl":   b.Crictl,
		"nodeshim": b.Nodeshim,
	}
	for _, c := range containerdPrograms {
		m[c] = filepath.Join(b.ContainerdDir, c)
	}
	if b.Kubelet != "" {
		m["kubelet"] = b.Kubelet
	}
	for name, p := range b.Tools {
		m[name] = p
	}
	return m
}

// Stage makes the node's root filesystem tree at dir: the cached rootfs
// (hard links: nothing of it is written in place, a file the node needs
// different is unlinked and written anew), the kernel's modules and config
// from kernelRoot (a vmtest.KernelImage's Root), the binaries, and
// NodeFiles, then extra (KubeFiles). depmod runs in the tree (chroot) for
// the kernel's release.
func Stage(ctx context.Context, run vmtest.Runner, rootfs, kernelRoot, dir string, bins Binaries, pauseImage, testTimeout string, extra ...File) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clean %s: %w", dir, err)
	}
	if _, err := run(ctx, filepath.Dir(dir), "cp", "-al", rootfs, dir); err != nil {
		return fmt.Errorf("stage the node's root filesystem: %w", err)
	}
	release, err := kernelRelease(kernelRoot)
	if err != nil {
		return err
	}
	modules := filepath.Join(dir, "usr/lib/modules", release)
	if err := os.MkdirAll(filepath.Dir(modules), 0o755); err != nil {
		return fmt.Errorf("stage the kernel's modules: %w", err)
	}
	if _, err := run(ctx, dir, "cp", "-r", filepath.Join(kernelRoot, "lib/modules", release), modules); err != nil {
		return fmt.Errorf("stage the kernel's modules: %w", err)
	}
	if _, err := run(ctx, dir, "chroot", dir, "/usr/sbin/depmod", "-a", release); err != nil {
		return fmt.Errorf("depmod %s in the node: %w", release, err)
	}
	configs, _ := filepath.Glob(filepath.Join(kernelRoot, "boot", "config-*"))
	for _, c := range configs {
		if err := copyInto(c, filepath.Join(dir, "boot", filepath.Base(c)), 0o644); err != nil {
			return err
		}
	}
	for name, src := range bins.programs() {
		if err := copyInto(src, filepath.Join(dir, NodeBin, name), 0o755); err != nil {
			return err
		}
	}
	if bins.Containerd24Dir != "" {
		for _, c := range containerdPrograms {
			if err := copyInto(filepath.Join(bins.Containerd24Dir, c), filepath.Join(dir, Containerd24Bin, c), 0o755); err != nil {
				return err
			}
		}
	}
	if bins.RuntimeClass != "" {
		for _, name := range restoring.Binaries {
			if err := copyInto(filepath.Join(bins.RuntimeClass, name), filepath.Join(dir, RuntimeClassBin, name), 0o755); err != nil {
				return err
			}
		}
	}
	if err := copyInto(bins.Test, filepath.Join(dir, NodeLib, TestBinary), 0o755); err != nil {
		return err
	}
	for _, img := range bins.Images {
		if err := copyInto(img, filepath.Join(dir, NodeLib, "images", filepath.Base(img)), 0o644); err != nil {
			return err
		}
	}
	var load []string
	for _, m := range Modules() {
		if !isBootModule(m.Name) {
			load = append(load, m.Name)
		}
	}
	for _, f := range append(NodeFiles(machineID(), pauseImage, testTimeout, presentModules(modules, load)), extra...) {
		if err := writeNodeFile(dir, f); err != nil {
			return err
		}
	}
	return nil
}

func isBootModule(name string) bool {
	for _, m := range BootModules() {
		if m.Name == name {
			return true
		}
	}
	return false
}

// presentModules keeps the names of mods that the kernel carries as
// modules under dir (the others are built in, or absent from this kernel).
func presentModules(dir string, mods []string) []string {
	have := map[string]bool{}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(d.Name(), ".ko") {
			have[strings.ReplaceAll(strings.TrimSuffix(d.Name(), ".ko"), "-", "_")] = true
		}
		return nil
	})
	var out []string
	for _, m := range mods {
		if have[m] {
			out = append(out, m)
		}
	}
	return out
}

// kernelRelease is the one release under kernelRoot/lib/modules.
func kernelRelease(kernelRoot string) (string, error) {
	rels, _ := filepath.Glob(filepath.Join(kernelRoot, "lib/modules", "*"))
	var dirs []string
	for _, r := range rels {
		if fi, err := os.Stat(r); err == nil && fi.IsDir() {
			dirs = append(dirs, filepath.Base(r))
		}
	}
	if len(dirs) != 1 {
		return "", fmt.Errorf("%w: %s/lib/modules holds %d releases (%s), want 1", errNoModules, kernelRoot, len(dirs), strings.Join(dirs, " "))
	}
	return dirs[0], nil
}

func machineID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// writeNodeFile writes f under root, replacing what the rootfs had there
// by unlinking it first: the staging tree shares its inodes with the cached
// rootfs, which must not change.
func writeNodeFile(root string, f File) error {
	p := filepath.Join(root, f.Path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("node file %s: %w", f.Path, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("node file %s: %w", f.Path, err)
	}
	if f.Link != "" {
		if err := os.Symlink(f.Link, p); err != nil {
			return fmt.Errorf("node file %s: %w", f.Path, err)
		}
		return nil
	}
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.Mode)
	if err != nil {
		return fmt.Errorf("node file %s: %w", f.Path, err)
	}
	if _, err := io.WriteString(out, f.Data); err != nil {
		out.Close()
		return fmt.Errorf("node file %s: %w", f.Path, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("node file %s: %w", f.Path, err)
	}
	return nil
}

// copyInto copies src to dst, unlinking what dst was first (see
// writeNodeFile).
func copyInto(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s into the node: %w", src, err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("copy %s into the node: %w", src, err)
	}
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("copy %s into the node: %w", src, err)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("copy %s into the node: %w", src, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}

// DiskImage writes the tree dir as an ext4 filesystem image of sizeMB
// (sparse) at out, with mkfs.ext4 -d (no loop device, no mount).
func DiskImage(ctx context.Context, run vmtest.Runner, dir, out string, sizeMB int) error {
	if err := os.Remove(out); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("replace %s: %w", out, err)
	}
	if _, err := run(ctx, filepath.Dir(out), "mkfs.ext4", "-q", "-F", "-L", Hostname, "-d", dir, out, fmt.Sprintf("%dM", sizeMB)); err != nil {
		return fmt.Errorf("make the node's disk image: %w", err)
	}
	return nil
}

// Initramfs packs the initramfs that mounts the node's disk: busybox, the
// BootModules the kernel carries as modules (from kernelRoot) and
// InitScript, into out.
func Initramfs(ctx context.Context, busybox, kernelRoot, stage, out string) error {
	if err := os.RemoveAll(stage); err != nil {
		return fmt.Errorf("clean %s: %w", stage, err)
	}
	release, err := kernelRelease(kernelRoot)
	if err != nil {
		return err
	}
	if err := copyInto(busybox, filepath.Join(stage, "bin", "busybox"), 0o755); err != nil {
		return err
	}
	src := filepath.Join(kernelRoot, "lib/modules", release)
	dst := filepath.Join(stage, "lib/modules", release)
	want := map[string]bool{}
	for _, m := range BootModules() {
		want[m.Name] = true
	}
	var load []string
	err = filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := strings.ReplaceAll(strings.TrimSuffix(d.Name(), ".ko"), "-", "_")
		if strings.HasSuffix(d.Name(), ".ko") && !want[name] {
			return nil
		}
		return copyInto(p, filepath.Join(dst, rel), 0o644)
	})
	if err != nil {
		return fmt.Errorf("stage the initramfs's modules: %w", err)
	}
	var names []string
	for _, m := range BootModules() {
		names = append(names, m.Name)
	}
	load = presentModules(dst, names)
	if err := writeNodeFile(stage, File{Path: "/init", Mode: 0o755, Data: InitScript(load)}); err != nil {
		return err
	}
	return vmtest.Pack(ctx, stage, out)
}
