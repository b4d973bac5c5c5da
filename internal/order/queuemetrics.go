package order

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// QueueMetrics are the queued mode's. A nil *QueueMetrics records nothing.
type QueueMetrics struct {
	acceptedTotal    *prometheus.CounterVec
	consumedTotal    *prometheus.CounterVec
	redeliveredTotal prometheus.Counter
	lagSeconds       prometheus.Histogram
}

// NewQueueMetrics creates the collectors and registers them with reg.
func NewQueueMetrics(reg prometheus.Registerer) *QueueMetrics {
	m := &QueueMetrics{
		acceptedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shop", Subsystem: "queue", Name: "published_total",
			Help: "Queued seckill orders published, by result (confirmed: answered 202; unconfirmed: 503, unit given back)."}, []string{"result"}),
		consumedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shop", Subsystem: "queue", Name: "consumed_total",
			Help: "Queued order messages handled, by outcome (placed, replayed: found placed, rejected, retried: delivered again, malformed)."}, []string{"outcome"}),
		redeliveredTotal: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shop", Subsystem: "queue", Name: "redelivered_total",
			Help: "Queued order messages the broker delivered again (a consumer died or lost its link before acknowledging, or asked again)."}),
		lagSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "shop", Subsystem: "queue", Name: "lag_seconds",
			Help:    "From an order's 202 to its COMMIT by a consumer.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
	}
	reg.MustRegister(m.acceptedTotal, m.consumedTotal, m.redeliveredTotal, m.lagSeconds)
	return m
}

func (m *QueueMetrics) accepted(result string) {
	if m != nil {
		m.acceptedTotal.WithLabelValues(result).Inc()
	}
}

func (m *QueueMetrics) consumed(outcome string) {
	if m != nil {
		m.consumedTotal.WithLabelValues(outcome).Inc()
	}
}

func (m *QueueMetrics) redelivered() {
	if m != nil {
		m.redeliveredTotal.Inc()
	}
}

func (m *QueueMetrics) lag(d time.Duration) {
	if m != nil {
		m.lagSeconds.Observe(d.Seconds())
	}
}
