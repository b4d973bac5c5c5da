package payment

import "github.com/prometheus/client_golang/prometheus"

// Metrics of the wallet book. A nil *Metrics records nothing. Account lock
// holds, waits and watchdog renewals are in the lockx metrics (shop_lock_*).
type Metrics struct {
	payments   *prometheus.CounterVec
	dbReplays  prometheus.Counter
	credits    *prometheus.CounterVec
	creditRepl prometheus.Counter
	busyTotal  prometheus.Counter
	labSlowed  prometheus.Counter
}

// NewMetrics creates the collectors and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shop", Subsystem: "payments", Name: name, Help: help})
	}
	m := &Metrics{
		payments: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shop", Subsystem: "payments", Name: "total",
			Help: "Pay requests by outcome: paid, replayed, already_paid, insufficient_funds, invalid_state, not_found, key_reused, busy, error."}, []string{"outcome"}),
		dbReplays: c("db_replays_total", "Pay retries answered from the payments table (the transactional idempotency record), not from Redis."),
		credits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shop", Subsystem: "wallet", Name: "credits_total",
			Help: "Wallet credits by outcome: credited, replayed, key_reused, busy, error."}, []string{"outcome"}),
		creditRepl: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shop", Subsystem: "wallet", Name: "credit_db_replays_total",
			Help: "Credit retries answered from the wallet ledger's unique (reason, ref), not from Redis."}),
		busyTotal: c("account_busy_total", "Wallet requests answered busy: the account lock was not obtained in time."),
		labSlowed: c("lab_slow_total", "LAB: payments slowed inside their locked section (--lab-slow-payment)."),
	}
	reg.MustRegister(m.payments, m.dbReplays, m.credits, m.creditRepl, m.busyTotal, m.labSlowed)
	return m
}

func (m *Metrics) payment(outcome string) {
	if m != nil {
		m.payments.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) dbReplay() {
	if m != nil {
		m.dbReplays.Inc()
	}
}

func (m *Metrics) credit(outcome string) {
	if m != nil {
		m.credits.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) creditReplay() {
	if m != nil {
		m.creditRepl.Inc()
	}
}

func (m *Metrics) busy() {
	if m != nil {
		m.busyTotal.Inc()
	}
}

func (m *Metrics) labSlow() {
	if m != nil {
		m.labSlowed.Inc()
	}
}
