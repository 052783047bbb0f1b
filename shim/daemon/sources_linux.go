package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nodeshim/nodeshim/bpf"
	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/kernel/capability"
	"github.com/nodeshim/nodeshim/shim/condition"
	"github.com/nodeshim/nodeshim/shim/status"
)

// Reasons of the sources' own conditions.
const (
	ReasonWatching             = "Watching"
	ReasonMonitorFailed        = "MonitorFailed"
	ReasonPressureMonitorDown  = "PressureMonitorDown"
	ReasonAttached             = "Attached"
	ReasonNotSupportedByKernel = "NotSupportedByKernel"
	ReasonAttachFailed         = "AttachFailed"
	ReasonEventStreamEnded     = "EventStreamEnded"
)

// The OOM watcher's entry in the capability report.
const oomRequirement = "ebpf.oom-watcher"

// pressureOptions configure runPressure.
type pressureOptions struct {
	ProcRoot    string
	KubeletRoot string
	// Interval and PollInterval override the monitor's defaults.
	Interval, PollInterval time.Duration
	// Retry is the first wait after a failure (doubling up to 5 minutes);
	// 10 s when zero.
	Retry  time.Duration
	Logger *slog.Logger
}

// runPressure runs the cgroup pressure monitor until ctx is done. Its
// transitions become MemoryPressure, DiskPressure and PIDPressure (kubelet's
// polarity) and the MemoryContentionFree / IOContentionFree PSI views; its
// readings become the document's Pressure. When the monitor cannot start
// or stops, PressureMonitorReady turns False with the cause, the pressure
// conditions turn Unknown, and it is retried with backoff.
func runPressure(ctx context.Context, model *status.Model, o pressureOptions) {
	retry := o.Retry
	if retry <= 0 {
		retry = 10 * time.Second
	}
	for {
		err := pressureOnce(ctx, model, o)
		if ctx.Err() != nil {
			return
		}
		o.Logger.Error("pressure monitor failed", "err", err, "retryIn", retry)
		model.Set(pressureDown(err)...)
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		retry = min(2*retry, 5*time.Minute)
	}
}

// pressureDown is what the model shows while the monitor is not running.
func pressureDown(err error) []condition.Condition {
	out := []condition.Condition{{Type: status.TypePressureMonitor, Status: condition.False, Severity: condition.SeverityWarning,
		Reason: ReasonMonitorFailed, Message: err.Error()}}
	for _, t := range cgroup.PressureConditions {
		out = append(out, condition.Condition{Type: string(t), Status: condition.Unknown, Reason: ReasonPressureMonitorDown,
			Message: "the pressure monitor is not running: " + err.Error()})
	}
	for _, r := range cgroup.PSIViewResources {
		out = append(out, condition.Condition{Type: string(cgroup.PSIConditionType(r)), Status: condition.Unknown,
			Reason: ReasonPressureMonitorDown, Message: "the pressure monitor is not running: " + err.Error()})
	}
	return out
}

