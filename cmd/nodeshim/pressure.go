package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeshim/nodeshim/cgroup"
	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/eviction"
	"github.com/nodeshim/nodeshim/shim/status"
)

// pressureView is what `nodeshim pressure` prints: camelCase keys, as
// every other command's JSON and YAML.
type pressureView struct {
	Mount      mountView                `json:"mount"`
	Kubepods   string                   `json:"kubepods,omitempty"`
	Watchers   []status.PressureWatcher `json:"watchers"`
	Signals    map[string]signalView    `json:"signals"`
	Conditions []condition.Condition    `json:"conditions"`
	PSIViews   []psiView                `json:"psiViews"`
	Pressure   map[string]string        `json:"pressure"`
}

// mountView is the cgroup2 mount in pressureView.
type mountView struct {
	Path          string   `json:"path"`
	Mode          string   `json:"mode"`
	V1Controllers []string `json:"v1Controllers,omitempty"`
	LocalEvents   bool     `json:"localEvents"`
}

type signalView struct {
	Available uint64 `json:"available,omitempty"`
	Capacity  uint64 `json:"capacity,omitempty"`
	Unknown   string `json:"unknown,omitempty"`
	Source    string `json:"source,omitempty"`
}

type psiView struct {
	Type     string `json:"type"`
	Status   string `json:"status"`
	Severity string `json:"severity,omitempty"`
	Message  string `json:"message"`
}

// eventView is one JSON line of `nodeshim pressure --watch`: an
// eviction.Event with camelCase keys. Exactly one of Condition, PSIView and
// Pressure is set, as Kind says.
type eventView struct {
	Kind      string               `json:"kind"`
	Time      time.Time            `json:"time"`
	Condition *conditionChangeView `json:"condition,omitempty"`
	PSIView   *conditionChangeView `json:"psiView,omitempty"`
	Pressure  *pressureEventView   `json:"pressure,omitempty"`
}

// conditionChangeView is a pressure condition's or a PSI view's
// transition.
type conditionChangeView struct {
	Condition condition.Condition `json:"condition"`
	// From and FromSeverity are the previous status and severity; From
	// is empty for the first evaluation.
	From         string `json:"from,omitempty"`
	FromSeverity string `json:"fromSeverity,omitempty"`
}

// pressureEventView is a PSI trigger (or its polling fallback) firing.
type pressureEventView struct {
	Path string    `json:"path"`
	Mode string    `json:"mode"`
	Time time.Time `json:"time"`
	// StallSeconds is the stall within the window (poll mode only).
	StallSeconds float64 `json:"stallSeconds,omitempty"`
}

// pressureFlags are the flags of `nodeshim pressure`.
type pressureFlags struct {
	output, procRoot, kubeletRoot, imageFs, evictionHard string
	transition, interval, pollInterval                   time.Duration
	watch, forcePoll, pods                               bool
	cgroupParent, runtimeEndpoint                        string
}

func (f *pressureFlags) bind(cmd *cobra.Command) {
	addOutputFlag(cmd, &f.output)
	fl := cmd.Flags()
	fl.StringVar(&f.procRoot, "proc-root", "/proc", "where procfs is mounted")
	fl.StringVar(&f.kubeletRoot, "kubelet-root-dir", "/var/lib/kubelet", "kubelet's --root-dir (nodefs); missing makes nodefs signals unknown")
	// The spelling before the flag had seccomp effective's name.
	addDeprecatedAlias(fl, "kubelet-root", "", "kubelet-root-dir")
	fl.StringVar(&f.imageFs, "imagefs-root", "", "the container runtime's image store when on its own filesystem (default: nodefs)")
	fl.StringVar(&f.evictionHard, "eviction-hard", eviction.DefaultHardThresholds, "thresholds in kubelet's --eviction-hard syntax")
	fl.DurationVar(&f.transition, "transition-period", eviction.DefaultTransitionPeriod, "how long a pressure condition stays set after its signals recover")
	fl.DurationVar(&f.interval, "interval", cgroup.DefaultInterval, "re-evaluation interval without pressure events (--watch)")
	fl.DurationVar(&f.pollInterval, "poll-interval", cgroup.DefaultPollInterval, "read interval of the PSI fallback when triggers are refused")
	fl.BoolVar(&f.watch, "watch", false, "stream transitions as JSON lines until interrupted")
	fl.BoolVar(&f.forcePoll, "force-poll", false, "poll PSI totals even where triggers work")
	fl.BoolVar(&f.pods, "pods", false, "show each pod's memory and PSI, most pressured first")
	fl.StringVar(&f.cgroupParent, "cgroup-parent", "/", "the cgroup under which kubelet's kubepods cgroup lives (kubelet's --cgroup-root) (--pods)")
	fl.StringVar(&f.runtimeEndpoint, "runtime-endpoint", "", "CRI socket through which pods are named (--pods); by UID when empty")
}

