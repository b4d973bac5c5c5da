package order

import "github.com/prometheus/client_golang/prometheus"

// Metrics of the orders. A nil *Metrics records nothing.
type Metrics struct {
	createdTotal   *prometheus.CounterVec
	replayedTotal  *prometheus.CounterVec
	cancelledTotal *prometheus.CounterVec
	fastPathTotal  prometheus.Counter
	batchSize      prometheus.Histogram
	inDoubtTotal   *prometheus.CounterVec
}

// NewMetrics creates the collectors and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		createdTotal:   prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shop", Subsystem: "orders", Name: "created_total", Help: "Orders created, by kind."}, []string{"kind"}),
		replayedTotal:  prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shop", Subsystem: "orders", Name: "replayed_total", Help: "Repeated order requests answered with the existing order, by kind."}, []string{"kind"}),
		cancelledTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shop", Subsystem: "orders", Name: "cancelled_total", Help: "Orders cancelled, by reason (user, timeout: the sweeper)."}, []string{"reason"}),
	}
	m.inDoubtTotal = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shop", Subsystem: "orders", Name: "commits_in_doubt_total",
		Help: "Order batch COMMITs whose connection was lost before the answer, by what the database then showed (landed, rolled_back, unresolved)."}, []string{"outcome"})
	m.fastPathTotal = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shop", Subsystem: "orders", Name: "sold_out_fast_path_total", Help: "Orders refused from this instance's sold-out book (no Redis, no lock, no stock row)."})
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "shop", Subsystem: "orders", Name: "batch_size",
		Help:    "Order requests of one product placed under one lock hold and one transaction.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}})
	reg.MustRegister(m.createdTotal, m.replayedTotal, m.cancelledTotal, m.fastPathTotal, m.batchSize, m.inDoubtTotal)
	return m
}

func (m *Metrics) created(kind string) {
	if m != nil {
		m.createdTotal.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) replayed(kind string) {
	if m != nil {
		m.replayedTotal.WithLabelValues(kind).Inc()
	}
}

func (m *Metrics) cancelled(reason string, n int) {
	if m != nil && n > 0 {
		m.cancelledTotal.WithLabelValues(reason).Add(float64(n))
	}
}

func (m *Metrics) fastPath() {
	if m != nil {
		m.fastPathTotal.Inc()
	}
}

func (m *Metrics) batched(n int) {
	if m != nil {
		m.batchSize.Observe(float64(n))
	}
}

func (m *Metrics) inDoubt(outcome string) {
	if m != nil {
		m.inDoubtTotal.WithLabelValues(outcome).Inc()
	}
}
