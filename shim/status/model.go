// Package status is nodeshim's node status model: the conditions reported
// by the sources (configuration, network, plugin drivers, and later the
// kernel report, pressure, checkpoints), the Ready summary computed from
// them, and a stream of transitions for the reporter and the log.
package status

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/shim/config/configstatus"
)

// Transition is one visible change of a condition.
type Transition struct {
	// Condition is the new state.
	Condition condition.Condition
	// Previous is the status before, empty for a new condition.
	Previous metav1.ConditionStatus
	// PreviousReason is the reason before, empty for a new condition.
	PreviousReason string
}

// Document is a snapshot of the status for the API.
type Document struct {
	// Generation counts visible changes; readers use it to skip unchanged polls.
	Generation int64 `json:"generation"`
	// Conditions are every source's conditions followed by Ready.
	Conditions []condition.Condition `json:"conditions"`
	// Config is the configuration lifecycle, when a controller reports it.
	Config *configstatus.NodeConfigStatus `json:"config,omitempty"`
	// Report summarises the capability report once it is collected; GET
	// /report serves it whole.
	Report *ReportSummary `json:"report,omitempty"`
	// Pressure is the latest reading of the pressure monitor.
	Pressure *Pressure `json:"pressure,omitempty"`
	// OOMKills are the recent OOM kills, and whether they are watched.
	OOMKills OOMKills `json:"oomKills"`
	// Checkpoints is the recent checkpoint history, oldest first.
	Checkpoints []CheckpointRecord `json:"checkpoints"`
	// CheckpointArchives are the archives kept in the checkpoint
	// directory, per container, once retention has run.
	CheckpointArchives *CheckpointArchives `json:"checkpointArchives,omitempty"`
	// SeccompProfiles are the Localhost seccomp profiles nodeshim
	// installed, once the profiles source has reported.
	SeccompProfiles *SeccompProfiles `json:"seccompProfiles,omitempty"`
	// SeccompComplaints are the would-be denials of complain-mode seccomp
	// profiles, once the complaints source has reported.
	SeccompComplaints *SeccompComplaints `json:"seccompComplaints,omitempty"`
	// Shim is nodeshim's own health: start, pid, and each source's state.
	Shim ShimHealth `json:"shim"`
}

// Model holds the conditions and keeps Ready up to date. It is safe for
// concurrent use.
type Model struct {
	clock clock.Clock

	// sourcesMu serializes SetSource, so that the ShimHealthy it sets
	// is computed from the sources as they are when it is set.
	sourcesMu sync.Mutex

	mu     sync.Mutex
	gen    int64
	set    condition.Set
	config *configstatus.NodeConfigStatus
	subs   map[chan Transition]struct{}
	// changed is closed, and cleared, at the next change of gen; nil
	// while no one waits.
	changed chan struct{}

	report      *capability.Report
	pressure    *Pressure
	oom         OOMKills
	checkpoints []CheckpointRecord
	archives    *CheckpointArchives
	profiles    *SeccompProfiles
	complaints  *SeccompComplaints
	shim        ShimHealth
	podsRefresh func(ctx context.Context)
}

// New returns a Model whose Ready is Unknown until a condition is set:
// nothing observed is not the same as healthy.
func New(clk clock.Clock) *Model {
	if clk == nil {
		clk = clock.RealClock{}
	}
	m := &Model{clock: clk, subs: map[chan Transition]struct{}{},
		oom: OOMKills{Reason: "the OOM watcher has not started"}}
	m.set.Update(condition.Condition{Type: condition.TypeReady, Status: condition.Unknown, Reason: "NotObserved",
		Message: "no source has reported yet"}, clk.Now())
	return m
}

// Set records conditions from a source and recomputes Ready. Only visible
// changes count: setting an unchanged condition neither bumps the
// generation nor emits a transition. It reports whether anything changed.
func (m *Model) Set(conds ...condition.Condition) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	var out []Transition
	for _, c := range conds {
		if c.Type == condition.TypeReady {
			continue // computed, never set
		}
		prev, _ := m.set.Get(c.Type)
		if m.set.Update(c.Labelled(), now) {
			cur, _ := m.set.Get(c.Type)
			out = append(out, Transition{Condition: cur, Previous: prev.Status, PreviousReason: prev.Reason})
		}
	}
	if len(out) == 0 {
		return false
	}
	var others []condition.Condition
	for _, c := range m.set.List() {
		if c.Type != condition.TypeReady {
			others = append(others, c)
		}
	}
	m.bumpLocked()
	prev, _ := m.set.Get(condition.TypeReady)
	ready := condition.Summarize(condition.TypeReady, 0, others)
	if m.set.Update(ready, now) {
		cur, _ := m.set.Get(condition.TypeReady)
		out = append(out, Transition{Condition: cur, Previous: prev.Status, PreviousReason: prev.Reason})
	}
	for ch := range m.subs {
		for _, t := range out {
			select {
			case ch <- t:
			default: // a slow subscriber loses transitions, never blocks the sources
			}
		}
	}
	return true
}

