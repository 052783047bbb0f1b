package reporter

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/status"
)

func TestNodeConditionType(t *testing.T) {
	cases := []struct{ in, want string }{
		{"Ready", "NodeShimReady"},
		{"NetworkReady", "NodeShimNetworkReady"},
		{"MemoryPressure", "NodeShimMemoryPressure"},
		{"DiskPressure", "NodeShimDiskPressure"},
		{"PIDPressure", "NodeShimPIDPressure"},
		{"NetworkUnavailable", "NodeShimNetworkUnavailable"},
		{"NodeShimCustom", "NodeShimCustom"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got := NodeConditionType(tc.in)
			if string(got) != tc.want {
				t.Fatalf("NodeConditionType(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if KubeletOwned(got) || !Owned(got) {
				t.Fatalf("%q: kubelet-owned %v, owned %v", got, KubeletOwned(got), Owned(got))
			}
		})
	}
	for _, k := range kubeletTypes {
		if Owned(k) {
			t.Errorf("kubelet's %s counted as nodeshim's", k)
		}
	}
}

func cond(typ string, s metav1.ConditionStatus, reason, msg string) condition.Condition {
	return condition.Condition{Type: typ, Status: s, Reason: reason, Message: msg}
}

func TestDesired(t *testing.T) {
	doc := status.Document{Conditions: []condition.Condition{
		cond("NetworkReady", condition.True, "CNIConfigured", "ok"),
		cond("MemoryPressure", condition.False, "NoPressure", ""),
		cond("Ready", condition.True, condition.ReasonAllReady, ""),
	}}
	unreachable := errors.New("dial unix /run/nodeshim.sock: connection refused")
	type want struct {
		typ    string
		status corev1.ConditionStatus
		reason string
	}
	cases := []struct {
		name   string
		doc    status.Document
		err    error
		known  []corev1.NodeConditionType
		expect []want
	}{
		{"mapped and sorted", doc, nil, nil, []want{
			{"NodeShimMemoryPressure", "False", "NoPressure"},
			{"NodeShimNetworkReady", "True", "CNIConfigured"},
			{"NodeShimReady", "True", condition.ReasonAllReady},
		}},
		{"no Ready in the document is Unknown", status.Document{Conditions: []condition.Condition{cond("X", condition.True, "Fine", "")}}, nil, nil, []want{
			{"NodeShimReady", "Unknown", condition.ReasonNotFound},
			{"NodeShimX", "True", "Fine"},
		}},
		{"empty reason", status.Document{Conditions: []condition.Condition{cond("Ready", condition.False, "", "")}}, nil, nil, []want{
			{"NodeShimReady", "False", "NoReason"},
		}},
		{"a known type the shim no longer reports is Unknown", doc, nil,
			[]corev1.NodeConditionType{"NodeShimGone", "NodeShimNetworkReady", "Ready"}, []want{
				{"NodeShimGone", "Unknown", ReasonNotReported},
				{"NodeShimMemoryPressure", "False", "NoPressure"},
				{"NodeShimNetworkReady", "True", "CNIConfigured"},
				{"NodeShimReady", "True", condition.ReasonAllReady},
			}},
		{"unreachable shim, nothing known", status.Document{}, unreachable, nil, []want{
			{"NodeShimReady", "False", ReasonShimUnreachable},
		}},
		{"unreachable shim turns known types Unknown, never kubelet's", status.Document{}, unreachable,
			[]corev1.NodeConditionType{"NodeShimNetworkReady", "NodeShimReady", "Ready", "MemoryPressure"}, []want{
				{"NodeShimNetworkReady", "Unknown", ReasonShimUnreachable},
				{"NodeShimReady", "False", ReasonShimUnreachable},
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Desired(tc.doc, tc.err, tc.known)
			if len(got) != len(tc.expect) {
				t.Fatalf("got %d conditions %+v, want %d", len(got), got, len(tc.expect))
			}
			for i, w := range tc.expect {
				g := got[i]
				if string(g.Type) != w.typ || g.Status != w.status || g.Reason != w.reason {
					t.Errorf("condition %d = %s/%s/%s, want %s/%s/%s", i, g.Type, g.Status, g.Reason, w.typ, w.status, w.reason)
				}
				if KubeletOwned(g.Type) {
					t.Errorf("kubelet's %s published", g.Type)
				}
			}
		})
	}
}

