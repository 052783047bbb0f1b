package criu

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/nodeshim/nodeshim/internal/mountinfo"
)

// ContainerTarget describes the container whose init process is pid and
// whose OCI runtime spec is spec, read from procRoot: what PIDTarget says
// of the process, the CRIU options runc would pass for it
// (ContainerOptionsFromSpec over ReadContainerState), the spec for
// spec.dump, and its overlay writable layer for rootfs-diff.tar. bundle is
// the directory a relative root path in spec is relative to. The caller
// names it (Ref, ID, Runtime, Image).
func ContainerTarget(procRoot string, pid int, spec *specs.Spec, bundle string, now time.Time) (Target, error) {
	t, err := PIDTarget(procRoot, pid, now)
	if err != nil {
		return Target{}, err
	}
	st, err := ReadContainerState(procRoot, pid, spec)
	if err != nil {
		return Target{}, err
	}
	if bundle == "" {
		// A relative root with no bundle known (CRI gives none):
		// the container's root as its init sees it.
		bundle = filepath.Join(procRoot, strconv.Itoa(pid), "root")
		if spec != nil && spec.Root != nil && !filepath.IsAbs(spec.Root.Path) {
			s := *spec
			r := *spec.Root
			r.Path = "."
			s.Root = &r
			opts, err := ContainerOptionsFromSpec(&s, bundle, st)
			if err != nil {
				return Target{}, fmt.Errorf("container pid %d: %w", pid, err)
			}
			return finishContainerTarget(t, opts, spec, st), nil
		}
	}
	opts, err := ContainerOptionsFromSpec(spec, bundle, st)
	if err != nil {
		return Target{}, fmt.Errorf("container pid %d: %w", pid, err)
	}
	return finishContainerTarget(t, opts, spec, st), nil
}

func finishContainerTarget(t Target, opts ContainerOptions, spec *specs.Spec, st ContainerState) Target {
	t.Container, t.Spec, t.Layer = opts, spec, LayerOf(st.Mounts)
	if spec.Process != nil {
		t.Args = spec.Process.Args
	}
	return t
}

// nsFiles names the /proc/PID/ns entries of the namespace types CRIU can
// take as external.
var nsFiles = map[specs.LinuxNamespaceType]string{
	specs.NetworkNamespace: "net",
	specs.PIDNamespace:     "pid",
}

// ReadContainerState reads from procRoot what the kernel shows of the
// container whose init is pid: its mount table, the inodes of its network
// and PID namespaces, which of spec's masked paths are files, its freezer
// cgroup and its stdio.
func ReadContainerState(procRoot string, pid int, spec *specs.Spec) (ContainerState, error) {
	var st ContainerState
	base := filepath.Join(procRoot, strconv.Itoa(pid))
	b, err := os.ReadFile(filepath.Join(base, "mountinfo"))
	if err != nil {
		return st, fmt.Errorf("container pid %d: %w", pid, err)
	}
	if st.Mounts, err = mountinfo.Parse(b); err != nil {
		return st, fmt.Errorf("container pid %d: mountinfo: %w", pid, err)
	}
	st.Namespaces = map[specs.LinuxNamespaceType]uint64{}
	for t, name := range nsFiles {
		var s unix.Stat_t
		p := filepath.Join(base, "ns", name)
		if err := unix.Stat(p, &s); err != nil {
			return st, fmt.Errorf("stat %s: %w", p, err)
		}
		st.Namespaces[t] = s.Ino
	}
	if spec != nil && spec.Linux != nil {
		for _, m := range spec.Linux.MaskedPaths {
			// Through the container's root: a symlink resolves inside it.
			fi, err := os.Stat(filepath.Join(base, "root", m))
			if err == nil && !fi.IsDir() {
				st.MaskedFiles = append(st.MaskedFiles, m)
			}
		}
	}
	if st.FreezerCgroup, err = freezerCgroup(procRoot, pid); err != nil {
		return st, err
	}
	for fd := 0; fd < 3; fd++ {
		l, err := os.Readlink(filepath.Join(base, "fd", strconv.Itoa(fd)))
		if err != nil {
			// A closed stdio fd: runc records it as an empty name too.
			l = ""
		}
		st.Stdio = append(st.Stdio, l)
	}
	return st, nil
}

// LayerOf returns the overlay writable layer of the container root in
// mounts (the last mount at "/"), or the zero Layer if the root is not an
// overlay with an upper directory.
func LayerOf(mounts []mountinfo.Entry) Layer {
	var root *mountinfo.Entry
	for i := range mounts {
		if mounts[i].Point == "/" {
			root = &mounts[i]
		}
	}
	if root == nil || root.FSType != "overlay" {
		return Layer{}
	}
	var l Layer
	for _, o := range root.SuperOptions {
		switch {
		case strings.HasPrefix(o, "upperdir="):
			l.Upper = strings.TrimPrefix(o, "upperdir=")
		case strings.HasPrefix(o, "lowerdir="):
			l.Lower = strings.Split(strings.TrimPrefix(o, "lowerdir="), ":")
		}
	}
	if l.Upper == "" {
		return Layer{}
	}
	return l
}

// freezerCgroup finds the host path of pid's freezer cgroup: the cgroup v1
// freezer hierarchy when the host mounts one, else its cgroup v2
// directory. It returns "" when neither is mounted where nodeshim sees it.
func freezerCgroup(procRoot string, pid int) (string, error) {
	p := filepath.Join(procRoot, strconv.Itoa(pid), "cgroup")
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	var v1, v2 string
	haveV1, haveV2 := false, false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path (cgroups(7))
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2, haveV2 = parts[2], true
		case slices.Contains(strings.Split(parts[1], ","), "freezer"):
			v1, haveV1 = parts[2], true
		}
	}
	self, err := os.ReadFile(filepath.Join(procRoot, "self", "mountinfo"))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", filepath.Join(procRoot, "self", "mountinfo"), err)
	}
	mounts, err := mountinfo.Parse(self)
	if err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(procRoot, "self", "mountinfo"), err)
	}
	for _, m := range mounts {
		if haveV1 && m.FSType == "cgroup" && slices.Contains(m.SuperOptions, "freezer") {
			return cgroupDir(m, v1), nil
		}
	}
	for _, m := range mounts {
		if haveV2 && m.FSType == "cgroup2" {
			return cgroupDir(m, v2), nil
		}
	}
	return "", nil
}

// cgroupDir is the directory of cgroup path cg in hierarchy mount m.
func cgroupDir(m mountinfo.Entry, cg string) string {
	rel, err := filepath.Rel(m.Root, cg)
	if err != nil || strings.HasPrefix(rel, "..") {
		rel = cg
	}
	d := filepath.Join(m.Point, rel)
	if _, err := os.Stat(d); err != nil {
		return ""
	}
	return d
}
