package restore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/mountinfo"
	"github.com/nodeshim/nodeshim/runtimes/cri"
)

// cgroupKillTimeout bounds how long a failed restore waits for the
// processes it killed in the container's cgroups to be gone.
const cgroupKillTimeout = 10 * time.Second

// containerCgroups are the directories of a container's cgroup in every
// mounted cgroup hierarchy, as the runtime makes them, and what was in
// them before the restore ran (snapshotCgroups), so that taking a failed
// restore down reaches only what it made.
type containerCgroups struct {
	dirs []string
	// existed are the dirs that were there before; before the pids that
	// were in them then.
	existed map[string]bool
	before  map[int]bool
}

// cgroupRelPath is the cgroup path below a hierarchy's root that runc
// gives a container of spec's linux.cgroupsPath p (libcontainer/specconv):
// with the systemd driver "slice:prefix:name" is the scope
// /<slice levels>/<prefix>-<name>.scope (systemd's slice naming, where
// each "-" opens a level; "system.slice:runc:<id>" when p is empty); with
// cgroupfs an absolute p is taken as is and a relative one (the container
// id when p is empty) is below own, the cgroup runc runs in.
func cgroupRelPath(p, id string, systemd bool, own string) string {
	if systemd {
		if p == "" {
			p = "system.slice:runc:" + id
		}
		if parts := strings.Split(p, ":"); len(parts) == 3 && !strings.Contains(p, "/") {
			if parts[0] == "" {
				// runc's default slice.
				p = "system.slice" + p
			}
			return cri.CgroupRelPath(p)
		}
	}
	if p == "" {
		p = id
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join("/", own, p)
	}
	return filepath.Clean(p)
}

// cgroupDirs returns the directory of the cgroup at rel (or, relative to
// the cgroup this process is in, per procCgroup: the contents of
// /proc/self/cgroup) in each cgroup and cgroup2 mount of mounts, each
// hierarchy once; a hierarchy mounted from a sub-tree (a cgroup
// namespace's root) counts when rel is below it.
func cgroupDirs(mounts []mountinfo.Entry, procCgroup []byte, rel func(own string) string) []string {
	// /proc/self/cgroup: "0::/path" for cgroup2, "N:ctrl,ctrl:/path" (or
	// "N:name=systemd:/path") for each v1 hierarchy.
	own := map[string]string{}
	for _, l := range strings.Split(string(procCgroup), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 {
			own[parts[1]] = parts[2]
		}
	}
	var dirs []string
	seen := map[string]bool{}
	for _, e := range mounts {
		var key string
		switch e.FSType {
		case "cgroup2":
			key = ""
		case "cgroup":
			var ctrls []string
			for _, o := range e.SuperOptions {
				if slices.Contains(v1CgroupControllers, o) || strings.HasPrefix(o, "name=") {
					ctrls = append(ctrls, o)
				}
			}
			if len(ctrls) == 0 {
				continue
			}
			key = strings.Join(ctrls, ",")
		default:
			continue
		}
		if seen[key] {
			continue
		}
		p := rel(ownCgroup(own, key))
		r, err := filepath.Rel(e.Root, p)
		if err != nil || r == ".." || strings.HasPrefix(r, "../") {
			continue
		}
		seen[key] = true
		dirs = append(dirs, filepath.Join(e.Point, r))
	}
	return dirs
}

// v1CgroupControllers are the controllers a v1 cgroup mount's super
// options can name.
var v1CgroupControllers = []string{
	"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "hugetlb",
	"memory", "misc", "net_cls", "net_prio", "perf_event", "pids", "rdma",
}

// ownCgroup finds the hierarchy key's line of /proc/self/cgroup, whose
// controllers the kernel lists in its own order ("cpu,cpuacct").
func ownCgroup(own map[string]string, key string) string {
	if p, ok := own[key]; ok {
		return p
	}
	want := strings.Split(key, ",")
	slices.Sort(want)
	for k, p := range own {
		got := strings.Split(k, ",")
		slices.Sort(got)
		if slices.Equal(got, want) {
			return p
		}
	}
	return "/"
}

// snapshotCgroups finds the container's cgroup directories for spec's
// cgroupsPath, as the runtime (with --systemd-cgroup or not) will make
// them, and notes which are there and the processes in them before the
// restore runs.
func (r *Restore) snapshotCgroups() *containerCgroups {
	p := ""
	if r.Spec.Linux != nil {
		p = r.Spec.Linux.CgroupsPath
	}
	systemd := slices.ContainsFunc(r.Call.Global, func(a string) bool {
		return a == "--systemd-cgroup" || a == "--systemd-cgroup=true"
	})
	cg := &containerCgroups{existed: map[string]bool{}, before: map[int]bool{}}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return cg
	}
	mounts, err := mountinfo.Parse(b)
	if err != nil {
		return cg
	}
	self, _ := os.ReadFile("/proc/self/cgroup")
	cg.dirs = cgroupDirs(mounts, self, func(own string) string { return cgroupRelPath(p, r.Call.ID, systemd, own) })
	for _, d := range cg.dirs {
		if _, err := os.Stat(d); err != nil {
			continue
		}
		cg.existed[d] = true
		for _, pid := range cgroupPids(d) {
			cg.before[pid] = true
		}
	}
	return cg
}

// cgroupPids lists the processes in the cgroup at dir and below it.
func cgroupPids(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// kill takes down what a failed restore left in the container's cgroups:
// CRIU killed mid-restore leaves the tasks it was restoring, which it had
// put in their own session, alive and waiting for it, so neither the
// runtime's process group nor `runc delete` (the container has no state
// yet) reaches them. Every process that was not there before is killed,
// until none is left or timeout passes; then the cgroups the restore made
// are removed. A cgroup2 cgroup with nothing of its own before is killed
// whole through cgroup.kill (Linux 5.14, kernel/cgroup/cgroup.c
// cgroup_kill_write: descendants included, and no fork escapes it);
// elsewhere each pid of cgroup.procs gets SIGKILL, again while any is
// left, and a v1 freezer cgroup is thawed, as a frozen task does not die.
func (cg *containerCgroups) kill(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, d := range cg.dirs {
			left = append(left, cg.killIn(d)...)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v of the container's cgroups %s still there %s after SIGKILL", left, cg.dirs, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var errs []error
	for _, d := range cg.dirs {
		if cg.existed[d] {
			continue
		}
		if err := removeCgroup(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// killIn kills the processes in the cgroup at dir that were not there
// before the restore, and returns those that still are.
func (cg *containerCgroups) killIn(dir string) []int {
	var left []int
	for _, pid := range cgroupPids(dir) {
		if !cg.before[pid] {
			left = append(left, pid)
		}
	}
	if len(left) == 0 {
		return nil
	}
	if len(cg.before) == 0 {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err == nil {
			return left
		}
	}
	for _, pid := range left {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if b, err := os.ReadFile(filepath.Join(p, "freezer.state")); err == nil && strings.TrimSpace(string(b)) != "THAWED" {
			_ = os.WriteFile(filepath.Join(p, "freezer.state"), []byte("THAWED"), 0)
		}
		return nil
	})
	return left
}

// removeCgroup removes the empty cgroup at dir and those below it, the
// deepest first; one that is gone already is no error.
func removeCgroup(dir string) error {
	var sub []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			sub = append(sub, p)
		}
		return nil
	})
	slices.SortFunc(sub, func(a, b string) int { return len(b) - len(a) })
	for _, p := range sub {
		if err := unix.Rmdir(p); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove the cgroup %s: %w", p, err)
		}
	}
	return nil
}
