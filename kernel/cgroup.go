package kernel

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// CgroupMode is how the cgroup hierarchies of a node are laid out.
type CgroupMode string

// The cgroup layouts a node can have.
const (
	// CgroupUnified is cgroup v2 alone, mounted at /sys/fs/cgroup.
	CgroupUnified CgroupMode = "unified"
	// CgroupHybrid is v1 hierarchies at /sys/fs/cgroup/* with cgroup2
	// mounted beside them (systemd's /sys/fs/cgroup/unified).
	CgroupHybrid CgroupMode = "hybrid"
	// CgroupLegacy is v1 hierarchies only.
	CgroupLegacy CgroupMode = "legacy"
	// CgroupNone means no cgroup filesystem is mounted.
	CgroupNone CgroupMode = "none"
)

// cgroupRoot is where the kubelet and runc expect cgroups.
const cgroupRoot = "/sys/fs/cgroup"

// v1Controllers are the cgroup v1 controller names that can appear in the
// super options of a cgroup mount.
var v1Controllers = []string{
	"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer", "hugetlb",
	"memory", "misc", "net_cls", "net_prio", "perf_event", "pids", "rdma",
}

// CgroupLayout is where the cgroup hierarchies are mounted.
type CgroupLayout struct {
	Mode CgroupMode `json:"mode"`
	// V2 is the mount point of cgroup2, as the host sees it; "" if none.
	V2 string `json:"v2,omitempty"`
	// V1 maps each mounted v1 controller to its mount point.
	V1 map[string]string `json:"v1,omitempty"`
}

// CgroupLayoutOf works out the cgroup layout from a mount table.
func CgroupLayoutOf(mounts []Mount) CgroupLayout {
	l := CgroupLayout{V1: map[string]string{}}
	for _, m := range mounts {
		switch m.FSType {
		case "cgroup2":
			if l.V2 == "" || m.Point == cgroupRoot {
				l.V2 = m.Point
			}
		case "cgroup":
			for _, o := range m.SuperOptions {
				if slices.Contains(v1Controllers, o) {
					if _, seen := l.V1[o]; !seen {
						l.V1[o] = m.Point
					}
				}
			}
		}
	}
	switch {
	case l.V2 != "" && len(l.V1) == 0:
		l.Mode = CgroupUnified
	case l.V2 != "":
		l.Mode = CgroupHybrid
	case len(l.V1) > 0:
		l.Mode = CgroupLegacy
	default:
		l.Mode = CgroupNone
	}
	return l
}

func (l CgroupLayout) v1Names() []string {
	names := make([]string, 0, len(l.V1))
	for c := range l.V1 {
		names = append(names, c)
	}
	sort.Strings(names)
	return names
}

// v2Controllers reads cgroup.controllers of the cgroup2 root.
func (l CgroupLayout) v2Controllers(h *Host) ([]string, error) {
	p := filepath.Join(h.Path(l.V2), "cgroup.controllers")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return strings.Fields(string(b)), nil
}

func hostLayout(h *Host) (CgroupLayout, *Finding) {
	if h.MountsErr != nil {
		f := Findingf(Unknown, "%v", h.MountsErr)
		return CgroupLayout{}, &f
	}
	return CgroupLayoutOf(h.Mounts), nil
}

func probeCgroupV2(_ context.Context, h *Host) Finding {
	l, bad := hostLayout(h)
	if bad != nil {
		return *bad
	}
	switch l.Mode {
	case CgroupUnified:
		if l.V2 != cgroupRoot {
			return Findingf(Degraded, "cgroup2 mounted at %s, not at %s where the kubelet and runc look", l.V2, cgroupRoot)
		}
		return Findingf(Supported, "cgroup2 mounted at %s, no v1 hierarchies", l.V2)
	case CgroupHybrid:
		return Findingf(Degraded, "hybrid: cgroup2 at %s, v1 hierarchies for %s; the kubelet uses v1, in maintenance mode since Kubernetes 1.31",
			l.V2, strings.Join(l.v1Names(), " "))
	case CgroupLegacy:
		return Findingf(Degraded, "v1 only (%s); cgroup v1 is in maintenance mode since Kubernetes 1.31", strings.Join(l.v1Names(), " "))
	default:
		return Findingf(Unsupported, "no cgroup or cgroup2 filesystem in the mount table")
	}
}

// kubeletControllers are the controllers the kubelet cannot run pods without
// (cm.RequiredCgroups... in pkg/kubelet/cm: cpu, cpuset, memory, pids).
var kubeletControllers = []string{"cpu", "cpuset", "memory", "pids"}

