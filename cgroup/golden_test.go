package cgroup

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/cgroups/v3/cgroup2"

	"github.com/nodeshim/nodeshim/testenv/golden"
)

// errString renders err for a golden file: its sentinel class and its
// message with the testdata location made relative.
func errString(err error, root string) string {
	if err == nil {
		return ""
	}
	class := "other"
	switch {
	case errors.Is(err, ErrVanished):
		class = "vanished"
	case errors.Is(err, ErrMissing):
		class = "missing"
	case errors.Is(err, ErrMalformed):
		class = "malformed"
	}
	return class + ": " + strings.ReplaceAll(err.Error(), root, "$ROOT")
}

type goldenStats struct {
	Path         string
	ReadErr      string `json:",omitempty"`
	Memory       any    `json:",omitempty"`
	MemoryEvents any    `json:",omitempty"`
	Pids         any    `json:",omitempty"`
	CPU          any    `json:",omitempty"`
	IO           any    `json:",omitempty"`
	Pressure     map[Resource]string
}

// section renders one stats group: its values, or its error.
func section(err error, v any, root string) any {
	if err != nil {
		return errString(err, root)
	}
	return v
}

func renderStats(root, rel string, s *Stats, readErr error) goldenStats {
	g := goldenStats{Path: rel, ReadErr: errString(readErr, root)}
	if readErr != nil {
		return g
	}
	m := s.Memory
	g.Memory = section(m.Err, map[string]any{"current": m.Current, "max": limitString(m.Max), "anon": m.Anon, "file": m.File,
		"active_file": m.ActiveFile, "inactive_file": m.InactiveFile, "working_set": m.WorkingSet()}, root)
	e := s.MemoryEvents
	g.MemoryEvents = section(e.Err, []uint64{e.Low, e.High, e.Max, e.OOM, e.OOMKill, e.OOMGroup}, root)
	g.Pids = section(s.Pids.Err, []string{fmt.Sprint(s.Pids.Current), limitString(s.Pids.Max)}, root)
	c := s.CPU
	g.CPU = section(c.Err, []uint64{c.UsageUsec, c.UserUsec, c.SystemUsec, c.NrPeriods, c.NrThrottled, c.ThrottledUsec}, root)
	io := s.IO
	g.IO = section(io.Err, []uint64{io.ReadBytes, io.WriteBytes, io.ReadIOs, io.WriteIOs}, root)
	g.Pressure = map[Resource]string{}
	for i, r := range Resources {
		p := s.Pressure[i]
		if p.Err != nil {
			g.Pressure[r] = errString(p.Err, root)
		} else {
			g.Pressure[r] = strings.ReplaceAll(strings.TrimSpace(p.PSI.String()), "\n", " | ")
		}
	}
	return g
}

// goldenTrees are the cgroup v2 trees under testdata: "unified" composed in
// the kernel's formats with the cases a live node rarely shows at once
// (controllers not enabled, a container without io), "recorded-6.1"
// recorded from a Debian 6.1 guest by TestGuestRecordTree.
var goldenTrees = []string{"unified", "recorded-6.1"}

func TestGoldenTrees(t *testing.T) {
	for _, name := range goldenTrees {
		for _, rd := range goldenReaders {
			t.Run(name+"/"+rd.name, func(t *testing.T) {
				r := rd.new()
				defer r.Close()
				// Two passes: a Reader that keeps files open reads the
				// second one from the files opened in the first.
				goldenTree(t, name, r)
				goldenTree(t, name, r)
			})
		}
	}
}

// goldenReaders are the ways of reading a tree that must give the same
// stats: opening every file, and keeping the files open between passes.
var goldenReaders = []struct {
	name string
	new  func() *Reader
}{
	{"open", NewReader},
	{"keep", func() *Reader { return NewKeepReader(KeepOptions{}) }},
	// Room for one cgroup: the others are read by opening their files.
	{"keep-bounded", func() *Reader { return NewKeepReader(KeepOptions{MaxFiles: nKept + 1}) }},
	// A kernel pass that fails: ReadPodUsage reads the files instead.
	{"keep-pass-fails", func() *Reader {
		r := NewKeepReader(KeepOptions{})
		r.SetPass(failingPass{})
		return r
	}},
}

// failingPass is a PassSource whose every pass fails.
type failingPass struct{}

var errPassRefused = errors.New("pass refused")

func (failingPass) Pass(dir string, depth int, fn func(*PassStats)) error {
	return fmt.Errorf("pass of %s: %w", dir, errPassRefused)
}

// recordedTree discovers the pods of the recorded tree testdata/name and
// returns its absolute root, the tree, and the directories of the root,
// the QoS levels and the pods, with their containers when containers is
// set.
func recordedTree(t *testing.T, name string, containers bool) (root string, tree PodTree, dirs []string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if tree, err = DiscoverPods(root); err != nil {
		t.Fatal(err)
	}
	dirs = []string{root, tree.Kubepods, tree.Burstable, tree.BestEffort}
	for _, p := range tree.Pods {
		dirs = append(dirs, p.Path)
		if containers {
			for _, c := range p.Containers {
				dirs = append(dirs, c.Path)
			}
		}
	}
	return root, tree, dirs
}

