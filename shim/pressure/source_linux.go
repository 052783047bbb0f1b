// Package pressure is the status model's source for node pressure: it runs
// the pressure monitor (package eviction, on package cgroup's readings)
// and records the conditions it emits as they are: kubelet's
// MemoryPressure, DiskPressure and PIDPressure (kubelet's polarity), the
// MemoryContentionFree and IOContentionFree PSI views, PressureMonitorReady
// and the live readings of the status document, with each pod's memory and
// PSI (pods_linux.go).
package pressure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/eviction"
	"github.com/nodeshim/nodeshim/kernel"
	"github.com/nodeshim/nodeshim/runtimes/cri"
	"github.com/nodeshim/nodeshim/shim/status"
)

// Reasons of PressureMonitorReady and of the conditions it stands for.
const (
	ReasonWatching            = "Watching"
	ReasonMonitorFailed       = "MonitorFailed"
	ReasonPressureMonitorDown = "PressureMonitorDown"
)

// Name is the source's name in the status document.
const Name = "pressure"

// Source runs the cgroup pressure monitor. When the monitor cannot start or
// stops, PressureMonitorReady turns False with the cause, the pressure
// conditions turn Unknown, and it is retried with backoff.
type Source struct {
	// ProcRoot is the host's procfs; KubeletRoot kubelet's root dir (the
	// nodefs signals).
	ProcRoot, KubeletRoot string
	// Thresholds are the eviction thresholds (eviction's defaults,
	// kubelet's, when nil); ThresholdsFrom says where they came from, for
	// the status.
	Thresholds     []eviction.Threshold
	ThresholdsFrom string
	// Interval and PollInterval override the monitor's defaults.
	Interval, PollInterval time.Duration
	// Retry is the first wait after a failure (doubling up to 5 minutes);
	// 10 s when zero.
	Retry time.Duration
	// Logger receives the failures; slog.Default() when nil.
	Logger *slog.Logger
	// PodParent is the cgroup under which kubelet's kubepods cgroup lives
	// (kubelet's --cgroup-root), "/" when empty.
	PodParent string
	// PodInterval is the longest a read of the pods' cgroups is served
	// for; DefaultPodInterval when zero. They are read on demand
	// (status.Model.RefreshPods).
	PodInterval time.Duration
	// RuntimeEndpoint, when set, is the CRI socket through which pods are
	// named (namespace, name) by their UID.
	RuntimeEndpoint string
	// HostRoot is where the host's / is seen ("/" when empty): the kernel
	// config under its /boot and /lib/modules gives CONFIG_HZ, which the
	// kernel pass over the pods' cgroups needs.
	HostRoot string
}

// Name returns "pressure".
func (s *Source) Name() string { return Name }

// Run runs the monitor until ctx is done, retrying after failures.
func (s *Source) Run(ctx context.Context, model *status.Model) error {
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	retry := s.Retry
	if retry <= 0 {
		retry = 10 * time.Second
	}
	for {
		err := s.once(ctx, model)
		if ctx.Err() != nil {
			return nil
		}
		log.Error("pressure monitor failed", "err", err, "retryIn", retry)
		model.Set(Down(err)...)
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		retry = min(2*retry, 5*time.Minute)
	}
}

// NotStarted is what the model shows before the source first reports, so
// that Ready is never True before it has spoken.
func NotStarted() condition.Condition {
	return condition.Condition{Type: status.TypePressureMonitor, Status: condition.Unknown, Reason: condition.ReasonNotStarted,
		Message: "the pressure monitor has not started"}
}

// Down is what the model shows while the monitor is not running.
func Down(err error) []condition.Condition {
	out := []condition.Condition{{Type: status.TypePressureMonitor, Status: condition.False, Severity: condition.SeverityWarning,
		Reason: ReasonMonitorFailed, Message: err.Error()}}
	for _, t := range eviction.PressureConditions {
		out = append(out, condition.Condition{Type: t, Status: condition.Unknown, Reason: ReasonPressureMonitorDown,
			Message: "the pressure monitor is not running: " + err.Error()})
	}
	for _, r := range eviction.PSIViewResources {
		out = append(out, condition.Condition{Type: eviction.PSIConditionType(r), Status: condition.Unknown,
			Reason: ReasonPressureMonitorDown, Message: "the pressure monitor is not running: " + err.Error()})
	}
	return out
}

// openPass loads the kernel pass over the pods' cgroups. PSI's averaging
// period follows CONFIG_HZ: from the kernel config where it can be read
// (a DaemonSet sees the host's /boot only if it mounts it), else the pass
// measures it.
func (s *Source) openPass(m cgroup.Mount) (*bpf.CgroupStats, error) {
	opts := bpf.CgroupStatsOptions{LocalEvents: m.LocalEvents}
	if hz, err := s.configHZ(); err == nil {
		opts.HZ = hz
	} else {
		opts.Calibrate = m.Path
	}
	return bpf.OpenCgroupStats(opts)
}

