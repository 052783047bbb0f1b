package condition

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func cond(t string, s metav1.ConditionStatus, sev Severity, reason, msg string) Condition {
	return Condition{Type: t, Status: s, Severity: sev, Reason: reason, Message: msg}
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name       string
		in         []Condition
		wantStatus metav1.ConditionStatus
		wantSev    Severity
		wantReason string
		wantMsg    string
	}{
		{
			name:       "all true",
			in:         []Condition{cond("NetworkReady", True, "", "Up", ""), cond("ConfigHealthy", True, "", "Active", "")},
			wantStatus: True, wantReason: ReasonAllReady,
		},
		{
			name:       "no conditions",
			wantStatus: True, wantReason: ReasonAllReady,
		},
		{
			name:       "kubelet polarity: pressure False is normal",
			in:         []Condition{cond(TypeMemoryPressure, False, "", "NoPressure", "")},
			wantStatus: True, wantReason: ReasonAllReady,
		},
		{
			name:       "kubelet polarity: pressure True is a problem",
			in:         []Condition{cond(TypeMemoryPressure, True, SeverityWarning, "PSIHigh", "some avg10 42")},
			wantStatus: False, wantSev: SeverityWarning, wantReason: "PSIHigh",
			wantMsg: "MemoryPressure: some avg10 42",
		},
		{
			name: "error before warning before unknown before info, every message listed",
			in: []Condition{
				Progress("CheckpointSucceeded", "Dumping", "dumping pod a", 2, 3),
				cond("BPFReady", Unknown, "", "NotProbed", "not probed yet"),
				cond("SeccompReady", False, SeverityWarning, "ProfileStale", "profile stale"),
				cond("NetworkReady", True, "", "Up", ""),
				cond("ConfigHealthy", False, SeverityError, "LoadFailed", "bad yaml"),
			},
			wantStatus: False, wantSev: SeverityError, wantReason: ReasonMultipleReasons,
			wantMsg: "ConfigHealthy: bad yaml; SeccompReady: profile stale; BPFReady (Unknown): not probed yet; CheckpointSucceeded: dumping pod a (2 of 3)",
		},
		{
			name: "warning wins over unknown",
			in: []Condition{
				cond("BPFReady", Unknown, "", "NotProbed", "x"),
				cond("SeccompReady", False, SeverityWarning, "ProfileStale", "y"),
			},
			wantStatus: False, wantSev: SeverityWarning, wantReason: ReasonMultipleReasons,
			wantMsg: "SeccompReady: y; BPFReady (Unknown): x",
		},
		{
			name: "unknown wins over info and stays unknown",
			in: []Condition{
				Progress("ConfigHealthy", "Trial", "trying config", 1, 3),
				cond("BPFReady", Unknown, "", "NotProbed", "x"),
			},
			wantStatus: Unknown, wantReason: ReasonMultipleReasons,
			wantMsg: "BPFReady (Unknown): x; ConfigHealthy: trying config (1 of 3)",
		},
		{
			name:       "only an operation in progress: False with Info",
			in:         []Condition{Progress("CheckpointSucceeded", ReasonInProgress, "checkpoint ns/p/c", 2, 3)},
			wantStatus: False, wantSev: SeverityInfo, wantReason: ReasonInProgress,
			wantMsg: "CheckpointSucceeded: checkpoint ns/p/c (2 of 3)",
		},
		{
			name:       "False without severity counts as error",
			in:         []Condition{cond("A", False, "", "Broken", ""), cond("B", False, SeverityWarning, "Meh", "meh")},
			wantStatus: False, wantSev: SeverityError, wantReason: ReasonMultipleReasons,
			wantMsg: "A: Broken; B: meh",
		},
		{
			name:       "its own type is ignored",
			in:         []Condition{cond(TypeReady, False, SeverityError, "Old", "old"), cond("A", True, "", "Ok", "")},
			wantStatus: True, wantReason: ReasonAllReady,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Summarize(TypeReady, 7, tt.in)
			if got.Status != tt.wantStatus || got.Severity != tt.wantSev || got.Reason != tt.wantReason || got.Message != tt.wantMsg {
				t.Errorf("Summarize =\n  %s %q %q %q\nwant\n  %s %q %q %q", got.Status, got.Severity, got.Reason, got.Message,
					tt.wantStatus, tt.wantSev, tt.wantReason, tt.wantMsg)
			}
			if got.ObservedGeneration != 7 {
				t.Errorf("ObservedGeneration = %d, want 7", got.ObservedGeneration)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("summary is not a valid condition: %v", err)
			}
		})
	}
}

