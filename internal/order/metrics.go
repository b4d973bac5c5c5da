package order

import "github.com/prometheus/client_golang/prometheus"

// Metrics of the order book. A nil *Metrics records nothing.
type Metrics struct {
	createdTotal   *prometheus.CounterVec
	replayedTotal  *prometheus.CounterVec
	cancelledTotal *prometheus.CounterVec
}

// NewMetrics creates the collectors and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		createdTotal:   prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shop", Subsystem: "orders", Name: "created_total", Help: "Orders created, by kind."}, []string{"kind"}),
		replayedTotal:  prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shop", Subsystem: "orders", Name: "replayed_total", Help: "Repeated order requests answered with the existing order, by kind."}, []string{"kind"}),
		cancelledTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shop", Subsystem: "orders", Name: "cancelled_total", Help: "Orders cancelled, by reason (user, timeout: the sweeper)."}, []string{"reason"}),
	}
	reg.MustRegister(m.createdTotal, m.replayedTotal, m.cancelledTotal)
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

func (m *Metrics) cancelled(reason string) {
	if m != nil {
		m.cancelledTotal.WithLabelValues(reason).Inc()
	}
}
