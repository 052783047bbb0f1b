package bpf

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nodeshim/nodeshim/internal/procfs"

	"golang.org/x/sys/unix"
)

// CgroupTargetFromPath returns the Target that records the cgroup v2
// subtree at path, which must lie under the hierarchy mounted at root. The
// cgroup id is the inode number of the directory (kernfs node id on 64-bit
// kernels), the level its depth below root.
func CgroupTargetFromPath(root, path string) (Target, error) {
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return Target{}, fmt.Errorf("cgroup %s is not under the cgroup v2 hierarchy at %s", path, root)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return Target{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return Target{}, fmt.Errorf("%s is not on a cgroup v2 filesystem (magic %#x)", path, st.Type)
	}
	var fst unix.Stat_t
	if err := unix.Stat(path, &fst); err != nil {
		return Target{}, fmt.Errorf("stat %s: %w", path, err)
	}
	level := 0
	if rel != "." {
		level = len(strings.Split(rel, string(filepath.Separator)))
	}
	return CgroupTarget(fst.Ino, level), nil
}

// PIDTarget returns the Target that records process pid: its whole mount
// namespace when it runs in one other than nodeshim's own (a container), else
// its process tree as procRoot shows it now (see Recorder.AddDescendants).
func PIDTarget(procRoot string, pid int) (Target, error) {
	ns, err := procfs.MountNS(procRoot, pid)
	if err != nil {
		return Target{}, fmt.Errorf("process %d: %w", pid, err)
	}
	self, err := procfs.MountNS(procRoot, os.Getpid())
	if err != nil {
		return Target{}, err
	}
	if ns != self {
		return MountNSTarget(ns), nil
	}
	pids, err := procfs.Descendants(procRoot, pid)
	if err != nil {
		return Target{}, err
	}
	return ProcessTreeTarget(pids...), nil
}

// CgroupPathTarget returns the Target that records the cgroup at path, taken
// relative to the cgroup v2 mount cg2 unless absolute: its cgroup v2 subtree
// or, for a cgroup v1 path on a hybrid host, the process tree of its current
// processes and whatever they fork.
func CgroupPathTarget(cg2, path string) (Target, error) {
	abs := path
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(cg2, abs)
	}
	if t, err := CgroupTargetFromPath(cg2, abs); err == nil {
		return t, nil
	}
	procs := filepath.Join(abs, "cgroup.procs")
	data, err := os.ReadFile(procs)
	if err != nil {
		return Target{}, fmt.Errorf("cgroup %s: %w", path, err)
	}
	var pids []uint32
	for _, field := range strings.Fields(string(data)) {
		p, err := strconv.ParseUint(field, 10, 32)
		if err != nil {
			return Target{}, fmt.Errorf("parse %s: %q: %w", procs, field, err)
		}
		pids = append(pids, uint32(p))
	}
	if len(pids) == 0 {
		return Target{}, fmt.Errorf("cgroup v1 %s has no processes to follow", abs)
	}
	return ProcessTreeTarget(pids...), nil
}

// AddDescendants adds to a process-tree recording the processes below its
// target's that were forked between the procRoot scan that made the target
// and the attachment of the fork tracking.
func (r *Recorder) AddDescendants(procRoot string) error {
	var roots []int
	for _, k := range r.Target().Keys {
		roots = append(roots, int(k))
	}
	pids, err := procfs.Descendants(procRoot, roots...)
	if err != nil {
		return err
	}
	for _, p := range pids {
		if err := r.AddProcess(p); err != nil {
			return err
		}
	}
	return nil
}