func TestSetUpdateTransitions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var s Set
	steps := []struct {
		name        string
		c           Condition
		at          time.Duration
		wantChanged bool
		wantLTT     time.Duration
	}{
		{"new condition", cond("NetworkReady", Unknown, "", "NotObserved", "waiting"), 0, true, 0},
		{"same again does not churn", cond("NetworkReady", Unknown, "", "NotObserved", "waiting"), time.Second, false, 0},
		{"status change moves the time", cond("NetworkReady", True, "", "Up", ""), 2 * time.Second, true, 2 * time.Second},
		{"message change keeps the time", cond("NetworkReady", True, "", "Up", "eth0 up"), 3 * time.Second, true, 2 * time.Second},
		{"severity on True is dropped, no churn", cond("NetworkReady", True, SeverityError, "Up", "eth0 up"), 4 * time.Second, false, 2 * time.Second},
		{"to False", cond("NetworkReady", False, SeverityWarning, "NoRoute", "no default route"), 5 * time.Second, true, 5 * time.Second},
		{"severity change alone is a change, same time", cond("NetworkReady", False, SeverityError, "NoRoute", "no default route"), 6 * time.Second, true, 5 * time.Second},
		{"to Unknown is a transition", cond("NetworkReady", Unknown, "", "NetlinkError", "closed"), 7 * time.Second, true, 7 * time.Second},
	}
	for _, st := range steps {
		changed := s.Update(st.c, t0.Add(st.at))
		if changed != st.wantChanged {
			t.Errorf("%s: changed = %v, want %v", st.name, changed, st.wantChanged)
		}
		got, ok := s.Get("NetworkReady")
		if !ok {
			t.Fatalf("%s: condition missing", st.name)
		}
		if want := t0.Add(st.wantLTT); !got.LastTransitionTime.Time.Equal(want) {
			t.Errorf("%s: LastTransitionTime = %v, want %v", st.name, got.LastTransitionTime.Time, want)
		}
		if got.Status != True && got.Status != False && got.Severity != "" {
			t.Errorf("%s: severity %q kept on %s", st.name, got.Severity, got.Status)
		}
	}
	if !s.Remove("NetworkReady") || s.Remove("NetworkReady") {
		t.Error("Remove did not report existence correctly")
	}
	if len(s.List()) != 0 {
		t.Errorf("List after Remove = %v", s.List())
	}
}