const pressureLong = `Show MemoryPressure, DiskPressure and PIDPressure as kubelet computes them
(eviction signals against --eviction-hard thresholds), the positive-polarity
PSI views (MemoryContentionFree, IOContentionFree) and CPU pressure as a metric.

With --watch, arm PSI triggers on the node's and kubepods' memory.pressure
(or poll their totals when the kernel refuses triggers) and print every
transition as a JSON line until interrupted.

With --pods, show each pod's memory and PSI instead, most pressured first:
the pods under the kubepods cgroup (cgroupfs or systemd naming) below
--cgroup-parent. Where the pods' memory cgroups are in a cgroup v1 hierarchy
(a hybrid node), the MEM-FROM column says "cgroup v1"; PSI comes from each
pod's cgroup v2 directory and shows as "-" where it has none. With
--runtime-endpoint, pods are named by namespace/name through CRI instead of
by UID.`

const pressureExample = `  # One evaluation, as a table
  nodeshim pressure

  # Kubelet-style thresholds, as JSON
  nodeshim pressure --eviction-hard 'memory.available<500Mi,pid.available<5%' -o json

  # Stream transitions, clearing conditions after 1 minute without pressure
  nodeshim pressure --watch --transition-period 1m

  # Which pod? Pods by pressure, named through containerd
  nodeshim pressure --pods --runtime-endpoint unix:///run/containerd/containerd.sock`

func newPressureCommand() *cobra.Command {
	var f pressureFlags
	cmd := &cobra.Command{
		Use:     "pressure",
		Short:   "Show the node's pressure conditions from cgroup v2 stats and PSI",
		Long:    pressureLong,
		Example: pressureExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPressure(cmd, &f)
		},
	}
	f.bind(cmd)
	return cmd
}

func runPressure(cmd *cobra.Command, f *pressureFlags) error {
	if f.pods {
		v, err := readPods(cmd.Context(), f.procRoot, f.cgroupParent, f.runtimeEndpoint)
		if err != nil {
			return err
		}
		return writeOutput(cmd.OutOrStdout(), f.output, v, func() string { return podTable(v) })
	}
	ths, err := eviction.ParseThresholds(f.evictionHard)
	if err != nil {
		return withExitCode(exitUsage, err)
	}
	m, src, err := cgroup.FindNodeSources(f.procRoot)
	if err != nil {
		return err
	}
	src.KubeletRoot, src.ImageFsRoot = f.kubeletRoot, f.imageFs
	mon, err := eviction.NewMonitor(eviction.MonitorConfig{
		Read: cgroup.MonitorConfig{
			Sources: src, Interval: f.interval,
			Watch: cgroup.WatchOptions{PollInterval: f.pollInterval, ForcePoll: f.forcePoll},
		},
		Thresholds: ths, TransitionPeriod: f.transition,
	})
	if err != nil {
		return err
	}
	defer mon.Close()
	for _, w := range mon.Watchers() {
		if w.Mode == cgroup.ModeTrigger {
			slog.Info("watching pressure", "path", w.Path, "mode", w.Mode, "trigger", w.Trigger)
		} else {
			slog.Info("watching pressure", "path", w.Path, "mode", w.Mode, "fallbackReason", w.FallbackReason)
		}
	}
	if f.watch {
		enc := json.NewEncoder(cmd.OutOrStdout())
		err := mon.Run(cmd.Context(), func(e eviction.Event) { _ = enc.Encode(newEventView(e)) })
		if cmd.Context().Err() != nil {
			return nil
		}
		return err
	}
	snap, _ := mon.Evaluate()
	v := newPressureView(m, src.Kubepods, mon.Watchers(), snap)
	return writeOutput(cmd.OutOrStdout(), f.output, v, v.table)
}