func probeCgroupControllers(_ context.Context, h *Host) Finding {
	l, bad := hostLayout(h)
	if bad != nil {
		return *bad
	}
	have := map[string]string{}
	var where []string
	if l.Mode == CgroupUnified {
		cs, err := l.v2Controllers(h)
		if err != nil {
			return Findingf(Unknown, "%v", err)
		}
		for _, c := range cs {
			have[c] = "v2"
		}
		where = append(where, "v2: "+strings.Join(cs, " "))
	} else {
		for c := range l.V1 {
			have[c] = "v1"
		}
		if len(l.V1) > 0 {
			where = append(where, "v1: "+strings.Join(l.v1Names(), " "))
		}
		if l.V2 != "" {
			cs, err := l.v2Controllers(h)
			if err != nil {
				return Findingf(Unknown, "%v", err)
			}
			where = append(where, "v2 (unused by the kubelet): "+strings.Join(cs, " "))
		}
	}
	var missing []string
	for _, c := range kubeletControllers {
		if have[c] == "" {
			missing = append(missing, c)
		}
	}
	ev := strings.Join(where, "; ")
	if ev == "" {
		ev = "no cgroup hierarchy mounted"
	}
	if len(missing) > 0 {
		return Findingf(Unsupported, "missing %s; %s", strings.Join(missing, " "), ev)
	}
	if have["io"] == "" && have["blkio"] == "" {
		return Findingf(Degraded, "no io/blkio controller (no I/O stats or limits); %s", ev)
	}
	return Findingf(Supported, "%s", ev)
}

// nodeshimV2Controllers are what nodeshim's cgroup v2 stats watcher reads.
var nodeshimV2Controllers = []string{"cpu", "io", "memory", "pids"}

func probeCgroupV2Controllers(_ context.Context, h *Host) Finding {
	l, bad := hostLayout(h)
	if bad != nil {
		return *bad
	}
	if l.V2 == "" {
		return Findingf(Unsupported, "no cgroup2 mount")
	}
	cs, err := l.v2Controllers(h)
	if err != nil {
		return Findingf(Unknown, "%v", err)
	}
	var missing []string
	for _, c := range nodeshimV2Controllers {
		if !slices.Contains(cs, c) {
			missing = append(missing, c)
		}
	}
	got := strings.Join(cs, " ")
	if got == "" {
		got = "none"
	}
	if len(missing) > 0 {
		var bound []string
		for _, c := range missing {
			if mp, ok := l.V1[c]; ok {
				bound = append(bound, c+"@"+mp)
			}
		}
		ev := fmt.Sprintf("cgroup2 at %s offers %s; missing %s", l.V2, got, strings.Join(missing, " "))
		if len(bound) > 0 {
			ev += " (held by v1: " + strings.Join(bound, " ") + ")"
		}
		return Findingf(Unsupported, "%s", ev)
	}
	return Findingf(Supported, "cgroup2 at %s offers %s", l.V2, got)
}

func probeCgroupCPUStat(_ context.Context, h *Host) Finding {
	l, bad := hostLayout(h)
	if bad != nil {
		return *bad
	}
	if l.V2 == "" {
		return Findingf(Unsupported, "no cgroup2 mount")
	}
	p := filepath.Join(h.Path(l.V2), "cpu.stat")
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Findingf(Unsupported, "no cpu.stat in the cgroup2 root %s", l.V2)
	}
	if err != nil {
		return Findingf(Unknown, "read %s: %v", p, err)
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return Findingf(Supported, "%s/cpu.stat: %s", l.V2, first)
}

func probeCgroupFreezer(_ context.Context, h *Host) Finding {
	l, bad := hostLayout(h)
	if bad != nil {
		return *bad
	}
	v2 := ""
	if l.V2 != "" {
		v2 = findChildFile(h.Path(l.V2), "cgroup.freeze")
	}
	v2ev := "no child cgroup of the cgroup2 root to look at"
	switch {
	case l.V2 == "":
		v2ev = "no cgroup2 mount"
	case v2 != "":
		v2ev = "v2 freezer: " + filepath.Join(l.V2, v2, "cgroup.freeze")
	case hasChildDir(h.Path(l.V2)):
		v2ev = "no cgroup.freeze in the children of " + l.V2
	}
	if l.Mode == CgroupUnified {
		switch {
		case v2 != "":
			return Findingf(Supported, "%s", v2ev)
		case hasChildDir(h.Path(l.V2)):
			return Findingf(Unsupported, "%s (cgroup v2 freezer needs 5.2)", v2ev)
		default:
			return Findingf(Unknown, "%s", v2ev)
		}
	}
	if mp, ok := l.V1["freezer"]; ok {
		// In hybrid and legacy mode runc freezes through the v1 freezer.
		return Findingf(Supported, "v1 freezer at %s (used in %s mode); %s", mp, l.Mode, v2ev)
	}
	return Findingf(Unsupported, "no v1 freezer hierarchy in %s mode; %s", l.Mode, v2ev)
}

// findChildFile returns the name of the first child directory of dir (in
// name order) that holds file, or "".
func findChildFile(dir, file string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, e.Name(), file)); err == nil {
			return e.Name()
		}
	}
	return ""
}

func hasChildDir(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.IsDir() {
			return true
		}
	}
	return false
}
