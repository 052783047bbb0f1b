package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/status"
)

func TestCollector(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	m := status.New(clk)
	clk.Step(time.Minute)
	m.Set(condition.Condition{Type: "NetworkReady", Status: condition.False, Severity: condition.SeverityError, Reason: "NoDefaultRoute"})
	ref := &config.SourceRef{UID: "abc", AssignedAt: metav1.NewTime(clk.Now())}
	cfg := config.NodeConfigStatus{Assigned: &config.SourceRef{UID: "def"}, Active: ref, LastKnownGood: ref, Error: "rolled back"}

	m.SetOOMWatch(true, "tracepoint/oom/mark_victim", "")
	m.AddOOMKill(status.OOMKill{Time: clk.Now(), PID: 42, TGID: 42, Comm: "hog"})
	m.SetSeccompComplaints(status.SeccompComplaints{Watching: true, Total: 6, Containers: []status.ContainerComplaints{
		{Namespace: "shop", Pod: "web-0", Container: "nginx", ContainerID: "c1", Syscalls: []status.SyscallComplaint{{Name: "chdir", Count: 2}, {Name: "umask", Count: 1}}},
		{Comm: "ln", Syscalls: []status.SyscallComplaint{{Name: "symlink", Count: 1}}},
		{Comm: "mkdir", Syscalls: []status.SyscallComplaint{{Name: "symlink", Count: 2}}},
	}})
	m.SetPressure(status.Pressure{
		Signals: []status.Signal{
			{Name: "memory.available", Available: 3 << 30, Capacity: 4 << 30},
			{Name: "nodefs.available", Unknown: "statfs /var/lib/kubelet: no such file or directory"},
		},
		PSI: []status.PSI{
			{Resource: "cpu", Unknown: "open cpu.pressure: no such file"},
			{Resource: "memory", Some: status.PSILine{Avg10: 12.5, Avg60: 2, Avg300: 0.25, TotalMicroseconds: 1_500_000},
				Full: &status.PSILine{Avg10: 1, TotalMicroseconds: 250_000}},
		},
	})

	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewCollector(m, func() config.NodeConfigStatus { return cfg })); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP nodeshim_condition Node condition by type and status: 1 for the current status, 0 for the two others (as kube_node_status_condition).
