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
	"github.com/nodeshim/nodeshim/eviction"
)

// pressureView is what `nodeshim pressure` prints.
type pressureView struct {
	Mount      cgroup.Mount           `json:"mount"`
	Kubepods   string                 `json:"kubepods,omitempty"`
	Watchers   []cgroup.WatcherStatus `json:"watchers"`
	Signals    map[string]signalView  `json:"signals"`
	Conditions any                    `json:"conditions"`
	PSIViews   []psiView              `json:"psiViews"`
	Pressure   map[string]string      `json:"pressure"`
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

func newPressureCommand() *cobra.Command {
	var (
		output, procRoot, kubeletRoot, imageFs, evictionHard string
		transition, interval, pollInterval                   time.Duration
		watch, forcePoll, pods                               bool
		cgroupParent, runtimeEndpoint                        string
	)
	cmd := &cobra.Command{
		Use:   "pressure",
		Short: "Show the node's pressure conditions from cgroup v2 stats and PSI",
		Long: `Show MemoryPressure, DiskPressure and PIDPressure as kubelet computes them
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
by UID.`,
		Example: `  # One evaluation, as a table
  nodeshim pressure

  # Kubelet-style thresholds, as JSON
  nodeshim pressure --eviction-hard 'memory.available<500Mi,pid.available<5%' -o json

  # Stream transitions, clearing conditions after 1 minute without pressure
  nodeshim pressure --watch --transition-period 1m

  # Which pod? Pods by pressure, named through containerd
  nodeshim pressure --pods --runtime-endpoint unix:///run/containerd/containerd.sock`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pods {
				v, err := readPods(cmd.Context(), procRoot, cgroupParent, runtimeEndpoint)
				if err != nil {
					return err
				}
				return writeOutput(cmd.OutOrStdout(), output, v, func() string { return podTable(v) })
			}
			ths, err := eviction.ParseThresholds(evictionHard)
			if err != nil {
				return withExitCode(exitUsage, err)
			}
			m, src, err := cgroup.FindNodeSources(procRoot)
			if err != nil {
				return err
			}
			src.KubeletRoot, src.ImageFsRoot = kubeletRoot, imageFs
			mon, err := eviction.NewMonitor(eviction.MonitorConfig{
				Read: cgroup.MonitorConfig{
					Sources: src, Interval: interval,
					Watch: cgroup.WatchOptions{PollInterval: pollInterval, ForcePoll: forcePoll},
				},
				Thresholds: ths, TransitionPeriod: transition,
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
			if watch {
				enc := json.NewEncoder(cmd.OutOrStdout())
				err := mon.Run(cmd.Context(), func(e eviction.Event) { _ = enc.Encode(e) })
				if cmd.Context().Err() != nil {
					return nil
				}
				return err
			}
			snap, _ := mon.Evaluate()
			v := pressureView{Mount: m, Kubepods: src.Kubepods, Watchers: mon.Watchers(), Signals: map[string]signalView{},
				Conditions: snap.Conditions, Pressure: map[string]string{}}
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
			return writeOutput(cmd.OutOrStdout(), output, v, func() string {
				var b strings.Builder
				tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
				fmt.Fprintf(tw, "cgroup2\t%s (%s)\n", m.Path, m.Mode)
				for _, w := range v.Watchers {
					fmt.Fprintf(tw, "watch\t%s\t%s\t%s%s\n", w.Path, w.Mode, w.Trigger, w.FallbackReason)
				}
				fmt.Fprintln(tw, "\nCONDITION\tSTATUS\tREASON\tMESSAGE")
				for _, c := range snap.Conditions {
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
			})
		},
	}
	addOutputFlag(cmd, &output)
	f := cmd.Flags()
	f.StringVar(&procRoot, "proc-root", "/proc", "where procfs is mounted")
	f.StringVar(&kubeletRoot, "kubelet-root", "/var/lib/kubelet", "kubelet's root directory (nodefs); missing makes nodefs signals unknown")
	f.StringVar(&imageFs, "imagefs-root", "", "the container runtime's image store when on its own filesystem (default: nodefs)")
	f.StringVar(&evictionHard, "eviction-hard", eviction.DefaultHardThresholds, "thresholds in kubelet's --eviction-hard syntax")
	f.DurationVar(&transition, "transition-period", eviction.DefaultTransitionPeriod, "how long a pressure condition stays set after its signals recover")
	f.DurationVar(&interval, "interval", cgroup.DefaultInterval, "re-evaluation interval without pressure events (--watch)")
	f.DurationVar(&pollInterval, "poll-interval", cgroup.DefaultPollInterval, "read interval of the PSI fallback when triggers are refused")
	f.BoolVar(&watch, "watch", false, "stream transitions as JSON lines until interrupted")
	f.BoolVar(&forcePoll, "force-poll", false, "poll PSI totals even where triggers work")
	f.BoolVar(&pods, "pods", false, "show each pod's memory and PSI, most pressured first")
	f.StringVar(&cgroupParent, "cgroup-parent", "/", "the cgroup under which kubelet's kubepods cgroup lives (kubelet's --cgroup-root) (--pods)")
	f.StringVar(&runtimeEndpoint, "runtime-endpoint", "", "CRI socket through which pods are named (--pods); by UID when empty")
	return cmd
}
