// Package metrics exports nodeshim's status model and configuration
// lifecycle as Prometheus metrics, read at scrape time so that the metrics
// never disagree with GET /status.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeshim/nodeshim/condition"
	"github.com/nodeshim/nodeshim/shim/config"
	"github.com/nodeshim/nodeshim/shim/status"
)

var (
	descCondition = prometheus.NewDesc("nodeshim_condition",
		"Node condition by type and status: 1 for the current status, 0 for the two others (as kube_node_status_condition).",
		[]string{"type", "status"}, nil)
	descTransition = prometheus.NewDesc("nodeshim_condition_last_transition_timestamp_seconds",
		"When the condition last changed status, in seconds since the epoch.", []string{"type"}, nil)
	descGeneration = prometheus.NewDesc("nodeshim_status_generation",
		"Generation of the node status: the number of visible changes since start.", nil, nil)
	descConfig = prometheus.NewDesc("nodeshim_config_source_info",
		"Configuration payloads by role (assigned, active, last_known_good); uid \"\" is the local defaults.",
		[]string{"role", "uid"}, nil)
	descConfigError = prometheus.NewDesc("nodeshim_config_error",
		"1 while the configuration lifecycle reports an error (a rollback or a source error).", nil, nil)
	descSignalAvailable = prometheus.NewDesc("nodeshim_pressure_signal_available",
		"Eviction signal (kubelet's names) available amount: bytes, inodes or process ids.", []string{"signal"}, nil)
	descSignalCapacity = prometheus.NewDesc("nodeshim_pressure_signal_capacity",
		"Eviction signal capacity, in the unit of nodeshim_pressure_signal_available.", []string{"signal"}, nil)
	descSignalUnknown = prometheus.NewDesc("nodeshim_pressure_signal_unknown",
		"1 when the eviction signal could not be read (its amounts are then not exported).", []string{"signal"}, nil)
	descPSIAvg = prometheus.NewDesc("nodeshim_psi_stall_ratio",
		"Share of wall time (0-1) in which some or all tasks stalled on the resource, averaged over window.",
		[]string{"resource", "kind", "window"}, nil)
	descPSITotal = prometheus.NewDesc("nodeshim_psi_stall_seconds_total",
		"Total time some or all tasks stalled on the resource since boot.", []string{"resource", "kind"}, nil)
	descOOMKills = prometheus.NewDesc("nodeshim_oom_kills_total",
		"OOM kills seen by the eBPF OOM watcher since nodeshim started.", nil, nil)
	descComplaints = prometheus.NewDesc("nodeshim_seccomp_complaints_total",
		"Syscalls that complain-mode seccomp profiles would have denied, per container and syscall, since nodeshim started (a process outside a known container has empty namespace, pod and container).",
		[]string{"namespace", "pod", "container", "syscall"}, nil)
	descOOMWatching = prometheus.NewDesc("nodeshim_oom_watcher_attached",
		"1 while the eBPF OOM watcher is attached; with 0, nodeshim_oom_kills_total counts nothing.", nil, nil)
)

// Collector reads the model and the configuration status at each scrape.
type Collector struct {
	model  *status.Model
	config func() config.NodeConfigStatus
}

// NewCollector returns a collector for model and, when not nil, the
// configuration status function (the config controller's Status).
func NewCollector(model *status.Model, configStatus func() config.NodeConfigStatus) *Collector {
	return &Collector{model: model, config: configStatus}
}

// Describe sends the descriptors of every metric the collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCondition, descTransition, descGeneration, descConfig, descConfigError,
		descSignalAvailable, descSignalCapacity, descSignalUnknown, descPSIAvg, descPSITotal, descOOMKills, descOOMWatching, descComplaints} {
		ch <- d
	}
}

// Collect reads the current state.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	d := c.model.Snapshot()
	ch <- prometheus.MustNewConstMetric(descGeneration, prometheus.GaugeValue, float64(d.Generation))
	for _, cond := range d.Conditions {
		for _, s := range []string{string(condition.True), string(condition.False), string(condition.Unknown)} {
			v := 0.0
			if string(cond.Status) == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(descCondition, prometheus.GaugeValue, v, cond.Type, s)
		}
		if !cond.LastTransitionTime.IsZero() {
			ch <- prometheus.MustNewConstMetric(descTransition, prometheus.GaugeValue,
				float64(cond.LastTransitionTime.Unix()), cond.Type)
		}
	}
	collectPressure(ch, d.Pressure)
	ch <- prometheus.MustNewConstMetric(descOOMKills, prometheus.CounterValue, float64(d.OOMKills.Total))
	ch <- prometheus.MustNewConstMetric(descOOMWatching, prometheus.GaugeValue, b2f(d.OOMKills.Watching))
	if sc := d.SeccompComplaints; sc != nil {
		// Rows of unresolved processes share empty labels: summed.
		sum := map[[4]string]uint64{}
		for _, r := range sc.Containers {
			for _, c := range r.Syscalls {
				sum[[4]string{r.Namespace, r.Pod, r.Container, c.Name}] += c.Count
			}
		}
		for k, n := range sum {
			ch <- prometheus.MustNewConstMetric(descComplaints, prometheus.CounterValue, float64(n), k[:]...)
		}
	}
	if c.config == nil {
		return
	}
	s := c.config()
	for _, r := range []struct {
		role string
		ref  *config.SourceRef
	}{{"assigned", s.Assigned}, {"active", s.Active}, {"last_known_good", s.LastKnownGood}} {
		uid := ""
		if r.ref != nil {
			uid = r.ref.UID
		}
		ch <- prometheus.MustNewConstMetric(descConfig, prometheus.GaugeValue, 1, r.role, uid)
	}
	e := 0.0
	if s.Error != "" {
		e = 1
	}
	ch <- prometheus.MustNewConstMetric(descConfigError, prometheus.GaugeValue, e)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectPressure exports the pressure monitor's last reading; nothing
// before the first one, so that a missing reading is not a zero.
func collectPressure(ch chan<- prometheus.Metric, p *status.Pressure) {
	if p == nil {
		return
	}
	for _, s := range p.Signals {
		ch <- prometheus.MustNewConstMetric(descSignalUnknown, prometheus.GaugeValue, b2f(s.Unknown != ""), s.Name)
		if s.Unknown != "" {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descSignalAvailable, prometheus.GaugeValue, float64(s.Available), s.Name)
		ch <- prometheus.MustNewConstMetric(descSignalCapacity, prometheus.GaugeValue, float64(s.Capacity), s.Name)
	}
	for _, r := range p.PSI {
		if r.Unknown != "" {
			continue
		}
		lines := []struct {
			kind string
			l    status.PSILine
		}{{"some", r.Some}}
		if r.Full != nil {
			lines = append(lines, struct {
				kind string
				l    status.PSILine
			}{"full", *r.Full})
		}
		for _, l := range lines {
			for _, w := range []struct {
				window string
				v      float64
			}{{"10s", l.l.Avg10}, {"60s", l.l.Avg60}, {"300s", l.l.Avg300}} {
				ch <- prometheus.MustNewConstMetric(descPSIAvg, prometheus.GaugeValue, w.v/100, r.Resource, l.kind, w.window)
			}
			ch <- prometheus.MustNewConstMetric(descPSITotal, prometheus.CounterValue, float64(l.l.TotalMicroseconds)/1e6, r.Resource, l.kind)
		}
	}
}
