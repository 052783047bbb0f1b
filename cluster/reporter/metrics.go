package reporter

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the reporter's own Prometheus metrics.
type Metrics struct {
	publishDuration prometheus.Histogram
	failures        *prometheus.CounterVec
	writes          *prometheus.CounterVec
	leaseRenewals   prometheus.Counter
	eventsDropped   prometheus.Counter
	shimUp          prometheus.Gauge
	lastPublish     prometheus.Gauge
	shimReads       *prometheus.CounterVec
}

// Write kinds, the label of nodeshim_reporter_api_writes_total and
// nodeshim_reporter_failures_total.
const (
	kindStatus = "status"
	kindLease  = "lease"
	kindEvent  = "event"
	kindNode   = "node" // reading the Node before the first patch
	kindShim   = "shim"
	kindLabels = "labels" // the Node's capability labels
)

// Read modes, the label of nodeshim_reporter_shim_reads_total.
const (
	readPoll     = "poll"
	readLongPoll = "long_poll"
)

// NewMetrics returns the reporter's metrics, registered with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		publishDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nodeshim_reporter_publish_duration_seconds",
			Help:    "Time taken by a successful patch of the Node's status.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeshim_reporter_failures_total",
			Help: "Failed attempts, by kind: status (Node status patch), lease, event, labels (capability labels patch), node (reading the Node), shim (reading the shim).",
		}, []string{"kind"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeshim_reporter_api_writes_total",
			Help: "Successful writes to the API server, by kind: status, lease, event, labels.",
		}, []string{"kind"}),
		leaseRenewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeshim_reporter_lease_renewals_total",
			Help: "Successful renewals (or creations) of the node's heartbeat Lease.",
		}),
		eventsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodeshim_reporter_events_dropped_total",
			Help: "Condition transition Events not sent because of the rate limit or a full queue.",
		}),
		shimUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeshim_reporter_shim_up",
			Help: "1 when the last read of the shim's status succeeded, 0 otherwise.",
		}),
		lastPublish: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeshim_reporter_last_publish_timestamp_seconds",
			Help: "Time of the last successful patch of the Node's status.",
		}),
		shimReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeshim_reporter_shim_reads_total",
			Help: "Reads of the shim's status, by mode: poll (answered at once) or long_poll (answered at a change).",
		}, []string{"mode"}),
	}
	for _, k := range []string{readPoll, readLongPoll} {
		m.shimReads.WithLabelValues(k)
	}
	for _, k := range []string{kindStatus, kindLease, kindEvent, kindNode, kindShim, kindLabels} {
		m.failures.WithLabelValues(k)
	}
	for _, k := range []string{kindStatus, kindLease, kindEvent, kindLabels} {
		m.writes.WithLabelValues(k)
	}
	if reg != nil {
		reg.MustRegister(m.publishDuration, m.failures, m.writes, m.leaseRenewals, m.eventsDropped, m.shimUp, m.lastPublish, m.shimReads)
	}
	return m
}