// configHZ reads CONFIG_HZ from the running kernel's config.
func (s *Source) configHZ() (int, error) {
	cfg, err := kernel.RunningConfig(kernel.HostUnder(s.HostRoot, s.ProcRoot))
	if err != nil {
		return 0, err
	}
	return cfg.HZ()
}

func (s *Source) once(ctx context.Context, model *status.Model) error {
	m, err := cgroup.FindMount(s.ProcRoot)
	if err != nil {
		return fmt.Errorf("find the cgroup2 mount: %w", err)
	}
	src := cgroup.NodeSources{ProcRoot: s.ProcRoot, CgroupRoot: m.Path, KubeletRoot: s.KubeletRoot}
	if tree, err := cgroup.DiscoverPods(filepath.Join(m.Path, s.PodParent)); err == nil {
		src.Kubepods = tree.Kubepods
	} else if !errors.Is(err, cgroup.ErrNoKubepods) {
		return fmt.Errorf("find the kubepods cgroup: %w", err)
	}
	roots, err := podRoots(s.ProcRoot, m.Path, s.PodParent)
	if err != nil {
		return err
	}
	pods := &podReader{roots: roots, interval: s.PodInterval, log: s.Logger, reader: cgroup.NewKeepReader(cgroup.KeepOptions{})}
	// The pods' PSI and memory counters come from one kernel pass where
	// the cgroup iterator loads (Linux 6.1+), from their files otherwise.
	// It is loaded at the first read of the pods: a node whose per-pod
	// view no one reads does not hold it.
	pods.openPass = func() (*bpf.CgroupStats, error) { return s.openPass(m) }
	if pods.interval <= 0 {
		pods.interval = DefaultPodInterval
	}
	if s.RuntimeEndpoint != "" {
		r, err := cri.Dial(s.RuntimeEndpoint)
		if err != nil {
			return err
		}
		defer r.Close()
		pods.names = cri.NewPodNamer(r.Client())
	}
	maxFiles := pods.reader.Keeping().MaxFiles
	defer pods.close()
	var mon *eviction.Monitor
	mon, err = eviction.NewMonitor(eviction.MonitorConfig{
		Read: cgroup.MonitorConfig{
			Sources:  src,
			Interval: s.Interval,
			Watch:    cgroup.WatchOptions{PollInterval: s.PollInterval},
			// The node's memory.pressure only: the root cgroup's stall
			// counts every task's, kubepods' included
			// (kernel/sched/psi.c charges a task's stall to each
			// ancestor's group), so a trigger or a poll of kubepods'
			// file never sees a stall the root's does not. Where
			// triggers are refused each file is polled, and each poll
			// is a wake-up of the daemon: one file, half the wake-ups.
			WatchPaths: []string{filepath.Join(m.Path, cgroup.Memory.PressureFile())},
		},
		Thresholds: s.Thresholds,
		OnEvaluate: func(snap eviction.Snapshot) {
			p := FromSnapshot(snap, mon.Watchers())
			p.Pods = pods.cached()
			model.SetPressure(p)
		},
	})
	if err != nil {
		return fmt.Errorf("start the pressure monitor: %w", err)
	}
	defer mon.Close()
	// The pods' cgroups (a thousand on a full node) are read when the
	// per-pod view is asked for, at most every PodInterval, not at every
	// evaluation: no one may be reading it.
	model.SetPodsRefresh(func(rctx context.Context) { model.SetPods(pods.read(rctx, time.Now())) })
	defer model.SetPodsRefresh(nil)
	var watching []string
	for _, w := range mon.Watchers() {
		d := fmt.Sprintf("%s by %s", w.Path, w.Mode)
		if w.Trigger != "" {
			d += " " + strconv.Quote(w.Trigger)
		}
		if w.FallbackReason != "" {
			d += " (" + w.FallbackReason + ")"
		}
		watching = append(watching, d)
	}
	// Which way the pods' cgroups are read: the kernel pass, or kept-open
	// files re-read with pread(2), up to a bound on descriptors, beyond
	// which each file is opened per read. The first read of the pods
	// settles the first, and says so again.
	ready := func(how string) {
		msg := fmt.Sprintf("cgroup2 at %s; %s; pod cgroups read when the per-pod view is asked for, at most every %s: %s (up to %d descriptors)",
			m.Path, strings.Join(watching, "; "), pods.interval, how, maxFiles)
		if s.ThresholdsFrom != "" {
			msg += fmt.Sprintf("; eviction thresholds %s from %s", thresholdString(s.Thresholds), s.ThresholdsFrom)
		}
		model.Set(condition.Condition{Type: status.TypePressureMonitor, Status: condition.True, Reason: ReasonWatching, Message: msg})
	}
	pods.setHow(ready)
	err = mon.Run(ctx, func(e eviction.Event) {
		switch e.Kind {
		case eviction.EventCondition:
			model.Set(e.Condition.Condition)
		case eviction.EventPSIView:
			model.Set(e.PSIView.Condition)
		}
	})
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("the pressure monitor stopped")
	}
	return err
}

func thresholdString(ths []eviction.Threshold) string {
	parts := make([]string, 0, len(ths))
	for _, t := range ths {
		parts = append(parts, t.String())
	}
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, ",")
}
