package status

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/kernel/capability"
)

// Condition types of the sources the daemon wires into the model. All have
// positive polarity except kubelet's pressure types, which keep kubelet's
// (True means pressure) and carry condition.PolarityNegative.
const (
	// TypeKernelReport is True once the capability report was collected.
	TypeKernelReport = "KernelReportSucceeded"
	// TypePressureMonitor is True while the cgroup pressure monitor runs.
	TypePressureMonitor = "PressureMonitorReady"
	// TypeOOMWatcher is True while the eBPF OOM watcher is attached.
	TypeOOMWatcher = "OOMWatcherReady"
	// TypeCheckpoint reports the last checkpoint, or the one in progress.
	TypeCheckpoint = "CheckpointSucceeded"
)

// Bounds of the model's histories: the oldest entries are dropped first.
const (
	MaxOOMKills    = 64
	MaxCheckpoints = 32
)

// ReportSummary is the status document's view of the capability report;
// GET /report serves the whole report.
type ReportSummary struct {
	// GeneratedAt is when the report's collection started.
	GeneratedAt time.Time `json:"generatedAt"`
	// KernelRelease is the running kernel's release string.
	KernelRelease string `json:"kernelRelease,omitempty"`
	// Summary counts the report's verdicts.
	Summary capability.Summary `json:"summary"`
}

// OOMKills are the OOM kills the eBPF watcher saw.
type OOMKills struct {
	// Watching says whether OOM kills are observed at all. When false,
	// Recent is empty because nothing watches, not because nothing was
	// killed; Reason says why.
	Watching bool `json:"watching"`
	// Hook is the kernel hook the watcher is attached to.
	Hook string `json:"hook,omitempty"`
	// Reason says why OOM kills are not watched.
	Reason string `json:"reason,omitempty"`
	// Total counts the kills seen since start, Recent keeps the last
	// MaxOOMKills of them, oldest first.
	Total  uint64    `json:"total"`
	Recent []OOMKill `json:"recent"`
}

// OOMKill is one task the kernel chose as an OOM victim.
type OOMKill struct {
	Time time.Time `json:"time"`
	// PID is the victim's thread id, TGID its process id (0 when the
	// kernel hook could not see it).
	PID  uint32 `json:"pid"`
	TGID uint32 `json:"tgid,omitempty"`
	Comm string `json:"comm,omitempty"`
	// CgroupID is the victim's cgroup v2 id, 0 when unknown.
	CgroupID     uint64 `json:"cgroupID,omitempty"`
	RSSBytes     uint64 `json:"rssBytes,omitempty"`
	TotalVMBytes uint64 `json:"totalVMBytes,omitempty"`
	OOMScoreAdj  int32  `json:"oomScoreAdj"`
	// Container is the CRI container the victim ran in, nil when it was
	// not resolved; Unresolved then says why (empty when nothing tried).
	Container  *OOMContainer `json:"container,omitempty"`
	Unresolved string        `json:"unresolved,omitempty"`
}

// OOMContainer names the container of an OOM victim as kubelet knows it.
type OOMContainer struct {
	Namespace   string `json:"namespace,omitempty"`
	Pod         string `json:"pod,omitempty"`
	PodUID      string `json:"podUID,omitempty"`
	Container   string `json:"container,omitempty"`
	ContainerID string `json:"containerID"`
	// ResolvedBy says how the victim was matched to the container: its
	// cgroup v2 id, its /proc cgroup paths, or the v1 OOM kill counters.
	ResolvedBy string `json:"resolvedBy"`
}

// Checkpoint results.
const (
	CheckpointSucceeded = "Succeeded"
	CheckpointFailed    = "Failed"
	CheckpointAborted   = "Aborted"
)

