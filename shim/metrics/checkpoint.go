package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Checkpoints counts and times the checkpoints of POST /checkpoint.
type Checkpoints struct {
	total    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	frozen   prometheus.Histogram
	inFlight prometheus.Gauge
	removed  *prometheus.CounterVec
}

// NewCheckpoints registers the checkpoint metrics with reg.
func NewCheckpoints(reg prometheus.Registerer) *Checkpoints {
	c := &Checkpoints{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeshim_checkpoints_total",
			Help: "Checkpoints that reached CRIU, by result (Succeeded, Failed, Aborted).",
		}, []string{"result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "nodeshim_checkpoint_duration_seconds",
			Help:    "Time from accepting a checkpoint request to its answer, by result.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12), // 50 ms to about 100 s
		}, []string{"result"}),
		frozen: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nodeshim_checkpoint_frozen_seconds",
			Help:    "How long CRIU kept the workload frozen during a successful checkpoint (CRIU's frozen_time).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12), // 10 ms to about 20 s
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodeshim_checkpoints_in_flight",
			Help: "Checkpoints running now.",
		}),
	}
	c.removed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodeshim_checkpoint_archives_removed_total",
		Help: "Checkpoint archives removed by retention, by reason (maxAge, maxPerContainer, maxBytes).",
	}, []string{"reason"})
	reg.MustRegister(c.total, c.duration, c.frozen, c.inFlight, c.removed)
	return c
}

// Start marks a checkpoint as running; call the returned function with its
// result, total duration and frozen time (zero unless it succeeded).
func (c *Checkpoints) Start() func(result string, total, frozen time.Duration) {
	c.inFlight.Inc()
	return func(result string, total, frozen time.Duration) {
		c.inFlight.Dec()
		c.total.WithLabelValues(result).Inc()
		c.duration.WithLabelValues(result).Observe(total.Seconds())
		if frozen > 0 {
			c.frozen.Observe(frozen.Seconds())
		}
	}
}

// Removed counts an archive removed by retention for reason.
func (c *Checkpoints) Removed(reason string) {
	c.removed.WithLabelValues(reason).Inc()
}
