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

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/internal/mountinfo"
	"github.com/nodeshim/nodeshim/kernel/capability"
)

// CgroupLayoutOf works out the cgroup layout from a mount table, as package
// cgroup does for nodeshim's own readers, in the report's terms.
func CgroupLayoutOf(mounts []mountinfo.Entry) capability.CgroupLayout {
	cl := cgroup.LayoutOf(mounts)
	l := capability.CgroupLayout{Mode: cgroupMode(cl.Mode()), V2: cl.V2, V1: map[string]string{}}
	for _, c := range cl.V1 {
		l.V1[c.Name] = c.Point
	}
	return l
}

func cgroupMode(m cgroup.Mode) capability.CgroupMode {
	switch m {
	case cgroup.Unified:
		return capability.CgroupUnified
	case cgroup.Hybrid:
		return capability.CgroupHybrid
	case cgroup.Legacy:
		return capability.CgroupLegacy
	default:
		return capability.CgroupNone
	}
}

func v1Names(l capability.CgroupLayout) []string {
	names := make([]string, 0, len(l.V1))
	for c := range l.V1 {
		names = append(names, c)
	}
	sort.Strings(names)
	return names
}

// v2Controllers reads cgroup.controllers of the cgroup2 root.
func v2Controllers(l capability.CgroupLayout, h *Host) ([]string, error) {
	p := filepath.Join(h.Path(l.V2), "cgroup.controllers")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return strings.Fields(string(b)), nil
}

func hostLayout(h *Host) (capability.CgroupLayout, *capability.Finding) {
	if h.MountsErr != nil {
		f := capability.Findingf(capability.Unknown, "%v", h.MountsErr)
		return capability.CgroupLayout{}, &f
	}
	return CgroupLayoutOf(h.Mounts), nil
}

func probeCgroupV2(_ context.Context, h *Host) capability.Finding {
	l, bad := hostLayout(h)
	if bad != nil {
		return *bad
	}
	switch l.Mode {
	case capability.CgroupUnified:
		if l.V2 != cgroup.DefaultMountPoint {
			return capability.Findingf(capability.Degraded, "cgroup2 mounted at %s, not at %s where the kubelet and runc look", l.V2, cgroup.DefaultMountPoint)
		}
		return capability.Findingf(capability.Supported, "cgroup2 mounted at %s, no v1 hierarchies", l.V2)
	case capability.CgroupHybrid:
		return capability.Findingf(capability.Degraded, "hybrid: cgroup2 at %s, v1 hierarchies for %s; the kubelet uses v1, in maintenance mode since Kubernetes 1.31",
			l.V2, strings.Join(v1Names(l), " "))
	case capability.CgroupLegacy:
		return capability.Findingf(capability.Degraded, "v1 only (%s); cgroup v1 is in maintenance mode since Kubernetes 1.31", strings.Join(v1Names(l), " "))
	default:
		return capability.Findingf(capability.Unsupported, "no cgroup or cgroup2 filesystem in the mount table")
	}
}

// kubeletControllers are the controllers the kubelet cannot run pods without
// (cm.RequiredCgroups... in pkg/kubelet/cm: cpu, cpuset, memory, pids).
var kubeletControllers = []string{"cpu", "cpuset", "memory", "pids"}

func probeCgroupControllers(_ context.Context, h *Host) capability.Finding {
	l, bad := hostLayout(h)
	if bad != nil {
		return *bad
	}
	have := map[string]string{}
	var where []string
	if l.Mode == capability.CgroupUnified {
		cs, err := v2Controllers(l, h)
		if err != nil {
			return capability.Findingf(capability.Unknown, "%v", err)
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
			where = append(where, "v1: "+strings.Join(v1Names(l), " "))
		}
		if l.V2 != "" {
			cs, err := v2Controllers(l, h)
			if err != nil {
				return capability.Findingf(capability.Unknown, "%v", err)
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
		return capability.Findingf(capability.Unsupported, "missing %s; %s", strings.Join(missing, " "), ev)
	}
	if have["io"] == "" && have["blkio"] == "" {
		return capability.Findingf(capability.Degraded, "no io/blkio controller (no I/O stats or limits); %s", ev)
	}
	return capability.Findingf(capability.Supported, "%s", ev)
}

// nodeshimV2Controllers are what nodeshim's cgroup v2 stats watcher reads.
var nodeshimV2Controllers = []string{"cpu", "io", "memory", "pids"}

func probeCgroupV2Controllers(_ context.Context, h *Host) capability.Finding {
	l, bad := hostLayout(h)
	if bad != nil {
		return *bad
	}
	if l.V2 == "" {
		return capability.Findingf(capability.Unsupported, "no cgroup2 mount")
	}
	cs, err := v2Controllers(l, h)
	if err != nil {
		return capability.Findingf(capability.Unknown, "%v", err)
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
		return capability.Findingf(capability.Unsupported, "%s", ev)
	}
	return capability.Findingf(capability.Supported, "cgroup2 at %s offers %s", l.V2, got)
}

func probeCgroupCPUStat(_ context.Context, h *Host) capability.Finding {
	l, bad := hostLayout(h)
	if bad != nil {
		return *bad
	}
	if l.V2 == "" {
		return capability.Findingf(capability.Unsupported, "no cgroup2 mount")
	}
	p := filepath.Join(h.Path(l.V2), "cpu.stat")
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return capability.Findingf(capability.Unsupported, "no cpu.stat in the cgroup2 root %s", l.V2)
	}
	if err != nil {
		return capability.Findingf(capability.Unknown, "read %s: %v", p, err)
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return capability.Findingf(capability.Supported, "%s/cpu.stat: %s", l.V2, first)
}

func probeCgroupFreezer(_ context.Context, h *Host) capability.Finding {
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
	if l.Mode == capability.CgroupUnified {
		switch {
		case v2 != "":
			return capability.Findingf(capability.Supported, "%s", v2ev)
		case hasChildDir(h.Path(l.V2)):
			return capability.Findingf(capability.Unsupported, "%s (cgroup v2 freezer needs 5.2)", v2ev)
		default:
			return capability.Findingf(capability.Unknown, "%s", v2ev)
		}
	}
	if mp, ok := l.V1["freezer"]; ok {
		// In hybrid and legacy mode runc freezes through the v1 freezer,
		// which works on any kernel but is in maintenance mode with v1.
		return capability.Findingf(capability.Degraded, "v1 freezer at %s (used in %s mode); %s", mp, l.Mode, v2ev)
	}
	return capability.Findingf(capability.Unsupported, "no v1 freezer hierarchy in %s mode; %s", l.Mode, v2ev)
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