// CheckpointRecord is one checkpoint request that reached CRIU.
type CheckpointRecord struct {
	Namespace   string `json:"namespace"`
	Pod         string `json:"pod"`
	Container   string `json:"container"`
	ContainerID string `json:"containerID,omitempty"`
	PID         int    `json:"pid,omitempty"`
	// StartedAt is when the request was accepted.
	StartedAt time.Time `json:"startedAt"`
	// DurationSeconds is the whole request, FrozenSeconds how long CRIU
	// kept the workload frozen.
	DurationSeconds float64 `json:"durationSeconds"`
	FrozenSeconds   float64 `json:"frozenSeconds,omitempty"`
	// Result is Succeeded, Failed or Aborted (timeout, client gone, or
	// shutdown: the workload was left running).
	Result string `json:"result"`
	// Path and SizeBytes describe the archive of a success.
	Path      string `json:"path,omitempty"`
	SizeBytes int64  `json:"sizeBytes,omitempty"`
	// Error is CRIU's or nodeshim's message for a failure.
	Error string `json:"error,omitempty"`
	// PreDumpRounds is the number of pre-dump rounds (iterative
	// pre-copy) that ran before the final dump; PreDumpSkipped says why
	// the configured rounds did not run (a kernel without dirty-memory
	// tracking).
	PreDumpRounds  int    `json:"preDumpRounds,omitempty"`
	PreDumpSkipped string `json:"preDumpSkipped,omitempty"`
}

// SetReport records a capability report and its KernelReportSucceeded
// condition; a collection error becomes the condition's reason instead.
func (m *Model) SetReport(rep *capability.Report, err error) {
	if err != nil {
		m.Set(condition.Condition{Type: TypeKernelReport, Status: condition.False, Severity: condition.SeverityWarning,
			Reason: "CollectFailed", Message: err.Error()})
		return
	}
	m.mu.Lock()
	m.report = rep
	m.bumpLocked()
	m.mu.Unlock()
	s := rep.Summary
	m.Set(condition.Condition{Type: TypeKernelReport, Status: condition.True, Reason: "Collected",
		Message: fmt.Sprintf("kernel %s: %d requirements, %d supported, %d degraded, %d unsupported, %d unknown",
			rep.Kernel.Raw, s.Total, s.Supported, s.Degraded, s.Unsupported, s.Unknown)})
}

// Report returns the last capability report, nil before the first.
func (m *Model) Report() *capability.Report {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.report
}

// SetOOMWatch records whether OOM kills are watched, and how or why not.
func (m *Model) SetOOMWatch(watching bool, hook, reason string) {
	m.mu.Lock()
	m.oom.Watching, m.oom.Hook, m.oom.Reason = watching, hook, reason
	m.bumpLocked()
	m.mu.Unlock()
}

// AddOOMKill appends an OOM kill to the bounded history.
func (m *Model) AddOOMKill(k OOMKill) {
	m.mu.Lock()
	m.oom.Total++
	m.oom.Recent = appendBounded(m.oom.Recent, k, MaxOOMKills)
	m.bumpLocked()
	m.mu.Unlock()
}

// AddCheckpoint appends a checkpoint to the bounded history.
func (m *Model) AddCheckpoint(r CheckpointRecord) {
	m.mu.Lock()
	m.checkpoints = appendBounded(m.checkpoints, r, MaxCheckpoints)
	m.bumpLocked()
	m.mu.Unlock()
}

// CheckpointArchives describes the archives of the checkpoint directory.
type CheckpointArchives struct {
	// Dir is the checkpoint directory.
	Dir string `json:"dir"`
	// Containers has one entry per container with archives, sorted.
	Containers []ArchiveSummary `json:"containers"`
	// RemovedTotal counts the archives retention removed since start.
	RemovedTotal int `json:"removedTotal"`
}

// ArchiveSummary is the archives of one container.
type ArchiveSummary struct {
	// Container is "<pod>_<namespace>-<container>", as archive names spell it.
	Container string `json:"container"`
	// Count and Bytes are the number and total size of its archives.
	Count int   `json:"count"`
	Bytes int64 `json:"bytes"`
	// Oldest is the name of the oldest archive, OldestTime when it was taken.
	Oldest     string    `json:"oldest"`
	OldestTime time.Time `json:"oldestTime"`
}

// SetCheckpointArchives records the archives kept after retention ran.
func (m *Model) SetCheckpointArchives(a CheckpointArchives) {
	if a.Containers == nil {
		a.Containers = []ArchiveSummary{}
	}
	m.mu.Lock()
	m.archives = &a
	m.bumpLocked()
	m.mu.Unlock()
}