func TestPlan(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Minute))
	prev := []corev1.NodeCondition{
		{Type: "NodeShimReady", Status: "True", Reason: "AllConditionsReady", LastTransitionTime: t0, LastHeartbeatTime: t0},
		{Type: "NodeShimNetworkReady", Status: "True", Reason: "Ok", Message: "a", LastTransitionTime: t0, LastHeartbeatTime: t0},
	}
	cases := []struct {
		name        string
		want        []corev1.NodeCondition
		changed     bool
		transitions int
		moved       []corev1.NodeConditionType
	}{
		{"unchanged keeps transition times", []corev1.NodeCondition{
			{Type: "NodeShimReady", Status: "True", Reason: "AllConditionsReady"},
			{Type: "NodeShimNetworkReady", Status: "True", Reason: "Ok", Message: "a"},
		}, false, 0, nil},
		{"message change is a change, not a transition", []corev1.NodeCondition{
			{Type: "NodeShimReady", Status: "True", Reason: "AllConditionsReady"},
			{Type: "NodeShimNetworkReady", Status: "True", Reason: "Ok", Message: "b"},
		}, true, 0, nil},
		{"status change moves only that condition", []corev1.NodeCondition{
			{Type: "NodeShimReady", Status: "True", Reason: "AllConditionsReady"},
			{Type: "NodeShimNetworkReady", Status: "False", Reason: "NoCNI"},
		}, true, 1, []corev1.NodeConditionType{"NodeShimNetworkReady"}},
		{"new type is a transition", []corev1.NodeCondition{
			{Type: "NodeShimNew", Status: "True", Reason: "Ok"},
			{Type: "NodeShimReady", Status: "True", Reason: "AllConditionsReady"},
		}, true, 1, []corev1.NodeConditionType{"NodeShimNew"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, changed, trans := Plan(prev, tc.want, t1)
			if changed != tc.changed || len(trans) != tc.transitions {
				t.Fatalf("changed %v with %d transitions, want %v with %d", changed, len(trans), tc.changed, tc.transitions)
			}
			for _, c := range out {
				if !c.LastHeartbeatTime.Equal(&t1) {
					t.Errorf("%s heartbeat %v, want %v", c.Type, c.LastHeartbeatTime, t1)
				}
				moved := false
				for _, m := range tc.moved {
					moved = moved || m == c.Type
				}
				want := t0
				if moved {
					want = t1
				}
				if !c.LastTransitionTime.Equal(&want) {
					t.Errorf("%s transition time %v, want %v", c.Type, c.LastTransitionTime, want)
				}
			}
		})
	}
}

func TestDigest(t *testing.T) {
	a := []corev1.NodeCondition{{Type: "NodeShimReady", Status: "True", Reason: "R"}}
	b := []corev1.NodeCondition{{Type: "NodeShimReady", Status: "True", Reason: "R", LastHeartbeatTime: metav1.Now()}}
	c := []corev1.NodeCondition{{Type: "NodeShimReady", Status: "False", Reason: "R"}}
	if Digest(a) != Digest(b) {
		t.Error("digest depends on times")
	}
	if Digest(a) == Digest(c) {
		t.Error("digest ignores the status")
	}
}

func TestNormal(t *testing.T) {
	cases := []struct {
		typ    corev1.NodeConditionType
		status corev1.ConditionStatus
		want   bool
	}{
		{"NodeShimReady", "True", true},
		{"NodeShimReady", "False", false},
		{"NodeShimReady", "Unknown", false},
		{"NodeShimMemoryPressure", "False", true},
		{"NodeShimMemoryPressure", "True", false},
	}
	for _, tc := range cases {
		if got := normal(corev1.NodeCondition{Type: tc.typ, Status: tc.status}); got != tc.want {
			t.Errorf("normal(%s=%s) = %v, want %v", tc.typ, tc.status, got, tc.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	b := Backoff{Initial: 200 * time.Millisecond, Max: 7 * time.Second}
	want := []time.Duration{200, 400, 800, 1600, 3200, 6400, 7000, 7000}
	for i, w := range want {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("step %d: %v, want %v", i, got, w*time.Millisecond)
		}
	}
	b.Reset()
	if got := b.Next(); got != 200*time.Millisecond {
		t.Fatalf("after Reset: %v, want 200ms", got)
	}
}

func TestReportDigest(t *testing.T) {
	cases := []struct {
		name, a, b string
		same       bool
	}{
		{"whitespace does not count", `{"a": 1, "b": [1, 2]}`, `{"a":1,"b":[1,2]}`, true},
		{"content counts", `{"a":1}`, `{"a":2}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := ReportDigest(json.RawMessage(tc.a)), ReportDigest(json.RawMessage(tc.b))
			if (a == b) != tc.same || !strings.HasPrefix(a, "sha256:") {
				t.Fatalf("digests %q and %q, want same=%v", a, b, tc.same)
			}
		})
	}
	for _, none := range []string{"", "null", "{not json"} {
		if d := ReportDigest(json.RawMessage(none)); d != "" {
			t.Errorf("ReportDigest(%q) = %q, want none", none, d)
		}
	}
}

// TestNodeCondition: the one conversion of a shim condition to a Node
// condition keeps status, reason and message, renames the type, leaves the
// times to Plan and drops what a Node condition cannot carry.
func TestNodeCondition(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	cases := []struct {
		name string
		in   condition.Condition
		want corev1.NodeCondition
	}{
		{"pressure with its severity", condition.Condition{Type: "MemoryPressure", Status: condition.True, Severity: condition.SeverityWarning,
			Reason: "HasInsufficientMemory", Message: "memory.available is 1Mi", LastTransitionTime: at, Polarity: condition.PolarityKubelet},
			corev1.NodeCondition{Type: "NodeShimMemoryPressure", Status: corev1.ConditionTrue, Reason: "HasInsufficientMemory", Message: "memory.available is 1Mi"}},
		{"ready", condition.Condition{Type: "Ready", Status: condition.True, Reason: condition.ReasonAllReady, ObservedGeneration: 3},
			corev1.NodeCondition{Type: TypeNodeShimReady, Status: corev1.ConditionTrue, Reason: condition.ReasonAllReady}},
		{"empty reason", condition.Condition{Type: "NetworkReady", Status: condition.Unknown},
			corev1.NodeCondition{Type: "NodeShimNetworkReady", Status: corev1.ConditionUnknown, Reason: "NoReason"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := NodeCondition(tc.in); got != tc.want {
				t.Errorf("NodeCondition(%+v) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}