// Condition returns the condition of type typ in d, and false when d has
// none of that type.
func (d Document) Condition(typ string) (condition.Condition, bool) {
	for _, c := range d.Conditions {
		if c.Type == typ {
			return c, true
		}
	}
	return condition.Condition{}, false
}

// Snapshot returns the current document, Ready last.
func (m *Model) Snapshot() Document {
	m.mu.Lock()
	defer m.mu.Unlock()
	var d Document
	d.Generation = m.gen
	var ready condition.Condition
	for _, c := range m.set.List() {
		if c.Type == condition.TypeReady {
			ready = c
			continue
		}
		d.Conditions = append(d.Conditions, c)
	}
	d.Conditions = append(d.Conditions, ready)
	if m.config != nil {
		cp := *m.config
		d.Config = &cp
	}
	if m.report != nil {
		d.Report = &ReportSummary{GeneratedAt: m.report.GeneratedAt, KernelRelease: m.report.Kernel.Raw, Summary: m.report.Summary}
	}
	if m.pressure != nil {
		p := *m.pressure
		d.Pressure = &p
	}
	// The histories are replaced, never appended to in place, so sharing
	// them with the snapshot is safe.
	d.OOMKills = m.oom
	if d.OOMKills.Recent == nil {
		d.OOMKills.Recent = []OOMKill{}
	}
	d.Checkpoints = m.checkpoints
	if d.Checkpoints == nil {
		d.Checkpoints = []CheckpointRecord{}
	}
	if m.archives != nil {
		// Replaced whole, never changed in place.
		a := *m.archives
		d.CheckpointArchives = &a
	}
	if m.profiles != nil {
		// Replaced whole, never changed in place.
		p := *m.profiles
		d.SeccompProfiles = &p
	}
	if m.complaints != nil {
		// Replaced whole, never changed in place.
		c := *m.complaints
		d.SeccompComplaints = &c
	}
	d.Shim = m.shim
	if d.Shim.Sources == nil {
		d.Shim.Sources = []SourceState{}
	}
	return d
}

// SetConfig records the configuration lifecycle's status and its
// ConfigHealthy condition.
func (m *Model) SetConfig(s configstatus.NodeConfigStatus) {
	m.mu.Lock()
	m.config = &s
	m.mu.Unlock()
	m.Set(s.Condition())
}

// Subscribe returns a channel of transitions with room for buffer of them,
// and a function that ends the subscription and closes the channel.
func (m *Model) Subscribe(buffer int) (<-chan Transition, func()) {
	ch := make(chan Transition, buffer)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			m.mu.Lock()
			delete(m.subs, ch)
			m.mu.Unlock()
			close(ch)
		})
	}
}

// Since returns how long the condition of type t has had its status, and
// false when there is no such condition.
func (m *Model) Since(t string) (time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.set.Get(t)
	if !ok {
		return 0, false
	}
	return m.clock.Since(c.LastTransitionTime.Time), true
}

// bumpLocked counts a visible change and wakes those waiting in Changed.
// m.mu is held.
func (m *Model) bumpLocked() {
	m.gen++
	if m.changed != nil {
		close(m.changed)
		m.changed = nil
	}
}

// Changed returns a channel closed once the generation differs from gen:
// at once when it already does. A long poll (GET /status?after=) waits on
// it instead of reading the model over and over.
func (m *Model) Changed(gen int64) <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gen != gen {
		c := make(chan struct{})
		close(c)
		return c
	}
	if m.changed == nil {
		m.changed = make(chan struct{})
	}
	return m.changed
}

// Follow copies a source's conditions into the model now and after every
// change the source announces, until ctx is done. changed returns a channel
// closed at the source's next change (the Changed method of the config
// controller, the network monitor and the plugin watcher); conds reads the
// source's current conditions.
func (m *Model) Follow(ctx context.Context, changed func() <-chan struct{}, conds func() []condition.Condition) {
	for {
		ch := changed() // before reading, so that no change is missed
		m.Set(conds()...)
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
	}
}
