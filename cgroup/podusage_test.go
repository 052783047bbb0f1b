package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeshim/nodeshim/testenv/golden"
)

// podUsageView is a PodUsage with its errors as text, relative to root.
type podUsageView struct {
	UID, QOS, Cgroup string
	Containers       int
	Memory           string
	PSI              []string
}

func renderPodUsage(root string, tree PodTree, pods []PodUsage) map[string]any {
	scrub := func(err error) string { return strings.ReplaceAll(err.Error(), root, "$ROOT") }
	var out []podUsageView
	for _, u := range pods {
		v := podUsageView{UID: u.UID, QOS: string(u.QOS), Cgroup: u.Cgroup, Containers: u.Containers}
		if m := u.Memory; m.Err != nil {
			v.Memory = m.Source + ": unknown: " + scrub(m.Err)
		} else {
			v.Memory = fmt.Sprintf("%s: usage %d working set %d limit %+v oom kills %d", m.Source, m.Usage, m.WorkingSet, m.Limit, m.OOMKills)
		}
		for i, r := range Resources {
			if p := u.Pressure[i]; p.Err != nil {
				v.PSI = append(v.PSI, fmt.Sprintf("%s: unknown: %s", r, scrub(p.Err)))
			} else {
				v.PSI = append(v.PSI, fmt.Sprintf("%s: some avg10 %s", r, p.PSI.Some.Avg10))
			}
		}
		out = append(out, v)
	}
	rel, _ := filepath.Rel(root, tree.Kubepods)
	return map[string]any{"driver": tree.Driver, "kubepods": rel, "pods": out}
}

// TestReadPodUsage reads the pods of the recorded cgroup v2 trees
// (cgroupfs and systemd naming) and of a hybrid tree whose memory cgroups
// are in a v1 hierarchy, with PSI for only one pod in the v2 one.
func TestReadPodUsage(t *testing.T) {
	for _, name := range []string{"unified", "systemd"} {
		t.Run(name, func(t *testing.T) {
			root, err := filepath.Abs(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			for _, rd := range goldenReaders {
				r := rd.new()
				for range 2 {
					tree, pods, err := ReadPodUsage(PodRoots{V2: root, Parent: "/"}, r)
					if err != nil {
						t.Fatal(err)
					}
					if want := r.pass != nil; errors.Is(tree.PassErr, errPassRefused) != want || !want && tree.PassErr != nil {
						t.Errorf("%s: PassErr %v", rd.name, tree.PassErr)
					}
					golden.CheckJSON(t, "podusage-"+name+".golden.json", renderPodUsage(root, tree, pods))
				}
				r.Close()
			}
		})
	}
	t.Run("hybrid", func(t *testing.T) {
		root := t.TempDir()
		v1, v2 := filepath.Join(root, "memory"), filepath.Join(root, "unified")
		write := func(dir string, files map[string]string) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for k, v := range files {
				if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		memV1 := func(usage, limit, inactive, oomKills int) map[string]string {
			return map[string]string{
				"memory.usage_in_bytes": fmt.Sprintf("%d\n", usage),
				"memory.limit_in_bytes": fmt.Sprintf("%d\n", limit),
				"memory.failcnt":        "0\n",
				"memory.stat":           fmt.Sprintf("cache 0\nrss 0\ntotal_cache %d\ntotal_rss %d\ntotal_inactive_file %d\n", inactive, usage-inactive, inactive),
				"memory.oom_control":    fmt.Sprintf("oom_kill_disable 0\nunder_oom 0\noom_kill %d\n", oomKills),
			}
		}
		psi := func(avg10 string) map[string]string {
			line := fmt.Sprintf("some avg10=%s avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=5\n", avg10)
			return map[string]string{"memory.pressure": line, "io.pressure": line, "cpu.pressure": line}
		}
		parent := "/runtime/containerd"
		kp := "/runtime/containerd/kubepods"
		const unlimited = 9223372036854771712
		write(filepath.Join(v1, kp, "burstable", "podaaaa", "c1"), memV1(1<<20, 64<<20, 0, 0))
		write(filepath.Join(v1, kp, "burstable", "podaaaa"), memV1(40<<20, 64<<20, 4<<20, 2))
		write(filepath.Join(v1, kp, "besteffort", "podbbbb"), memV1(10<<20, unlimited, 0, 0))
		write(filepath.Join(v1, kp, "podcccc"), memV1(20<<20, 20<<20, 0, 0))
		// Only pod bbbb is in the unified hierarchy (runc joins it, crun
		// run without it does not), under memory pressure.
		write(filepath.Join(v2, kp, "besteffort", "podbbbb"), psi("12.50"))
		tree, pods, err := ReadPodUsage(PodRoots{V2: v2, MemoryV1: v1, Parent: parent}, NewReader())
		if err != nil {
			t.Fatal(err)
		}
		golden.CheckJSON(t, "podusage-hybrid.golden.json", renderPodUsage(root, tree, pods))
		if len(pods) != 3 || pods[0].UID != "bbbb" || pods[1].UID != "aaaa" {
			t.Errorf("order %+v, want the pod under pressure first, then by working set", pods)
		}
	})
}

// vanishedPass is a PassSource that finds no subtree to walk, as on a
// hybrid node whose runtime keeps pods out of the cgroup v2 hierarchy.
type vanishedPass struct{}

func (vanishedPass) Pass(dir string, depth int, fn func(*PassStats)) error {
	return fmt.Errorf("pass of %s: %w", dir, ErrVanished)
}

// TestReadPodUsagePassWithoutKubepods: a pass that finds no kubepods in the
// cgroup v2 hierarchy is no failure; the files say the same of each pod.
func TestReadPodUsagePassWithoutKubepods(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("testdata", "unified"))
	if err != nil {
		t.Fatal(err)
	}
	r := NewKeepReader(KeepOptions{})
	defer r.Close()
	r.SetPass(vanishedPass{})
	tree, pods, err := ReadPodUsage(PodRoots{V2: root, Parent: "/"}, r)
	if err != nil || tree.PassErr != nil {
		t.Fatalf("ReadPodUsage: %v, PassErr %v", err, tree.PassErr)
	}
	golden.CheckJSON(t, "podusage-unified.golden.json", renderPodUsage(root, tree, pods))
}