func pressureOnce(ctx context.Context, model *status.Model, o pressureOptions) error {
	m, err := cgroup.FindMount(o.ProcRoot)
	if err != nil {
		return fmt.Errorf("find the cgroup2 mount: %w", err)
	}
	src := cgroup.NodeSources{ProcRoot: o.ProcRoot, CgroupRoot: m.Path, KubeletRoot: o.KubeletRoot}
	if tree, err := cgroup.DiscoverPods(m.Path); err == nil {
		src.Kubepods = tree.Kubepods
	} else if !errors.Is(err, cgroup.ErrNoKubepods) {
		return fmt.Errorf("find the kubepods cgroup: %w", err)
	}
	var mon *cgroup.Monitor
	mon, err = cgroup.NewMonitor(cgroup.MonitorConfig{
		Sources:    src,
		Interval:   o.Interval,
		Watch:      cgroup.WatchOptions{PollInterval: o.PollInterval},
		OnEvaluate: func(s cgroup.Snapshot) { model.SetPressure(status.PressureFrom(s, mon.Watchers())) },
	})
	if err != nil {
		return fmt.Errorf("start the pressure monitor: %w", err)
	}
	defer mon.Close()
	var how []string
	for _, w := range mon.Watchers() {
		d := fmt.Sprintf("%s by %s", w.Path, w.Mode)
		if w.Trigger != "" {
			d += " " + strconv.Quote(w.Trigger)
		}
		if w.FallbackReason != "" {
			d += " (" + w.FallbackReason + ")"
		}
		how = append(how, d)
	}
	model.Set(condition.Condition{Type: status.TypePressureMonitor, Status: condition.True, Reason: ReasonWatching,
		Message: fmt.Sprintf("cgroup2 at %s; %s", m.Path, strings.Join(how, "; "))})
	err = mon.Run(ctx, func(e cgroup.Event) {
		switch e.Kind {
		case cgroup.EventCondition:
			model.Set(status.PressureCondition(e.Condition.Condition))
		case cgroup.EventPSIView:
			model.Set(status.PSIViewCondition(e.PSIView.View))
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

// runOOM attaches the eBPF OOM watcher and records every OOM kill until ctx
// is done, then detaches it. When it cannot attach, OOMWatcherReady says
// why: False (Warning) when the capability report found the kernel unable
// to run it, Unknown otherwise; OOM kills are then not watched, which the
// document says instead of showing an empty, healthy-looking history.
func runOOM(ctx context.Context, model *status.Model, hooks []bpf.OOMHook, log *slog.Logger) error {
	w, err := bpf.WatchOOM(bpf.OOMOptions{Hooks: hooks})
	if err != nil {
		c := oomFailure(model.Report(), err)
		model.SetOOMWatch(false, "", c.Message)
		model.Set(c)
		log.Warn("OOM kills are not watched", "reason", c.Reason, "err", err)
		return nil
	}
	defer w.Close()
	model.SetOOMWatch(true, string(w.Hook()), "")
	model.Set(condition.Condition{Type: status.TypeOOMWatcher, Status: condition.True, Reason: ReasonAttached,
		Message: fmt.Sprintf("attached to %s, events over %s", w.Hook(), w.Transport())})
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events():
			if !ok {
				err := w.Err()
				if err == nil {
					err = errors.New("the OOM event stream ended")
				}
				model.SetOOMWatch(false, string(w.Hook()), err.Error())
				model.Set(condition.Condition{Type: status.TypeOOMWatcher, Status: condition.Unknown, Reason: ReasonEventStreamEnded,
					Message: err.Error()})
				return err
			}
			log.Warn("OOM kill", "pid", ev.PID, "tgid", ev.TGID, "comm", ev.Comm, "cgroupID", ev.CgroupID, "rssBytes", ev.RSSBytes)
			model.AddOOMKill(status.OOMKill{Time: ev.Time, PID: ev.PID, TGID: ev.TGID, Comm: ev.Comm, CgroupID: ev.CgroupID,
				RSSBytes: ev.RSSBytes, TotalVMBytes: ev.TotalVMBytes, OOMScoreAdj: ev.OOMScoreAdj})
		}
	}
}

// oomFailure is OOMWatcherReady when the watcher could not attach.
func oomFailure(rep *capability.Report, err error) condition.Condition {
	if rep != nil {
		if res, ok := rep.Result(oomRequirement); ok && res.Verdict == capability.Unsupported {
			return condition.Condition{Type: status.TypeOOMWatcher, Status: condition.False, Severity: condition.SeverityWarning,
				Reason: ReasonNotSupportedByKernel, Message: fmt.Sprintf("OOM kills are not watched: %s", res.Evidence)}
		}
	}
	return condition.Condition{Type: status.TypeOOMWatcher, Status: condition.Unknown, Reason: ReasonAttachFailed,
		Message: fmt.Sprintf("OOM kills are not watched: %v", err)}
}
