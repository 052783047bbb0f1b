// Package metrics exports nodeshim's status model and configuration
// lifecycle as Prometheus metrics, read at scrape time so that the metrics
// never disagree with GET /status.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodeshim/nodeshim/shim/condition"
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
	for _, d := range []*prometheus.Desc{descCondition, descTransition, descGeneration, descConfig, descConfigError} {
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
