package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nodeshim/nodeshim/criu"
)

// DefaultRestoreDir holds the bundles of containers restored from CRI
// archives.
const DefaultRestoreDir = "/var/lib/nodeshim/restored"

// DefaultRuncRoot is runc's state root for containers nodeshim restores:
// a root of its own, so that no runtime mistakes them for its own.
const DefaultRuncRoot = "/run/nodeshim/runc"

// ErrNotContainerdArchive: the archive is not of a containerd CRI container.
var ErrNotContainerdArchive = errors.New("not a containerd CRI container's checkpoint archive")

// RestoreOptions configure RestoreContainerd.
type RestoreOptions struct {
	// Criu restores the process tree (runc runs it as "criu" from PATH).
	Criu criu.Binary
	// Runc is the runc binary; "runc" on PATH when empty.
	Runc string
	// RuncRoot is runc's --root; DefaultRuncRoot when empty.
	RuncRoot string
	// Ctr is containerd's ctr binary, which mounts the archive's image;
	// "ctr" on PATH when empty.
	Ctr string
	// ContainerdAddress is containerd's socket; ctr's default when empty.
	ContainerdAddress string
	// Namespace is the containerd namespace of the image; "k8s.io" (the
	// CRI plugin's) when empty.
	Namespace string
	// Dir receives a bundle directory per restored container;
	// DefaultRestoreDir when empty.
	Dir string
}

// Restored is a container restored from a CRI archive: a runc container
// outside the CRI runtime, in the namespaces of the pod it was in.
type Restored struct {
	// ID is its runc container id under RuncRoot.
	ID string
	// Pid is its init process in the host pid namespace.
	Pid int
	// Bundle holds config.json, the root filesystem (Rootfs, the image
	// mounted by containerd with the archive's changes), the unpacked
	// archive and container.log (its stdout and stderr).
	Bundle, Rootfs string
	// RuncRoot is runc's --root that knows the container.
	RuncRoot string
	// Image is the image its root filesystem comes from.
	Image string
	// Took is the whole restore.
	Took time.Duration
}

