package pressure

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/internal/syncbuf"
	"github.com/nodeshim/nodeshim/shim/source/sourcetest"
	"github.com/nodeshim/nodeshim/shim/status"
	"github.com/nodeshim/nodeshim/testenv/testutil"
)

var discard = slog.New(slog.DiscardHandler)

// TestPressureSource runs the pressure monitor on this host: kubelet's
// pressure conditions (labelled with kubelet's polarity), the PSI views,
// and the live readings arrive in the model.
func TestPressureSource(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireFile(t, "/proc/pressure/memory")
	m := status.New(nil)
	kubelet := t.TempDir() // nodefs: an existing directory
	sourcetest.Run(t, m, &Source{ProcRoot: "/proc", KubeletRoot: kubelet, Interval: 50 * time.Millisecond, Logger: discard})
	d := sourcetest.WaitFor(t, m, func(d status.Document) bool {
		_, mem := d.Condition("MemoryPressure")
		_, psi := d.Condition("MemoryContentionFree")
		return mem && psi && d.Pressure != nil
	})
	c, _ := d.Condition(status.TypePressureMonitor)
	if c.Status != condition.True || c.Reason != ReasonWatching || !strings.Contains(c.Message, "memory.pressure") {
		t.Errorf("%s = %+v", status.TypePressureMonitor, c)
	}
	// No one has read the pods: the kernel pass is not loaded yet.
	if !strings.Contains(c.Message, "by a BPF cgroup iterator in one kernel pass where it loads (at the first read), else their cgroup2 files") {
		t.Errorf("%s before a read of the pods: %s", status.TypePressureMonitor, c.Message)
	}
	for _, typ := range []string{"MemoryPressure", "DiskPressure", "PIDPressure"} {
		c, ok := d.Condition(typ)
		if !ok || c.Polarity != condition.PolarityKubelet || c.Status == condition.Unknown {
			t.Errorf("%s = %+v, want a known status with kubelet's polarity", typ, c)
		}
	}
	for _, typ := range []string{"MemoryContentionFree", "IOContentionFree"} {
		if c, ok := d.Condition(typ); !ok || c.Polarity != "" || c.Status == condition.Unknown {
			t.Errorf("%s = %+v, want a known positive-polarity view", typ, c)
		}
	}
	sig := map[string]status.Signal{}
	for _, s := range d.Pressure.Signals {
		sig[s.Name] = s
	}
	if s := sig["memory.available"]; s.Unknown != "" || s.Capacity == 0 || s.Available > s.Capacity {
		t.Errorf("memory.available = %+v", s)
	}
	if s := sig["allocatableMemory.available"]; s.Unknown == "" {
		t.Errorf("allocatableMemory.available without kubepods = %+v, want unknown", s)
	}
	var memPSI *status.PSI
	for i := range d.Pressure.PSI {
		if d.Pressure.PSI[i].Resource == "memory" {
			memPSI = &d.Pressure.PSI[i]
		}
	}
	if memPSI == nil || memPSI.Unknown != "" || memPSI.Full == nil {
		t.Errorf("memory PSI = %+v", memPSI)
	}
	if len(d.Pressure.Watchers) == 0 {
		t.Error("no pressure watchers in the document")
	}
	// Readings are live: a later evaluation replaces them.
	at := d.Pressure.ObservedAt
	sourcetest.WaitFor(t, m, func(d status.Document) bool { return d.Pressure.ObservedAt.After(at) })
}

// TestPressureSourceFails: without a readable mount table the monitor
// cannot start; the model says so and the pressure conditions are Unknown,
// and it is retried.
func TestPressureSourceFails(t *testing.T) {
	m := status.New(nil)
	logs := &syncbuf.Buffer{}
	sourcetest.Run(t, m, &Source{ProcRoot: t.TempDir(), KubeletRoot: t.TempDir(), Retry: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	d := sourcetest.WaitFor(t, m, func(d status.Document) bool { _, ok := d.Condition(status.TypePressureMonitor); return ok })
	c, _ := d.Condition(status.TypePressureMonitor)
	if c.Status != condition.False || c.Reason != ReasonMonitorFailed || !strings.Contains(c.Message, "mountinfo") {
		t.Errorf("%s = %+v", status.TypePressureMonitor, c)
	}
	for _, typ := range []string{"MemoryPressure", "DiskPressure", "PIDPressure", "MemoryContentionFree", "IOContentionFree"} {
		if c, _ := d.Condition(typ); c.Status != condition.Unknown || c.Reason != ReasonPressureMonitorDown {
			t.Errorf("%s = %+v, want Unknown %s", typ, c, ReasonPressureMonitorDown)
		}
	}
	for strings.Count(logs.String(), "pressure monitor failed") < 2 {
		time.Sleep(time.Millisecond) // retried; go test's -timeout bounds it
	}
}
