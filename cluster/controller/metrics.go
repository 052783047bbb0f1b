package controller

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the controller's Prometheus metrics.
type Metrics struct {
	marked        prometheus.Counter
	silent        prometheus.Gauge
	leader        prometheus.Gauge
	failures      prometheus.Counter
	eventsDropped prometheus.Counter
}

// NewMetrics returns the controller's metrics, registered with reg when it
// is not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		marked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeshim_controller_nodes_marked_unknown_total",
			Help: "Times a node's NodeShim conditions were set to Unknown (reason ReporterStopped) because its reporter's Lease went stale.",
		}),
		silent: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeshim_controller_silent_nodes",
			Help: "Nodes with NodeShim conditions whose reporter's Lease is older than the grace period, as the leader last saw them (0 on a replica that does not lead).",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeshim_controller_leader",
			Help: "1 while this replica is the elected leader, 0 otherwise.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeshim_controller_patch_failures_total",
			Help: "Failed patches of a Node's status (retried with backoff).",
		}),
		eventsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeshim_controller_events_dropped_total",
			Help: "ReporterStopped Events not sent because of the rate limit or an API error.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.marked, m.silent, m.leader, m.failures, m.eventsDropped)
	}
	return m
}
