package fleet

import (
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Tracker times condition changes from the shim to the Node: Expect
// records a change when it is made, Observe is given every Node a watch
// delivers, and the time between the two is a sample of the phase.
type Tracker struct {
	mu         sync.Mutex
	pending    map[string]expectation
	samples    map[string][]time.Duration
	superseded map[string]int
}

type expectation struct {
	typ    corev1.NodeConditionType
	status corev1.ConditionStatus
	at     time.Time
	phase  string
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{pending: map[string]expectation{}, samples: map[string][]time.Duration{}, superseded: map[string]int{}}
}

// Expect records that node's condition typ was set to status at at. A
// change still pending on the node is superseded (counted, never timed).
func (t *Tracker) Expect(phase, node string, typ corev1.NodeConditionType, status corev1.ConditionStatus, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.pending[node]; ok {
		t.superseded[old.phase]++
	}
	t.pending[node] = expectation{typ: typ, status: status, at: at, phase: phase}
}

// Observe takes a Node seen at now.
func (t *Tracker) Observe(node *corev1.Node, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.pending[node.Name]
	if !ok {
		return
	}
	for _, c := range node.Status.Conditions {
		if c.Type == e.typ && c.Status == e.status {
			t.samples[e.phase] = append(t.samples[e.phase], now.Sub(e.at))
			delete(t.pending, node.Name)
			return
		}
	}
}

// Latency summarises the samples of one phase.
type Latency struct {
	// Samples is how many changes reached the Node; Missed how many were
	// still pending at the end, or superseded by the next change first.
	Samples, Missed int
	// P50, P99 and Max are of the samples.
	P50, P99, Max time.Duration
}

// Latency returns the summary of phase, counting its changes still
// pending as missed.
func (t *Tracker) Latency(phase string) Latency {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := slices.Clone(t.samples[phase])
	slices.Sort(s)
	l := Latency{Samples: len(s), Missed: t.superseded[phase]}
	for _, e := range t.pending {
		if e.phase == phase {
			l.Missed++
		}
	}
	if len(s) > 0 {
		l.P50, l.P99, l.Max = Percentile(s, 0.50), Percentile(s, 0.99), s[len(s)-1]
	}
	return l
}

// Percentile returns the q-th quantile of sorted (nearest rank).
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}
