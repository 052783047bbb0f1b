package cgroup

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
)

// Where a pod's memory figures come from.
const (
	SourceV2 = "cgroup v2"
	SourceV1 = "cgroup v1"
)

// PodRoots say where ReadPodUsage finds the pods' cgroups.
type PodRoots struct {
	// V2 is the cgroup2 mount; MemoryV1 the v1 memory hierarchy's mount
	// on a hybrid node ("" on a pure v2 node), where the pods' memory
	// cgroups then are.
	V2, MemoryV1 string
	// Parent is the cgroup under which kubelet's kubepods cgroup lives,
	// relative to each hierarchy's root: kubelet's --cgroup-root, "/" by
	// default.
	Parent string
}

// PodMemory is a pod cgroup's memory use and where it was read.
type PodMemory struct {
	// Err, wrapping ErrMissing, ErrVanished or ErrMalformed, says why the
	// figures are unknown.
	Err error
	// Source is SourceV2 or SourceV1.
	Source            string
	Usage, WorkingSet uint64
	Limit             Limit
	OOMKills          uint64
}

// PodUsage is one pod's cgroup figures: memory from the hierarchy that
// holds its memory cgroup, PSI from its cgroup v2 directory.
type PodUsage struct {
	UID string
	QOS QOSClass
	// Cgroup is the pod's cgroup path below the hierarchies' roots.
	Cgroup     string
	Containers int
	Memory     PodMemory
	// Pressure is indexed like Resources. On a hybrid node it is known
	// where the runtime put the pod in the unified hierarchy too (runc
	// does); otherwise each Err wraps ErrMissing.
	Pressure [len(Resources)]Pressure
}

// MemoryHierarchy is the mount whose tree holds the pods' memory cgroups.
func (r PodRoots) MemoryHierarchy() string {
	if r.MemoryV1 != "" {
		return r.MemoryV1
	}
	return r.V2
}

// ReadPodUsage discovers the pods under roots (in the memory hierarchy,
// with cgroupfs or systemd naming) and reads each pod's figures. A pod
// removed during the read is left out. Each call is a pass of r (see
// Reader.EndPass).
func ReadPodUsage(roots PodRoots, r *Reader) (PodTree, []PodUsage, error) {
	mem := roots.MemoryHierarchy()
	tree, err := DiscoverPods(filepath.Join(mem, roots.Parent))
	if err != nil {
		r.EndPass() // no pods read: a Reader that keeps files closes them all
		return PodTree{}, nil, err
	}
	out := make([]PodUsage, 0, len(tree.Pods))
	var st Stats
	for _, p := range tree.Pods {
		rel, err := filepath.Rel(mem, p.Path)
		if err != nil {
			r.EndPass()
			return PodTree{}, nil, fmt.Errorf("pod cgroup %s: %w", p.Path, err)
		}
		u := PodUsage{UID: p.UID, QOS: p.QOS, Cgroup: "/" + rel, Containers: len(p.Containers)}
		if roots.MemoryV1 != "" {
			m, err := r.ReadMemoryV1(p.Path)
			if err != nil {
				tree.Vanished++
				continue
			}
			u.Memory = PodMemory{Err: m.Err, Source: SourceV1, Usage: m.Usage, WorkingSet: m.WorkingSet(), Limit: m.Limit, OOMKills: m.OOMKill}
		} else {
			if err := r.Read(p.Path, podStats&^StatPressure, &st); err != nil {
				tree.Vanished++
				continue
			}
			u.Memory = PodMemory{Err: st.Memory.Err, Source: SourceV2, Usage: st.Memory.Current, WorkingSet: st.Memory.WorkingSet(),
				Limit: st.Memory.Max, OOMKills: st.MemoryEvents.OOMKill}
		}
		if u.Memory.Err != nil {
			u.Memory = PodMemory{Err: u.Memory.Err, Source: u.Memory.Source}
		}
		v2 := filepath.Join(roots.V2, rel)
		if err := r.Read(v2, StatPressure, &st); err != nil {
			if errors.Is(err, ErrVanished) && roots.MemoryV1 != "" {
				err = fmt.Errorf("%s: the pod has no cgroup v2 directory on this hybrid node: %w", v2, ErrMissing)
			}
			for i := range u.Pressure {
				u.Pressure[i] = Pressure{Err: err}
			}
		} else {
			u.Pressure = st.Pressure
		}
		out = append(out, u)
	}
	// The pods not read in this pass are gone: a Reader that keeps files
	// open closes theirs.
	r.EndPass()
	SortByPressure(out)
	return tree, out, nil
}

// podStats are the stat groups ReadPodUsage reads of a pod on a cgroup v2
// node.
const podStats = StatMemory | StatMemoryEvents | StatPressure

// pressureKey orders pods by memory, then IO, then CPU "some" avg10;
// unknown PSI counts as none.
func pressureKey(u PodUsage) [len(Resources) + 1]uint64 {
	var k [len(Resources) + 1]uint64
	for i, r := range []Resource{Memory, IO, CPU} {
		if p := u.PressureOf(r); p.Err == nil {
			k[i] = uint64(p.PSI.Some.Avg10)
		}
	}
	if u.Memory.Err == nil {
		k[len(Resources)] = u.Memory.WorkingSet
	}
	return k
}

// PressureOf returns the pod's pressure of resource r.
func (u PodUsage) PressureOf(r Resource) Pressure {
	s := Stats{Pressure: u.Pressure}
	return s.PressureOf(r)
}

// SortByPressure sorts pods most pressured first: by memory, IO and CPU
// "some" avg10, then by memory working set, then by UID.
func SortByPressure(pods []PodUsage) {
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := pressureKey(pods[i]), pressureKey(pods[j])
		for x := range a {
			if a[x] != b[x] {
				return a[x] > b[x]
			}
		}
		return pods[i].UID < pods[j].UID
	})
}