// SetPressure records the pressure monitor's latest values. They change at
// every evaluation, so they do not bump the generation: conditions do, at
// their transitions.
func (m *Model) SetPressure(p Pressure) {
	m.mu.Lock()
	m.pressure = &p
	m.mu.Unlock()
}

// SetPods records a read of the pods' cgroups in the pressure values,
// when the monitor has reported any. Like SetPressure, it does not bump
// the generation.
func (m *Model) SetPods(p *PodPressures) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pressure == nil {
		return
	}
	cp := *m.pressure
	cp.Pods = p
	m.pressure = &cp
}

// SetPodsRefresh registers refresh, which reads the pods' cgroups again
// when its last read is too old and records it with SetPods; nil
// unregisters it. The pressure source registers it while its monitor runs.
func (m *Model) SetPodsRefresh(refresh func(ctx context.Context)) {
	m.mu.Lock()
	m.podsRefresh = refresh
	m.mu.Unlock()
}

// RefreshPods brings the pods' view of the pressure values up to date
// before a reader that asked for it (GET /pods, /status?pods=true) reads
// it: the pods' cgroups are read on demand, not at every evaluation.
func (m *Model) RefreshPods(ctx context.Context) {
	m.mu.Lock()
	refresh := m.podsRefresh
	m.mu.Unlock()
	if refresh != nil {
		refresh(ctx)
	}
}

// appendBounded appends v and drops the oldest entries beyond n, without
// sharing the backing array with earlier snapshots.
func appendBounded[T any](s []T, v T, n int) []T {
	if len(s) >= n {
		s = s[len(s)-n+1:]
	}
	out := make([]T, 0, len(s)+1)
	out = append(out, s...)
	return append(out, v)
}

// TypeShimHealthy is nodeshim's own health: False when one of its sources
// failed or panicked while the daemon runs.
const TypeShimHealthy = "ShimHealthy"

// The states of a source.
const (
	SourceRunning = "Running"
	SourceDone    = "Done"
	SourceFailed  = "Failed"
)

// ShimHealth is nodeshim's own health in the status document.
type ShimHealth struct {
	// StartedAt is when the daemon started, PID its process id.
	StartedAt time.Time `json:"startedAt"`
	PID       int       `json:"pid"`
	// Sources are the daemon's sources in the order they started.
	Sources []SourceState `json:"sources"`
}

// SourceState is how one source is doing: Running, Done (it returned on
// its own; its conditions say why, as with an OOM watcher the kernel cannot
// run) or Failed (an error or a panic).
type SourceState struct {
	Name  string `json:"name"`
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

// SetShim records when and as which process the daemon started.
func (m *Model) SetShim(startedAt time.Time, pid int) {
	m.mu.Lock()
	m.shim.StartedAt, m.shim.PID = startedAt, pid
	m.bumpLocked()
	m.mu.Unlock()
}

// SetSource records the state of a source and updates ShimHealthy.
func (m *Model) SetSource(name, state, errMsg string) {
	m.sourcesMu.Lock()
	defer m.sourcesMu.Unlock()
	m.mu.Lock()
	srcs := make([]SourceState, 0, len(m.shim.Sources)+1)
	found := false
	for _, s := range m.shim.Sources {
		if s.Name == name {
			s, found = SourceState{Name: name, State: state, Error: errMsg}, true
		}
		srcs = append(srcs, s)
	}
	if !found {
		srcs = append(srcs, SourceState{Name: name, State: state, Error: errMsg})
	}
	m.shim.Sources = srcs
	m.bumpLocked()
	var failed []string
	for _, s := range srcs {
		if s.State == SourceFailed {
			failed = append(failed, fmt.Sprintf("source %s failed: %s", s.Name, s.Error))
		}
	}
	m.mu.Unlock()
	c := condition.Condition{Type: TypeShimHealthy, Status: condition.True, Reason: "SourcesHealthy", Message: "no source has failed"}
	if len(failed) > 0 {
		c = condition.Condition{Type: TypeShimHealthy, Status: condition.False, Severity: condition.SeverityError,
			Reason: "SourceFailed", Message: strings.Join(failed, "; ")}
	}
	m.Set(c)
}
