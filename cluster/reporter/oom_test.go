package reporter

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeshim/nodeshim/shim/status"
)

func TestNewOOMKills(t *testing.T) {
	recent := func(n int) []status.OOMKill {
		out := make([]status.OOMKill, n)
		for i := range out {
			out[i].PID = uint32(i + 1)
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		kills    status.OOMKills
		seen     uint64
		wantPIDs []uint32
	}{
		{"nothing new", status.OOMKills{Total: 3, Recent: recent(3)}, 3, nil},
		{"two new", status.OOMKills{Total: 3, Recent: recent(3)}, 1, []uint32{2, 3}},
		{"first read reports the history", status.OOMKills{Total: 2, Recent: recent(2)}, 0, []uint32{1, 2}},
		{"more new than kept", status.OOMKills{Total: 100, Recent: recent(4)}, 10, []uint32{1, 2, 3, 4}},
		{"shim restarted", status.OOMKills{Total: 1, Recent: recent(1)}, 7, []uint32{1}},
		{"none at all", status.OOMKills{}, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []uint32
			for _, k := range newOOMKills(tc.kills, tc.seen) {
				got = append(got, k.PID)
			}
			if !slices.Equal(got, tc.wantPIDs) {
				t.Errorf("new kills %v, want %v", got, tc.wantPIDs)
			}
		})
	}
}

func TestOOMEvent(t *testing.T) {
	at := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	pod := status.OOMKill{Time: at, PID: 41, TGID: 42, Comm: "tail", RSSBytes: 30 << 20, TotalVMBytes: 40 << 20,
		Container: &status.OOMContainer{Namespace: "shop", Pod: "web-1", PodUID: "u-1", Container: "app", ContainerID: "abc", ResolvedBy: "cgroupID"}}
	host := status.OOMKill{Time: at, PID: 7, Comm: "stress", Unresolved: "container not found"}
	for _, tc := range []struct {
		name    string
		kill    status.OOMKill
		wantNS  string
		wantObj corev1.ObjectReference
		wantMsg []string
	}{
		{"pod", pod, "shop", corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "shop", Name: "web-1", UID: "u-1", FieldPath: "spec.containers{app}"},
			[]string{"process 42 (tail)", "container app of pod shop/web-1", "rss:30720kB"}},
		{"not resolved", host, "default", corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "n1", UID: "node-uid"},
			[]string{"process 7 (stress) on node n1", "not resolved: container not found"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := OOMEvent(tc.kill, "n1", "node-uid", "default")
			if e.Namespace != tc.wantNS || e.InvolvedObject != tc.wantObj || e.Reason != ReasonOOMKilling || e.Type != corev1.EventTypeWarning {
				t.Errorf("event %s in %s about %+v (%s, %s)", e.Name, e.Namespace, e.InvolvedObject, e.Reason, e.Type)
			}
			for _, m := range tc.wantMsg {
				if !strings.Contains(e.Message, m) {
					t.Errorf("message %q does not say %q", e.Message, m)
				}
			}
			if again := OOMEvent(tc.kill, "n1", "node-uid", "default"); again.Name != e.Name {
				t.Errorf("names differ for one kill: %s, %s", e.Name, again.Name)
			}
		})
	}
}