func goldenTree(t *testing.T, name string, r *Reader) {
	root, tree, dirs := recordedTree(t, name, true)
	// A pod that ended between discovery and the stats pass.
	dirs = append(dirs, filepath.Join(tree.Burstable, "pod00000000-dead-4bad-8bad-000000000000"))
	var out []goldenStats
	for _, d := range dirs {
		var s Stats
		err := r.Read(d, StatAll, &s)
		rel, _ := filepath.Rel(root, d)
		out = append(out, renderStats(root, rel, &s, err))
	}
	rel := func(p string) string { r, _ := filepath.Rel(root, p); return r }
	type gp struct {
		UID, QOS, Path string
		Containers     []string
	}
	var pods []gp
	for _, p := range tree.Pods {
		g := gp{UID: p.UID, QOS: string(p.QOS), Path: rel(p.Path)}
		for _, c := range p.Containers {
			g.Containers = append(g.Containers, c.ID)
		}
		pods = append(pods, g)
	}
	golden.CheckJSON(t, name+".golden.json", map[string]any{
		"driver": tree.Driver, "kubepods": rel(tree.Kubepods), "burstable": rel(tree.Burstable),
		"besteffort": rel(tree.BestEffort), "pods": pods, "stats": out,
	})
}

func TestGoldenSystemdDiscovery(t *testing.T) {
	root, _ := filepath.Abs(filepath.Join("testdata", "systemd"))
	tree, err := DiscoverPods(root)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	lines = append(lines, "driver "+string(tree.Driver))
	for _, p := range tree.Pods {
		r, _ := filepath.Rel(root, p.Path)
		lines = append(lines, fmt.Sprintf("pod %s %s %s", p.UID, p.QOS, r))
		for _, c := range p.Containers {
			lines = append(lines, "  container "+c.ID)
		}
	}
	golden.CheckJSON(t, "systemd.golden.json", lines)
}

func TestDiscoverPodsWithoutKubepods(t *testing.T) {
	if _, err := DiscoverPods(t.TempDir()); !errors.Is(err, ErrNoKubepods) {
		t.Fatalf("err = %v, want ErrNoKubepods", err)
	}
}

// TestContainerdAgrees reads the recorded tree with containerd's cgroup2
// reader and checks that both agree wherever both know the value, and that
// containerd reports the root's memory usage as 0 where nodeshim reports it
// unknown.
func TestContainerdAgrees(t *testing.T) {
	for _, name := range goldenTrees {
		t.Run(name, func(t *testing.T) { containerdAgrees(t, name) })
	}
}

func containerdAgrees(t *testing.T, name string) {
	root, _ := filepath.Abs(filepath.Join("testdata", name))
	tree, err := DiscoverPods(root)
	if err != nil {
		t.Fatal(err)
	}
	groups := []string{"/kubepods", "/kubepods/burstable"}
	for _, p := range tree.Pods {
		groups = append(groups, strings.TrimPrefix(p.Path, root))
	}
	r := NewReader()
	for _, g := range groups {
		t.Run(g, func(t *testing.T) {
			var s Stats
			if err := r.Read(root+g, StatAll, &s); err != nil {
				t.Fatal(err)
			}
			cg, err := cgroup2.Load(g, cgroup2.WithMountpoint(root))
			if err != nil {
				t.Fatal(err)
			}
			cs, err := cg.Stat()
			if err != nil {
				t.Fatal(err)
			}
			if s.Memory.Err == nil {
				m := cs.Memory
				if m.Usage != s.Memory.Current || m.InactiveFile != s.Memory.InactiveFile || m.ActiveFile != s.Memory.ActiveFile ||
					m.Anon != s.Memory.Anon || m.File != s.Memory.File {
					t.Errorf("memory: containerd %+v, nodeshim %+v", m, s.Memory)
				}
				if want := map[bool]uint64{true: ^uint64(0), false: s.Memory.Max.Value}[s.Memory.Max.Unlimited]; m.UsageLimit != want {
					t.Errorf("memory.max: containerd %d, nodeshim %v", m.UsageLimit, s.Memory.Max)
				}
			} else if cs.Memory.Usage != 0 {
				t.Errorf("memory unknown to nodeshim (%v), containerd usage %d", s.Memory.Err, cs.Memory.Usage)
			}
			if s.CPU.Err == nil && (cs.CPU.UsageUsec != s.CPU.UsageUsec || cs.CPU.ThrottledUsec != s.CPU.ThrottledUsec) {
				t.Errorf("cpu: containerd %+v, nodeshim %+v", cs.CPU, s.CPU)
			}
			if s.Pids.Err == nil && cs.Pids.Current != s.Pids.Current {
				t.Errorf("pids: containerd %+v, nodeshim %+v", cs.Pids, s.Pids)
			}
			if p := s.PressureOf(Memory); p.Err == nil && cs.Memory.PSI != nil && cs.Memory.PSI.Some.Total != p.PSI.Some.Total {
				t.Errorf("memory PSI: containerd %+v, nodeshim %+v", cs.Memory.PSI, p.PSI)
			}
		})
	}
	// At the root there is no memory.current: containerd says 0 bytes used.
	cg, _ := cgroup2.Load("/", cgroup2.WithMountpoint(root))
	cs, err := cg.StatFiltered(cgroup2.StatMemory)
	if err != nil {
		t.Fatal(err)
	}
	var s Stats
	if err := r.Read(root, StatMemory, &s); err != nil {
		t.Fatal(err)
	}
	if cs.Memory.Usage != 0 || !errors.Is(s.Memory.Err, ErrMissing) {
		t.Fatalf("root: containerd usage %d, nodeshim %v; want 0 and ErrMissing", cs.Memory.Usage, s.Memory.Err)
	}
}

// limitString prints l as the kernel does.
func limitString(l Limit) string {
	if l.Unlimited {
		return "max"
	}
	return fmt.Sprint(l.Value)
}
