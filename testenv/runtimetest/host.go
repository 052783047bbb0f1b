package runtimetest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodeshim/nodeshim/internal/mountinfo"
)

// mountsUnder returns the mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("runtimetest: %w", err)
	}
	entries, err := mountinfo.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("runtimetest: /proc/self/mountinfo: %w", err)
	}
	var points []string
	for _, e := range entries {
		if e.Point == dir || strings.HasPrefix(e.Point, dir+"/") {
			points = append(points, e.Point)
		}
	}
	// Later mounts may sit on top of earlier ones: undo them in reverse.
	for i, j := 0, len(points)-1; i < j; i, j = i+1, j-1 {
		points[i], points[j] = points[j], points[i]
	}
	return points, nil
}

// RemoveAll detaches every mount at or below dir (stacked ones too, as a
// second podman storage root leaves on its overlay directory) and removes
// dir: for a test's own runtime state, whose mounts are expected. A
// directory still busy (EBUSY: a runtime's clean-up process mounting or
// holding it a moment longer), or filled again while it is removed
// (ENOTEMPTY: that process writing into it after podman rm returned), is
// retried, detaching again, up to removeAttempts times.
func RemoveAll(dir string) error {
	var err error
	for range removeAttempts {
		if err = removeAllOnce(dir); !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.ENOTEMPTY) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// removeAttempts bounds RemoveAll's retries of a busy directory.
const removeAttempts = 50

func removeAllOnce(dir string) error {
	points, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("runtimetest: unmount %s: %w", p, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("runtimetest: %w", err)
	}
	return nil
}

// unmountUnder detaches every mount at or below dir and returns an error
// naming them: a runtime that cleaned up after itself leaves none.
func unmountUnder(dir string) error {
	points, err := mountsUnder(dir)
	if err != nil || len(points) == 0 {
		return err
	}
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(append([]error{fmt.Errorf("runtimetest: %d mounts left under %s: %s", len(points), dir, strings.Join(points, ", "))}, errs...)...)
}

// cgroupMounts returns the mount points of every cgroup hierarchy (v1 and
// the unified one).
func cgroupMounts() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("runtimetest: %w", err)
	}
	entries, err := mountinfo.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("runtimetest: /proc/self/mountinfo: %w", err)
	}
	var points []string
	for _, e := range entries {
		if e.FSType == "cgroup" || e.FSType == "cgroup2" {
			points = append(points, e.Point)
		}
	}
	return points, nil
}

// removeCgroups removes the cgroup directory rel (e.g. "/nsrt-0123abcd")
// and everything below it in every hierarchy, deepest first. A cgroup that
// still has processes refuses (EBUSY) and is reported.
func removeCgroups(rel string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		root := filepath.Join(m, rel)
		var dirs []string
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("runtimetest: %w", err))
			continue
		}
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := rmdirRetry(d); err != nil {
				errs = append(errs, fmt.Errorf("runtimetest: remove cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry removes a cgroup directory, retrying briefly on EBUSY: the
// kernel frees a cgroup whose last task has just exited asynchronously.
func rmdirRetry(dir string) error {
	var err error
	for range 50 {
		err = syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// processesWith returns the pids of the processes whose command line
// contains arg as one argument, and their command lines.
func processesWith(arg string) (map[int]string, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("runtimetest: %w", err)
	}
	found := map[int]string{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue // exited meanwhile
		}
		for _, a := range bytes.Split(cmdline, []byte{0}) {
			if string(a) == arg {
				found[pid] = strings.Join(strings.Fields(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))), " ")
				break
			}
		}
	}
	return found, nil
}

// waitProcessesGone waits up to timeout for the processes with arg among
// their arguments to exit.
func waitProcessesGone(arg string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if procs, err := processesWith(arg); err != nil || len(procs) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killProcessesWith kills (SIGKILL) every process that has arg among its
// arguments and returns an error naming them.
func killProcessesWith(arg, what string) error {
	procs, err := processesWith(arg)
	if err != nil || len(procs) == 0 {
		return err
	}
	var names []string
	for pid, cmd := range procs {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		names = append(names, fmt.Sprintf("%d (%s)", pid, cmd))
	}
	sort.Strings(names)
	return fmt.Errorf("runtimetest: killed %d %s left running: %s", len(procs), what, strings.Join(names, "; "))
}

// existed reports whether path exists; Close removes directories the Env
// created on the host only when they did not exist before.
func existed(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// crunHybridWrapper is run in crun's place on a hybrid cgroup layout whose
// unified hierarchy has controllers (here: hugetlb). crun refuses such a
// layout outright ("cgroups in hybrid mode not supported, drop all
// controllers from cgroupv2", libcrun/cgroup.c) whatever its cgroup
// manager; runc uses the v1 hierarchies. The wrapper runs crun in a mount
// namespace of its own (private propagation: nothing reaches the host) in
// which /sys/fs/cgroup/unified is unmounted, so that crun sees the legacy
// v1 layout and puts the container into the v1 hierarchies as runc does.
// Everything else (state, sockets, rootfs paths) is the same filesystem.
const crunHybridWrapper = `#!/bin/sh
# crun in a private mount namespace without the unified cgroup hierarchy
# (see testenv/runtimetest: crun refuses a hybrid layout with v2 controllers).
exec %[1]s --mount --propagation private /bin/sh -c 'umount %[2]s && exec "$0" "$@"' %[3]s "$@"
`

// unifiedHybrid is where a hybrid layout mounts cgroup2.
const unifiedHybrid = "/sys/fs/cgroup/unified"

// crunPath returns the crun to run: crun itself, or on a hybrid layout
// whose unified hierarchy has controllers, a wrapper written to
// dir/bin/crun (named crun so that podman and containerd identify the
// runtime by its name as usual).
func crunPath(dir, crun, unshare string) (string, error) {
	ctrls, err := os.ReadFile(filepath.Join(unifiedHybrid, "cgroup.controllers"))
	if err != nil || len(bytes.TrimSpace(ctrls)) == 0 {
		return crun, nil
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", fmt.Errorf("crun wrapper: %w", err)
	}
	path := filepath.Join(bin, "crun")
	if existed(path) {
		return path, nil
	}
	script := fmt.Sprintf(crunHybridWrapper, unshare, unifiedHybrid, crun)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("crun wrapper: %w", err)
	}
	return path, nil
}