# TYPE nodeshim_condition gauge
nodeshim_condition{status="False",type="NetworkReady"} 1
nodeshim_condition{status="False",type="Ready"} 1
nodeshim_condition{status="True",type="NetworkReady"} 0
nodeshim_condition{status="True",type="Ready"} 0
nodeshim_condition{status="Unknown",type="NetworkReady"} 0
nodeshim_condition{status="Unknown",type="Ready"} 0
# HELP nodeshim_condition_last_transition_timestamp_seconds When the condition last changed status, in seconds since the epoch.
# TYPE nodeshim_condition_last_transition_timestamp_seconds gauge
nodeshim_condition_last_transition_timestamp_seconds{type="NetworkReady"} 1.80000006e+09
nodeshim_condition_last_transition_timestamp_seconds{type="Ready"} 1.80000006e+09
# HELP nodeshim_config_error 1 while the configuration lifecycle reports an error (a rollback or a source error).
# TYPE nodeshim_config_error gauge
nodeshim_config_error 1
# HELP nodeshim_config_source_info Configuration payloads by role (assigned, active, last_known_good); uid "" is the local defaults.
# TYPE nodeshim_config_source_info gauge
nodeshim_config_source_info{role="active",uid="abc"} 1
nodeshim_config_source_info{role="assigned",uid="def"} 1
nodeshim_config_source_info{role="last_known_good",uid="abc"} 1
# HELP nodeshim_oom_kills_total OOM kills seen by the eBPF OOM watcher since nodeshim started.
# TYPE nodeshim_oom_kills_total counter
nodeshim_oom_kills_total 1
# HELP nodeshim_oom_watcher_attached 1 while the eBPF OOM watcher is attached; with 0, nodeshim_oom_kills_total counts nothing.
# TYPE nodeshim_oom_watcher_attached gauge
nodeshim_oom_watcher_attached 1
# HELP nodeshim_pressure_signal_available Eviction signal (kubelet's names) available amount: bytes, inodes or process ids.
# TYPE nodeshim_pressure_signal_available gauge
nodeshim_pressure_signal_available{signal="memory.available"} 3.221225472e+09
# HELP nodeshim_pressure_signal_capacity Eviction signal capacity, in the unit of nodeshim_pressure_signal_available.
# TYPE nodeshim_pressure_signal_capacity gauge
nodeshim_pressure_signal_capacity{signal="memory.available"} 4.294967296e+09
# HELP nodeshim_pressure_signal_unknown 1 when the eviction signal could not be read (its amounts are then not exported).
# TYPE nodeshim_pressure_signal_unknown gauge
nodeshim_pressure_signal_unknown{signal="memory.available"} 0
nodeshim_pressure_signal_unknown{signal="nodefs.available"} 1
# HELP nodeshim_psi_stall_ratio Share of wall time (0-1) in which some or all tasks stalled on the resource, averaged over window.
# TYPE nodeshim_psi_stall_ratio gauge
nodeshim_psi_stall_ratio{kind="full",resource="memory",window="10s"} 0.01
nodeshim_psi_stall_ratio{kind="full",resource="memory",window="300s"} 0
nodeshim_psi_stall_ratio{kind="full",resource="memory",window="60s"} 0
nodeshim_psi_stall_ratio{kind="some",resource="memory",window="10s"} 0.125
nodeshim_psi_stall_ratio{kind="some",resource="memory",window="300s"} 0.0025
nodeshim_psi_stall_ratio{kind="some",resource="memory",window="60s"} 0.02
# HELP nodeshim_psi_stall_seconds_total Total time some or all tasks stalled on the resource since boot.
# TYPE nodeshim_psi_stall_seconds_total counter
nodeshim_psi_stall_seconds_total{kind="full",resource="memory"} 0.25
nodeshim_psi_stall_seconds_total{kind="some",resource="memory"} 1.5
# HELP nodeshim_seccomp_complaints_total Syscalls that complain-mode seccomp profiles would have denied, per container and syscall, since nodeshim started (a process outside a known container has empty namespace, pod and container).
# TYPE nodeshim_seccomp_complaints_total counter
nodeshim_seccomp_complaints_total{container="",namespace="",pod="",syscall="symlink"} 3
nodeshim_seccomp_complaints_total{container="nginx",namespace="shop",pod="web-0",syscall="chdir"} 2
nodeshim_seccomp_complaints_total{container="nginx",namespace="shop",pod="web-0",syscall="umask"} 1
# HELP nodeshim_status_generation Generation of the node status: the number of visible changes since start.
# TYPE nodeshim_status_generation gauge
nodeshim_status_generation 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndLint(reg); err != nil || len(n) != 0 {
		t.Errorf("lint: %v %v", n, err)
	}
}

func TestCheckpoints(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := NewCheckpoints(reg)
	tests := []struct {
		name          string
		result        string
		total, frozen time.Duration
	}{
		{"success", status.CheckpointSucceeded, 1500 * time.Millisecond, 200 * time.Millisecond},
		{"another success", status.CheckpointSucceeded, 500 * time.Millisecond, 100 * time.Millisecond},
		{"failure", status.CheckpointFailed, 100 * time.Millisecond, 0},
		{"abort", status.CheckpointAborted, 3 * time.Second, 0},
	}
	for _, tt := range tests {
		done := c.Start()
		if got := testutil.ToFloat64(c.inFlight); got != 1 {
			t.Errorf("%s: in flight = %v while running", tt.name, got)
		}
		done(tt.result, tt.total, tt.frozen)
	}
	if got := testutil.ToFloat64(c.inFlight); got != 0 {
		t.Errorf("in flight = %v after all finished", got)
	}
	for result, want := range map[string]float64{status.CheckpointSucceeded: 2, status.CheckpointFailed: 1, status.CheckpointAborted: 1} {
		if got := testutil.ToFloat64(c.total.WithLabelValues(result)); got != want {
			t.Errorf("checkpoints_total{result=%s} = %v, want %v", result, got, want)
		}
	}
	if n := testutil.CollectAndCount(c.frozen); n != 1 {
		t.Errorf("frozen histogram series = %d", n)
	}
	h := &dto.Metric{}
	if err := c.frozen.Write(h); err != nil {
		t.Fatal(err)
	}
	if h.Histogram.GetSampleCount() != 2 || h.Histogram.GetSampleSum() < 0.299 || h.Histogram.GetSampleSum() > 0.301 {
		t.Errorf("frozen histogram: %d samples, sum %v; want the two successes, 0.3 s", h.Histogram.GetSampleCount(), h.Histogram.GetSampleSum())
	}
	if n, err := testutil.GatherAndLint(reg); err != nil || len(n) != 0 {
		t.Errorf("lint: %v %v", n, err)
	}
}
