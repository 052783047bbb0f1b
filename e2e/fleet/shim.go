package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nodeshim/nodeshim/cluster/reporter"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/shim/status"
)

// FlapType is the shim condition the benchmark changes; the reporter
// publishes it as NodeShimNetworkReady.
const FlapType = "NetworkReady"

// Shim is an in-process nodeshim shim for one simulated node: a status
// model filled as a healthy node's daemon fills it, read by the reporter as
// GET /status is served, through JSON. It implements reporter.Shim without
// a socket, so that 1,000 of them cost no file descriptors; PollingShim
// hides its long poll.
type Shim struct {
	// Model is the node's status model; the benchmark sets conditions on it.
	Model *status.Model

	mu     sync.Mutex
	gen    int64
	cached reporter.Snapshot
	ok     bool
}

// LoadReport reads a capability report (a kernel golden file) for NewShim.
func LoadReport(path string) (*capability.Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read capability report: %w", err)
	}
	var rep capability.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, fmt.Errorf("decode capability report %s: %w", path, err)
	}
	return &rep, nil
}

// NewShim returns a shim whose model holds what a healthy node's daemon
// reports: its sources running, the capability report rep (shared, never
// changed), the OOM watcher and pressure monitor up, CNI configured.
func NewShim(rep *capability.Report) *Shim {
	m := status.New(nil)
	m.SetShim(time.Now(), 4242)
	for _, src := range []string{"config", "network", "plugins", "report", "pressure", "oom", "profiles", "checkpoints"} {
		m.SetSource(src, status.SourceRunning, "")
	}
	m.SetReport(rep, nil)
	m.SetOOMWatch(true, "memory.events", "")
	m.Set(
		condition.Condition{Type: "ConfigHealthy", Status: condition.True, Reason: "Applied", Message: "configuration generation 1 applied"},
		condition.Condition{Type: FlapType, Status: condition.True, Reason: "CNIConfigured", Message: "CNI config 10-calico.conflist"},
		condition.Condition{Type: "PluginsReady", Status: condition.True, Reason: "AllRegistered", Message: "2 plugins"},
		condition.Condition{Type: "PressureMonitorReady", Status: condition.True, Reason: "PSITriggers", Message: "PSI triggers on memory, cpu and io"},
		condition.Condition{Type: "SeccompProfilesReady", Status: condition.True, Reason: "Installed", Message: "3 profiles installed"},
		condition.Condition{Type: condition.TypeMemoryPressure, Status: condition.False, Reason: "NoPressure", Message: "memory.available 6.1Gi above the 100Mi threshold"},
	)
	return &Shim{Model: m}
}

// SetFlap sets FlapType to ok (True) or not (False, an error).
func (s *Shim) SetFlap(ok bool) {
	if ok {
		s.Model.Set(condition.Condition{Type: FlapType, Status: condition.True, Reason: "CNIConfigured", Message: "CNI config 10-calico.conflist"})
		return
	}
	s.Model.Set(condition.Condition{Type: FlapType, Status: condition.False, Severity: condition.SeverityError,
		Reason: "NoCNIConfig", Message: "no CNI config in /etc/cni/net.d"})
}

// Status returns the document as the reporter's socket client decodes it.
// The encoding is redone only when the generation moves, as a reader that
// skips unchanged polls would see it.
func (s *Shim) Status(context.Context) (reporter.Snapshot, error) {
	doc := s.Model.Snapshot()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ok && doc.Generation == s.gen {
		return s.cached, nil
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return reporter.Snapshot{}, fmt.Errorf("encode status: %w", err)
	}
	var snap reporter.Snapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		return reporter.Snapshot{}, fmt.Errorf("decode status: %w", err)
	}
	s.cached, s.gen, s.ok = snap, doc.Generation, true
	return snap, nil
}

// StatusAfter answers as the node API's GET /status?after=GEN&wait=W does:
// once the status generation differs from gen, or after wait with the
// unchanged status. It makes Shim a reporter.LongPoller.
func (s *Shim) StatusAfter(ctx context.Context, gen int64, wait time.Duration) (reporter.Snapshot, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.Model.Changed(gen):
	case <-t.C:
	case <-ctx.Done():
		return reporter.Snapshot{}, ctx.Err()
	}
	return s.Status(ctx)
}

// PollingShim is a Shim without its long poll, as a shim that does not
// serve GET /status?after= is to the reporter: read every poll interval.
type PollingShim struct{ shim *Shim }

// Status returns the shim's status.
func (p PollingShim) Status(ctx context.Context) (reporter.Snapshot, error) {
	return p.shim.Status(ctx)
}