// RestoreContainerd brings a containerd CRI container's archive back as a
// running runc container on this node, the way containerd 2.x restores
// one through runc: the archive's image is mounted read-write by
// containerd (ctr images mount) as a fresh root, rootfs-diff.tar and
// deleted.files are applied to it, spec.dump becomes the bundle's
// config.json with that root and a cgroup of its own beside the
// original's, and `runc restore` has CRIU restore the process tree in it,
// its network namespace and bind mounts being those of its pod, which must
// still exist. The container's stdout and stderr go to container.log in the
// bundle. On failure nothing is left: the image is unmounted and the bundle
// removed.
func RestoreContainerd(ctx context.Context, archive string, o RestoreOptions) (r Restored, err error) {
	start := time.Now()
	if o.Runc == "" {
		o.Runc = "runc"
	}
	if o.RuncRoot == "" {
		o.RuncRoot = DefaultRuncRoot
	}
	if o.Ctr == "" {
		o.Ctr = "ctr"
	}
	if o.Namespace == "" {
		o.Namespace = "k8s.io"
	}
	if o.Dir == "" {
		o.Dir = DefaultRestoreDir
	}
	f, err := os.Open(archive)
	if err != nil {
		return r, fmt.Errorf("open %s: %w", archive, err)
	}
	defer f.Close()
	if _, err := criu.ValidateArchive(f); err != nil {
		return r, fmt.Errorf("%s: %w", archive, err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		return r, fmt.Errorf("seek %s: %w", archive, err)
	}
	meta, err := criu.ReadArchiveMeta(f)
	if err != nil {
		return r, fmt.Errorf("%s: %w", archive, err)
	}
	if meta.Engine != criu.EngineContainerd {
		return r, fmt.Errorf("%s: archive of engine %q: %w", archive, meta.Engine, ErrNotContainerdArchive)
	}
	r.Image = meta.Config.RootfsImageRef
	if r.Image == "" {
		r.Image = meta.Config.RootfsImage
	}
	if r.Image == "" {
		return r, fmt.Errorf("%s: %w: config.dump names no image", archive, criu.ErrInvalidArchive)
	}
	var spec specs.Spec
	if err := json.Unmarshal(meta.SpecDump, &spec); err != nil {
		return r, fmt.Errorf("%s: %w: %s: %w", archive, criu.ErrInvalidArchive, criu.SpecDump, err)
	}
	if spec.Root == nil || spec.Process == nil || spec.Linux == nil {
		return r, fmt.Errorf("%s: %w: %s has no root, process or linux section", archive, criu.ErrInvalidArchive, criu.SpecDump)
	}
	if spec.Hooks != nil {
		// runc would run them on this node, as root, before the
		// container: commands an archive names are never run.
		return r, fmt.Errorf("%s: %w: %s has hooks, which a restore would run on this node", archive, criu.ErrInvalidArchive, criu.SpecDump)
	}

	r.ID, r.RuncRoot = restoredID(meta.Config.Name), o.RuncRoot
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return r, fmt.Errorf("create %s: %w", o.Dir, err)
	}
	r.Bundle = filepath.Join(o.Dir, r.ID)
	if err := os.Mkdir(r.Bundle, 0o700); err != nil {
		return r, fmt.Errorf("create %s: %w", r.Bundle, err)
	}
	var cleanup []func() error
	defer func() {
		if err == nil {
			return
		}
		for i := len(cleanup) - 1; i >= 0; i-- {
			err = errors.Join(err, cleanup[i]())
		}
	}()
	cleanup = append(cleanup, func() error { return os.RemoveAll(r.Bundle) })

	unpacked := filepath.Join(r.Bundle, "archive")
	if err := os.Mkdir(unpacked, 0o700); err != nil {
		return r, fmt.Errorf("create %s: %w", unpacked, err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		return r, fmt.Errorf("seek %s: %w", archive, err)
	}
	if err := criu.Unpack(f, unpacked); err != nil {
		return r, fmt.Errorf("unpack %s: %w", archive, err)
	}

	r.Rootfs = filepath.Join(r.Bundle, "rootfs")
	if err := os.Mkdir(r.Rootfs, 0o755); err != nil {
		return r, fmt.Errorf("create %s: %w", r.Rootfs, err)
	}
	ctr := func(args ...string) error {
		global := []string{"--namespace", o.Namespace}
		if o.ContainerdAddress != "" {
			global = append(global, "--address", o.ContainerdAddress)
		}
		out, err := exec.CommandContext(ctx, o.Ctr, append(global, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	// r.Image was checked against the reference grammar where the
	// archive was read (archive.ReadMeta); "--" ends the flags anyway.
	if err := ctr("images", "mount", "--rw", "--", r.Image, r.Rootfs); err != nil {
		return r, fmt.Errorf("restore %s: %w", archive, err)
	}
	cleanup = append(cleanup, func() error {
		// Not ctx: it may be what ended, and the mount must go anyway.
		out, err := exec.Command(o.Ctr, "--namespace", o.Namespace, "--address", o.ContainerdAddress, "images", "unmount", "--rm", "--", r.Rootfs).CombinedOutput()
		if o.ContainerdAddress == "" {
			out, err = exec.Command(o.Ctr, "--namespace", o.Namespace, "images", "unmount", "--rm", "--", r.Rootfs).CombinedOutput()
		}
		if err != nil {
			return fmt.Errorf("ctr images unmount %s: %w: %s", r.Rootfs, err, strings.TrimSpace(string(out)))
		}
		return nil
	})
	if err := criu.ApplyRootfsDiff(unpacked, r.Rootfs); err != nil {
		return r, fmt.Errorf("restore %s: %w", archive, err)
	}

	spec.Root.Path = r.Rootfs
	if spec.Linux.CgroupsPath != "" {
		// Beside the original's, which may still be in use.
		spec.Linux.CgroupsPath = path.Join(path.Dir(spec.Linux.CgroupsPath), r.ID)
	}
	b, err := json.Marshal(&spec)
	if err != nil {
		return r, fmt.Errorf("encode config.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(r.Bundle, "config.json"), b, 0o600); err != nil {
		return r, fmt.Errorf("write config.json: %w", err)
	}

	pid, err := runcRestore(ctx, o, r, unpacked)
	if err != nil {
		return r, fmt.Errorf("restore %s: %w", archive, err)
	}
	r.Pid = pid
	r.Took = time.Since(start)
	return r, nil
}

// runcRestore runs `runc restore --detach` of the bundle's container from
// the images under unpacked, with stdout and stderr on a pipe that a
// detached cat copies to container.log (CRIU reconnects the dumped
// container's stdio pipes to the restoring runc's, see descriptors.json).
func runcRestore(ctx context.Context, o RestoreOptions, r Restored, unpacked string) (int, error) {
	logPath := filepath.Join(r.Bundle, "container.log")
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return 0, fmt.Errorf("create %s: %w", logPath, err)
	}
	defer logFile.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer pw.Close()
	relay := exec.Command("cat")
	relay.Stdin, relay.Stdout = pr, logFile
	relay.SysProcAttr = detached()
	err = relay.Start()
	pr.Close()
	if err != nil {
		return 0, fmt.Errorf("start the log relay: %w", err)
	}
	// The relay ends with the container (end of its pipe); no one waits
	// for it but init.
	_ = relay.Process.Release()

	bin, err := os.MkdirTemp("", "nodeshim-criu-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(bin)
	if err := os.Symlink(o.Criu.Path, filepath.Join(bin, "criu")); err != nil {
		return 0, err
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer devNull.Close()
	pidFile := filepath.Join(r.Bundle, "pid")
	work := filepath.Join(r.Bundle, "work")
	cmd := exec.CommandContext(ctx, o.Runc, "--root", o.RuncRoot, "restore", "--detach",
		"--bundle", r.Bundle, "--image-path", filepath.Join(unpacked, criu.ImagesDir),
		"--work-path", work, "--pid-file", pidFile, "--", r.ID)
	cmd.Stdin, cmd.Stdout = devNull, pw
	// runc's own stderr too: the container inherits it.
	cmd.Stderr = pw
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if err := cmd.Run(); err != nil {
		msg := ""
		if b, rerr := os.ReadFile(logPath); rerr == nil {
			msg = strings.TrimSpace(string(b))
		}
		if b, rerr := os.ReadFile(filepath.Join(work, "restore.log")); rerr == nil {
			msg += "; restore.log: " + criuErrors(string(b))
		}
		return 0, fmt.Errorf("runc restore %s: %w: %s", r.ID, err, msg)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, fmt.Errorf("runc restore %s: %w", r.ID, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("runc restore %s: pid file says %q", r.ID, b)
	}
	return pid, nil
}

// criuErrors picks CRIU's error lines from a log.
func criuErrors(log string) string {
	var errs []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "Error (") && !strings.Contains(l, "RLIMIT_NOFILE") {
			errs = append(errs, strings.TrimSpace(l))
		}
	}
	if len(errs) > 5 {
		errs = errs[len(errs)-5:]
	}
	return strings.Join(errs, "; ")
}

// restoredID names a restored container after the original, with a random
// suffix so that restoring one archive twice makes two containers.
func restoredID(name string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // crypto/rand does not fail on Linux
	if name == "" {
		name = "container"
	}
	return "restored-" + name + "-" + hex.EncodeToString(b)
}

// detached runs a process in a session of its own, so that it outlives
// nodeshim and no terminal signal reaches it.
func detached() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }
