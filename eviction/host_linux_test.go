package eviction

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/condition"
)

// TestHostConditions evaluates kubelet's default thresholds on what this
// machine has: each condition is True exactly when one of its thresholds
// is crossed (a nearly full disk is pressure here too), else False; never
// Unknown, every signal but allocatableMemory.available (no kubepods
// here) being known.
func TestHostConditions(t *testing.T) {
	m, err := cgroup.FindMount("/proc")
	if err != nil {
		t.Fatal(err)
	}
	// The disk signals of a directory that every machine has: a guest
	// booted from an initramfs has no /var/lib.
	obs := Observe(cgroup.ReadAvailable(cgroup.NodeSources{ProcRoot: "/proc", CgroupRoot: m.Path, KubeletRoot: t.TempDir()}, cgroup.NewReader()))
	want := map[string]metav1.ConditionStatus{}
	for _, ct := range PressureConditions {
		want[ct] = condition.False
	}
	for _, th := range MustDefaultThresholds() {
		if !obs[th.Signal].Known() {
			t.Fatalf("%s unknown on this machine: %v", th.Signal, obs[th.Signal].Err)
		}
		if th.Crossed(obs[th.Signal]) {
			want[ConditionFor(th.Signal)] = condition.True
		}
	}
	conds, trans := NewEvaluator(MustDefaultThresholds(), 0).Update(time.Now(), obs)
	if len(conds) != len(PressureConditions) || len(trans) != len(conds) {
		t.Fatalf("%d conditions, %d transitions: want one of each per pressure condition", len(conds), len(trans))
	}
	for _, c := range conds {
		if c.Status != want[c.Type] || c.Validate() != nil {
			t.Errorf("condition %s = %s (%s; %v), want %s from the observations", c.Type, c.Status, c.Message, c.Validate(), want[c.Type])
		}
	}
}