// newPressureView is what `nodeshim pressure` prints of one evaluation.
func newPressureView(m cgroup.Mount, kubepods string, watchers []cgroup.WatcherStatus, snap eviction.Snapshot) pressureView {
	v := pressureView{
		Mount:    mountView{Path: m.Path, Mode: string(m.Mode), V1Controllers: m.V1Controllers, LocalEvents: m.LocalEvents},
		Kubepods: kubepods, Signals: map[string]signalView{}, Conditions: snap.Conditions, Pressure: map[string]string{},
	}
	for _, w := range watchers {
		v.Watchers = append(v.Watchers, status.PressureWatcher{Path: w.Path, Mode: string(w.Mode), Trigger: w.Trigger, FallbackReason: w.FallbackReason})
	}
	for s, o := range snap.Observations {
		sv := signalView{Available: o.Available, Capacity: o.Capacity, Source: o.Source}
		if o.Err != nil {
			sv = signalView{Unknown: o.Err.Error()}
		}
		v.Signals[string(s)] = sv
	}
	for _, p := range snap.PSIViews {
		v.PSIViews = append(v.PSIViews, psiView{p.Type, string(p.Status), string(p.Severity), p.Message})
	}
	for i, r := range cgroup.Resources {
		if p := snap.Pressure[i]; p.Err != nil {
			v.Pressure[string(r)] = "unknown: " + p.Err.Error()
		} else {
			v.Pressure[string(r)] = strings.ReplaceAll(strings.TrimSpace(p.PSI.String()), "\n", "; ")
		}
	}
	return v
}

// table is the human form of v.
func (v pressureView) table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "cgroup2\t%s (%s)\n", v.Mount.Path, v.Mount.Mode)
	for _, w := range v.Watchers {
		fmt.Fprintf(tw, "watch\t%s\t%s\t%s%s\n", w.Path, w.Mode, w.Trigger, w.FallbackReason)
	}
	fmt.Fprintln(tw, "\nCONDITION\tSTATUS\tREASON\tMESSAGE")
	for _, c := range v.Conditions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, p := range v.PSIViews {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Type, p.Status, p.Severity, p.Message)
	}
	fmt.Fprintln(tw, "\nRESOURCE\tPRESSURE")
	for _, r := range cgroup.Resources {
		fmt.Fprintf(tw, "%s\t%s\n", r, v.Pressure[string(r)])
	}
	tw.Flush()
	return b.String()
}

// newEventView is the JSON line of e.
func newEventView(e eviction.Event) eventView {
	v := eventView{Kind: string(e.Kind), Time: e.Time}
	if c := e.Condition; c != nil {
		v.Condition = &conditionChangeView{Condition: c.Condition, From: string(c.From), FromSeverity: string(c.FromSeverity)}
	}
	if p := e.PSIView; p != nil {
		v.PSIView = &conditionChangeView{Condition: p.Condition, From: string(p.From), FromSeverity: string(p.FromSeverity)}
	}
	if p := e.Pressure; p != nil {
		v.Pressure = &pressureEventView{Path: p.Path, Mode: string(p.Mode), Time: p.Time, StallSeconds: p.Stall.Seconds()}
	}
	return v
}
