package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/golden"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

func TestPodTable(t *testing.T) {
	limit := uint64(64 << 20)
	some := func(avg float64) status.PSILine { return status.PSILine{Avg10: avg} }
	known := func(mem, io, cpu float64) []status.PSI {
		return []status.PSI{{Resource: "cpu", Some: some(cpu)}, {Resource: "memory", Some: some(mem)}, {Resource: "io", Some: some(io)}}
	}
	noV2 := []status.PSI{{Resource: "cpu", Unknown: "no cgroup v2"}, {Resource: "memory", Unknown: "no cgroup v2"}, {Resource: "io", Unknown: "no cgroup v2"}}
	for _, tc := range []struct {
		name string
		pods *status.PodPressures
	}{
		{"hybrid", &status.PodPressures{ObservedAt: time.Unix(0, 0), Kubepods: "/sys/fs/cgroup/memory/kubepods", Driver: "cgroupfs",
			Items: []status.PodPressure{
				{UID: "u1", Namespace: "shop", Name: "cart", QOS: "Burstable", Containers: 2, PSI: known(42.5, 1.25, 0),
					Memory: status.PodMemory{Source: cgroup.SourceV1, WorkingSetBytes: 60 << 20, LimitBytes: &limit, OOMKills: 3}},
				{UID: "u2", QOS: "BestEffort", Containers: 1, PSI: noV2,
					Memory: status.PodMemory{Source: cgroup.SourceV1, WorkingSetBytes: 3 << 30}},
				{UID: "u3", Namespace: "kube-system", Name: "dns", QOS: "Guaranteed", Containers: 1, PSI: noV2,
					Memory: status.PodMemory{Source: cgroup.SourceV1, Unknown: "cgroup vanished"}},
			}}},
		{"systemd v2", &status.PodPressures{Kubepods: "/sys/fs/cgroup/kubepods.slice", Driver: "systemd",
			Items: []status.PodPressure{{UID: "u9", Namespace: "a", Name: "b", QOS: "Guaranteed", Containers: 1, PSI: known(0, 0, 3),
				Memory: status.PodMemory{Source: cgroup.SourceV2, WorkingSetBytes: 512, LimitBytes: &limit}}}}},
		{"no kubepods", &status.PodPressures{Unknown: "no kubepods cgroup", Items: []status.PodPressure{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			golden.Check(t, "pressure-pods-"+strings.ReplaceAll(tc.name, " ", "-")+".txt", []byte(podTable(tc.pods)))
		})
	}
}

// TestPressurePodsCommand runs `nodeshim pressure --pods` on this host: it
// lists the pods of a kubepods tree, or says that there is none, which is
// what a machine without kubelet shows.
func TestPressurePodsCommand(t *testing.T) {
	testutil.RequireRoot(t)
	out, err := run(t, "pressure", "--pods")
	if err != nil {
		if !errors.Is(err, cgroup.ErrNoKubepods) {
			t.Fatalf("pressure --pods: %v\n%s", err, out)
		}
		return
	}
	if !strings.Contains(out, "POD") || !strings.Contains(out, "MEM-FROM") {
		t.Errorf("pressure --pods:\n%s", out)
	}
}
