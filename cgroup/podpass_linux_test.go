package cgroup_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

// kernelHZ is the running kernel's CONFIG_HZ, from its config.
func kernelHZ(tb testing.TB) int {
	tb.Helper()
	cfg, err := kernel.RunningConfig(kernel.DefaultHost())
	if err != nil {
		tb.Fatal(err)
	}
	hz, err := cfg.HZ()
	if err != nil {
		tb.Fatal(err)
	}
	return hz
}

// countingPass counts the passes of the real kernel pass it wraps.
type countingPass struct {
	*bpf.CgroupStats
	passes, cgroups int
}

func (c *countingPass) Pass(dir string, depth int, fn func(*cgroup.PassStats)) error {
	c.passes++
	return c.CgroupStats.Pass(dir, depth, func(s *cgroup.PassStats) { c.cgroups++; fn(s) })
}

// TestReadPodUsageKernelPass reads a kubepods tree made in the real cgroup2
// hierarchy (Guaranteed, Burstable and BestEffort pods, one with a
// container) with the BPF cgroup iterator and with the files alone, and
// expects the same pods and figures. Where the memory controller can be
// enabled (a pure cgroup v2 machine), the pods have it and a memory.max.
func TestReadPodUsageKernelPass(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/sys/kernel/btf/vmlinux")
	cg2, err := cgroup.MountUnder("/sys")
	if err != nil {
		t.Fatal(err)
	}
	stats, err := bpf.OpenCgroupStats(bpf.CgroupStatsOptions{HZ: kernelHZ(t)})
	testutil.SkipIfNotSupported(t, err)
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close()

	parent, err := os.MkdirTemp(cg2, "nodeshim-podpass-")
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := os.ReadFile(filepath.Join(cg2, "cgroup.subtree_control"))
	if err != nil {
		t.Fatal(err)
	}
	memory := strings.Contains(string(ctl), "memory")
	dirs := []string{"kubepods", "kubepods/burstable", "kubepods/besteffort", "kubepods/podg1",
		"kubepods/burstable/podb1", "kubepods/burstable/podb1/c1", "kubepods/besteffort/pode1"}
	for _, d := range dirs {
		p := filepath.Join(parent, d)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if memory && !strings.HasPrefix(filepath.Base(d), "c") {
			if err := os.WriteFile(filepath.Join(filepath.Dir(p), "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	if memory {
		if err := os.WriteFile(filepath.Join(parent, "kubepods/burstable/podb1/memory.max"), []byte("67108864"), 0); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i := len(dirs) - 1; i >= 0; i-- {
			os.Remove(filepath.Join(parent, dirs[i]))
		}
		os.Remove(parent)
	})

	roots := cgroup.PodRoots{V2: cg2, Parent: strings.TrimPrefix(parent, cg2)}
	pass := &countingPass{CgroupStats: stats}
	withPass := cgroup.NewKeepReader(cgroup.KeepOptions{})
	withPass.SetPass(pass)
	defer withPass.Close()
	files := cgroup.NewKeepReader(cgroup.KeepOptions{})
	defer files.Close()
	for range 2 {
		treeP, podsP, err := cgroup.ReadPodUsage(roots, withPass)
		if err != nil {
			t.Fatal(err)
		}
		_, podsF, err := cgroup.ReadPodUsage(roots, files)
		if err != nil {
			t.Fatal(err)
		}
		if treeP.PassErr != nil {
			t.Fatalf("kernel pass failed: %v", treeP.PassErr)
		}
		if len(podsP) != 3 || len(podsF) != 3 {
			t.Fatalf("pods: %d with the pass, %d from files; want 3", len(podsP), len(podsF))
		}
		for i := range podsP {
			p, f := podsP[i], podsF[i]
			if p.UID != f.UID || p.Cgroup != f.Cgroup || p.QOS != f.QOS {
				t.Errorf("pod %d: %s %s with the pass, %s %s from files", i, p.UID, p.Cgroup, f.UID, f.Cgroup)
			}
			for r := range p.Pressure {
				if p.Pressure[r].Err != nil || p.Pressure[r].PSI != f.Pressure[r].PSI {
					t.Errorf("pod %s %s: %+v (%v) with the pass, %+v from files", p.UID, cgroup.Resources[r],
						p.Pressure[r].PSI, p.Pressure[r].Err, f.Pressure[r].PSI)
				}
			}
			pm, fm := p.Memory, f.Memory
			if (pm.Err == nil) != (fm.Err == nil) || pm.Usage != fm.Usage || pm.WorkingSet != fm.WorkingSet || pm.Limit != fm.Limit || pm.OOMKills != fm.OOMKills {
				t.Errorf("pod %s memory: %+v with the pass, %+v from files", p.UID, pm, fm)
			}
			if memory && pm.Err != nil {
				t.Errorf("pod %s: memory %v with the memory controller enabled", p.UID, pm.Err)
			}
			if memory && p.UID == "b1" && (pm.Limit != cgroup.Limit{Value: 64 << 20}) {
				t.Errorf("pod b1: limit %+v, want 64 MiB", pm.Limit)
			}
		}
	}
	// One pass per read, over kubepods down to the pods (the container
	// is below them): kubepods, two QoS cgroups, three pods.
	if pass.passes != 2 || pass.cgroups != 2*6 {
		t.Errorf("%d passes over %d cgroups, want 2 over 12", pass.passes, pass.cgroups)
	}
	// Only memory.stat stays open per pod where the pass reads the rest.
	if memory {
		if k := withPass.Keeping(); k.Files >= files.Keeping().Files {
			t.Errorf("the pass keeps %d files open, the files alone %d", k.Files, files.Keeping().Files)
		}
	}
	t.Logf("memory controller: %v; files kept: %d with the pass, %d without", memory, withPass.Keeping().Files, files.Keeping().Files)
}
