package cgroup

import (
	"fmt"
	"time"
)

// WatchMode says how a Watcher detects pressure.
type WatchMode string

// The two detection modes.
const (
	// ModeTrigger: a kernel PSI trigger armed on the pressure file, waited
	// for with poll(2) POLLPRI (Documentation/accounting/psi.rst).
	ModeTrigger WatchMode = "trigger"
	// ModePoll: the kernel refused the trigger, so the file's `total` is
	// read at a short interval and the stall within the window computed here.
	ModePoll WatchMode = "poll"
)

// Trigger is a PSI trigger: fire when tasks stalled (some or full) for at
// least Stall within any Window.
type Trigger struct {
	Full   bool
	Stall  time.Duration
	Window time.Duration
}

// DefaultTrigger is "some 100000 500000": 100 ms of stall within 500 ms,
// the kernel's shortest window. A trigger only wakes the Monitor to
// evaluate at once (the conditions come from the thresholds), so it is
// tuned for how soon it fires: the kernel checks a trigger every tenth of
// its window once stalls begin, so "some 150000 1000000" fired 200-250 ms
// into a stall on 6.1 and this one fires after 100-150 ms (BENCHMARKS.md,
// "Guest: 10,000 pod cgroups with kernel triggers").
var DefaultTrigger = Trigger{Stall: 100 * time.Millisecond, Window: 500 * time.Millisecond}

// String prints t as written to a pressure file.
func (t Trigger) String() string {
	kind := "some"
	if t.Full {
		kind = "full"
	}
	return fmt.Sprintf("%s %d %d", kind, t.Stall.Microseconds(), t.Window.Microseconds())
}

// unprivilegedWindow is the granularity of trigger windows that the kernel
// accepts from a process without CAP_SYS_RESOURCE (Linux 6.5 and later).
const unprivilegedWindow = 2 * time.Second

// widened is t with its window rounded up to a multiple of
// unprivilegedWindow and the same stall; t itself when it is one already.
func (t Trigger) widened() Trigger {
	if r := t.Window % unprivilegedWindow; t.Window > 0 && r != 0 {
		t.Window += unprivilegedWindow - r
	}
	return t
}

// DefaultPollInterval is the fallback's read interval. Measured on the
// host (BENCHMARKS.md): 100 ms detects in 221 ms p50 from the first stall
// but costs a node agent 0.8-1.2% of a core idle in wake-ups; 200 ms
// detects in 312 ms p50 / 353 ms p99 for about 0.4%; 250 ms reaches 500 ms
// p50 from the release of the workload.
const DefaultPollInterval = 200 * time.Millisecond

// PressureEvent reports that a watched pressure file's trigger fired.
type PressureEvent struct {
	// Path is the pressure file.
	Path string
	Mode WatchMode
	Time time.Time
	// Stall is the stall measured within the window (poll mode only; the
	// kernel does not say in trigger mode).
	Stall time.Duration
}

// stallWindow emulates a kernel PSI trigger over samples of `total`: it
// fires when total grew by at least Stall within the last Window, and at
// most once per Window, as the kernel rate-limits trigger events
// (kernel/sched/psi.c, update_triggers: one event per window).
type stallWindow struct {
	trig      Trigger
	samples   []sample
	lastFired time.Time
}

type sample struct {
	t     time.Time
	total uint64
}

// add records a sample and reports whether the trigger fires and the stall
// within the window.
func (w *stallWindow) add(t time.Time, total uint64) (bool, time.Duration) {
	// Drop samples older than the window, keeping the newest of them as the
	// window's base so the span covered is as close to Window as the
	// sampling allows.
	cut := 0
	for cut+1 < len(w.samples) && !w.samples[cut+1].t.After(t.Add(-w.trig.Window)) {
		cut++
	}
	if cut > 0 {
		w.samples = append(w.samples[:0], w.samples[cut:]...)
	}
	w.samples = append(w.samples, sample{t, total})
	if len(w.samples) < 2 {
		return false, 0
	}
	base := w.samples[0]
	if total < base.total {
		// The counter went backwards: the cgroup was recreated. Start over.
		w.samples = append(w.samples[:0], sample{t, total})
		return false, 0
	}
	stall := time.Duration(total-base.total) * time.Microsecond
	if stall < w.trig.Stall {
		return false, stall
	}
	if !w.lastFired.IsZero() && t.Sub(w.lastFired) < w.trig.Window {
		return false, stall
	}
	w.lastFired = t
	return true, stall
}

// Clock tells the time; tests inject a fake one so that windows and
// intervals pass without sleeping.
type Clock interface {
	Now() time.Time
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }
