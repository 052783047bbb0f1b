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
	passed := r.runPodPass(roots, &tree)
	out := make([]PodUsage, 0, len(tree.Pods))
	var st Stats
	for _, p := range tree.Pods {
		rel, err := filepath.Rel(mem, p.Path)
		if err != nil {
			r.EndPass()
			return PodTree{}, nil, fmt.Errorf("pod cgroup %s: %w", p.Path, err)
		}
		u := PodUsage{UID: p.UID, QOS: p.QOS, Cgroup: "/" + rel, Containers: len(p.Containers)}
		v2 := filepath.Join(roots.V2, rel)
		// The pod's figures from the kernel pass, when it ran and the
		// pod existed then.
		var ps *PassStats
		if passed != nil {
			if ino, err := dirInode(v2); err == nil {
				if s, ok := passed[ino]; ok {
					ps = &s
				}
			}
		}
		switch {
		case roots.MemoryV1 != "":
			m, err := r.ReadMemoryV1(p.Path)
			if err != nil {
				tree.Vanished++
				continue
			}
			u.Memory = PodMemory{Err: m.Err, Source: SourceV1, Usage: m.Usage, WorkingSet: m.WorkingSet(), Limit: m.Limit, OOMKills: m.OOMKill}
		case ps != nil && ps.Memory.Err != nil:
			// The pass found no memory controller in the pod's
			// cgroup: its memory files do not exist either.
			u.Memory = PodMemory{Err: fmt.Errorf("%s: %w", p.Path, ps.Memory.Err), Source: SourceV2}
		case ps != nil:
			// memory.current, memory.max and oom_kill from the pass;
			// memory.stat, for the working set, from its file.
			st.Memory = ps.Memory
			if err := r.Read(p.Path, statMemoryStat, &st); err != nil {
				tree.Vanished++
				continue
			}
			u.Memory = PodMemory{Err: st.Memory.Err, Source: SourceV2, Usage: st.Memory.Current, WorkingSet: st.Memory.WorkingSet(),
				Limit: st.Memory.Max, OOMKills: ps.OOMKill}
		default:
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
		if ps != nil {
			u.Pressure = ps.Pressure
		} else if err := r.Read(v2, StatPressure, &st); err != nil {
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

// podPassDepth is how far below kubepods pods are: kubepods/pod<uid> for
// Guaranteed pods, kubepods/<qos>/pod<uid> for the others.
const podPassDepth = 2

// runPodPass reads the pods' PSI and memory counters with r's PassSource,
// when it has one, and returns them by cgroup id; nil, with tree.PassErr
// set when the pass failed, makes ReadPodUsage read every file.
func (r *Reader) runPodPass(roots PodRoots, tree *PodTree) map[uint64]PassStats {
	if r.pass == nil {
		return nil
	}
	rel, err := filepath.Rel(roots.MemoryHierarchy(), tree.Kubepods)
	if err != nil {
		tree.PassErr = fmt.Errorf("kubepods cgroup %s: %w", tree.Kubepods, err)
		return nil
	}
	if r.passed == nil {
		r.passed = make(map[uint64]PassStats, len(tree.Pods)+8)
	}
	clear(r.passed)
	if err := r.pass.Pass(filepath.Join(roots.V2, rel), podPassDepth, func(s *PassStats) { r.passed[s.ID] = *s }); err != nil {
		// No kubepods in the cgroup v2 hierarchy (a hybrid node whose
		// runtime leaves it alone) is no failure: no pod has PSI there,
		// which the files say of each.
		if !errors.Is(err, ErrVanished) {
			tree.PassErr = err
		}
		return nil
	}
	return r.passed
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
