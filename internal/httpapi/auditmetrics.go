package httpapi

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-lab/shop/internal/audit"
)

// auditMetrics publish the last shop-wide audit (GET /api/v1/admin/audit
// without product_id), so that Prometheus can alert on an invariant the
// audit found broken (deploy/prometheus/rules.yml, ShopInvariantViolated).
// A single product's audit says nothing of the others and is not published.
type auditMetrics struct {
	violations *prometheus.GaugeVec
	last       prometheus.Gauge
}

func newAuditMetrics(reg prometheus.Registerer) *auditMetrics {
	m := &auditMetrics{
		violations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "shop", Subsystem: "audit", Name: "violations",
			Help: "Violations the last shop-wide audit on this instance found, by invariant (the lab section excluded).",
		}, []string{"invariant"}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "shop", Subsystem: "audit", Name: "last_run_timestamp_seconds",
			Help: "When this instance last ran a shop-wide audit (Unix time).",
		}),
	}
	reg.MustRegister(m.violations, m.last)
	return m
}

func (m *auditMetrics) observe(r audit.Report, at time.Time) {
	m.violations.Reset()
	for _, v := range r.Violations {
		m.violations.WithLabelValues(v.Invariant).Inc()
	}
	m.last.Set(float64(at.Unix()))
}