func TestMirror(t *testing.T) {
	ltt := metav1.NewTime(time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC))
	src := []Condition{
		{Type: "Ready", Status: False, Severity: SeverityWarning, Reason: "Degraded", Message: "m", LastTransitionTime: ltt, ObservedGeneration: 3},
		{Type: TypeMemoryPressure, Status: True, Severity: SeverityWarning, Reason: "High", Message: "psi"},
		{Type: "X", Status: Unknown, Reason: "NotProbed"},
	}
	tests := []struct {
		name, from, as string
		want           Condition
	}{
		{"copy under another name", "Ready", "DriverReady",
			Condition{Type: "DriverReady", Status: False, Severity: SeverityWarning, Reason: "Degraded", Message: "m", LastTransitionTime: ltt, ObservedGeneration: 3}},
		{"across polarity inverts", TypeMemoryPressure, "MemoryHealthy",
			Condition{Type: "MemoryHealthy", Status: False, Severity: SeverityWarning, Reason: "High", Message: "psi"}},
		{"unknown stays unknown", "X", "Y", Condition{Type: "Y", Status: Unknown, Reason: "NotProbed"}},
		{"missing is Unknown with a reason", "Nope", "Z",
			Condition{Type: "Z", Status: Unknown, Reason: ReasonNotFound, Message: "no Nope condition to mirror"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Mirror(src, tt.from, tt.as); got != tt.want {
				t.Errorf("Mirror = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestAggregate(t *testing.T) {
	ready := func(s metav1.ConditionStatus, sev Severity, reason, msg string) []Condition {
		return []Condition{cond(TypeReady, s, sev, reason, msg)}
	}
	tests := []struct {
		name       string
		items      []Item
		wantStatus metav1.ConditionStatus
		wantSev    Severity
		wantMsg    string
	}{
		{"none", nil, True, "", ""},
		{"all ready", []Item{{"csi.a", ready(True, "", "Registered", "")}, {"dev.b", ready(True, "", "Registered", "")}}, True, "", ""},
		{"one gone, one unknown, one missing", []Item{
			{"csi.a", ready(True, "", "Registered", "")},
			{"csi.b", ready(Unknown, "", "NotProbed", "GetInfo pending")},
			{"dev.c", ready(False, SeverityWarning, "SocketGone", "socket removed")},
			{"dra.d", nil},
		}, False, SeverityWarning, "dev.c: socket removed; csi.b (Unknown): GetInfo pending; dra.d (Unknown): no Ready condition to mirror"},
		{"only unknown", []Item{{"csi.b", ready(Unknown, "", "NotProbed", "pending")}}, Unknown, "", "csi.b (Unknown): pending"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Aggregate("PluginsReady", TypeReady, 1, tt.items)
			if got.Type != "PluginsReady" || got.Status != tt.wantStatus || got.Severity != tt.wantSev || got.Message != tt.wantMsg {
				t.Errorf("Aggregate = %+v, want %s %q %q", got, tt.wantStatus, tt.wantSev, tt.wantMsg)
			}
		})
	}
	// Aggregating kubelet-polarity conditions: pressure True on any item is a problem.
	got := Aggregate("NoPressure", TypeMemoryPressure, 1, []Item{
		{"pod-a", []Condition{cond(TypeMemoryPressure, False, "", "Low", "")}},
		{"pod-b", []Condition{cond(TypeMemoryPressure, True, SeverityWarning, "High", "psi 80")}},
	})
	if got.Status != False || got.Severity != SeverityWarning || got.Message != "pod-b: psi 80" {
		t.Errorf("negative-polarity aggregate = %+v", got)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		c       Condition
		wantErr string
	}{
		{"ok", cond("A", True, "", "Fine", ""), ""},
		{"ok False with severity", cond("A", False, SeverityInfo, "Busy", ""), ""},
		{"no type", cond("", True, "", "Fine", ""), "no type"},
		{"bad status", cond("A", "Maybe", "", "Fine", ""), "not True, False or Unknown"},
		{"empty reason", cond("A", True, "", "", ""), "empty reason"},
		{"reason not CamelCase", cond("A", True, "", "not_camel", ""), "not CamelCase"},
		{"severity on True", cond("A", True, SeverityError, "Fine", ""), "severity Error set while status is True"},
		{"severity on Unknown", cond("A", Unknown, SeverityError, "Fine", ""), "set while status is Unknown"},
		{"unknown severity", cond("A", False, "Fatal", "Bad", ""), "unknown severity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

// The JSON form is metav1.Condition's plus severity, so that tools reading
// Kubernetes conditions read nodeshim's too.
func TestJSONCompatibleWithMetav1(t *testing.T) {
	c := Condition{Type: "NetworkReady", Status: False, Severity: SeverityError, Reason: "NoRoute", Message: "m",
		ObservedGeneration: 2, LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var m metav1.Condition
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := c.Metav1()
	if !m.LastTransitionTime.Equal(&want.LastTransitionTime) {
		t.Errorf("lastTransitionTime = %v, want %v", m.LastTransitionTime, want.LastTransitionTime)
	}
	m.LastTransitionTime = want.LastTransitionTime
	if m != want {
		t.Errorf("metav1 decode = %+v, want %+v", m, c.Metav1())
	}
	if !strings.Contains(string(b), `"severity":"Error"`) {
		t.Errorf("JSON %s lacks severity", b)
	}
}
