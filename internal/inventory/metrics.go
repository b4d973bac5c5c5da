package inventory

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the inventory. A nil *Metrics records nothing.
type Metrics struct {
	deductions *prometheus.HistogramVec
	busyTotal  prometheus.Counter
	stale      prometheus.Counter
	relFailed  prometheus.Counter
	pauses     prometheus.Counter
	moves      prometheus.Counter
	tallies    prometheus.Counter
	kept       prometheus.Counter
	handovers  prometheus.Counter
}

// NewMetrics creates the collectors and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		deductions: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "shop", Subsystem: "inventory", Name: "deduction_seconds",
			Help:    "Guarded stock deductions (one per batch of orders) by strategy and outcome, with their latency including the lock wait.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"strategy", "outcome"}),
		busyTotal: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shop", Subsystem: "inventory", Name: "lock_busy_total", Help: "Product lock not obtained within the acquire timeout (503 busy)."}),
		stale:     prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shop", Subsystem: "inventory", Name: "stale_fence_rejections_total", Help: "Stock writes the database refused because a newer fencing token had written."}),
		relFailed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shop", Subsystem: "inventory", Name: "lock_lost_before_release_total", Help: "Product locks found expired or taken over at release."}),
		pauses:    prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shop", Subsystem: "inventory", Name: "lab_pauses_total", Help: "LAB: lock holders paused on purpose."}),
		moves:     prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shop", Subsystem: "inventory", Name: "bucket_moves_total", Help: "Stock buckets other than this instance's home bucket that batches of a product held in buckets tried: one per bucket a batch moved on to, whether or not it deducted there."}),
		tallies:   prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shop", Subsystem: "inventory", Name: "bucket_tallies_total", Help: "Batches that tried every stock bucket and decided their open wants under every bucket's lock."}),
		kept:      prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shop", Subsystem: "inventory", Name: "holds_kept_total", Help: "Batches that ran under a product hold kept from the batch before (keep.go)."}),
		handovers: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "shop", Subsystem: "inventory", Name: "holds_handed_over_total", Help: "Product holds that could have been kept and were released because another holder asked for the lock."}),
	}
	reg.MustRegister(m.deductions, m.busyTotal, m.stale, m.relFailed, m.pauses, m.moves, m.tallies, m.kept, m.handovers)
	return m
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrSoldOut):
		return "sold_out"
	case errors.Is(err, ErrInsufficientStock):
		return "insufficient"
	case errors.Is(err, ErrBusy):
		return "busy"
	case errors.Is(err, ErrNotFound):
		return "not_found"
	default:
		return "error"
	}
}

func (m *Metrics) deducted(strategy string, err error, d time.Duration) {
	if m != nil {
		m.deductions.WithLabelValues(strategy, outcome(err)).Observe(d.Seconds())
	}
}

func (m *Metrics) busy() {
	if m != nil {
		m.busyTotal.Inc()
	}
}

func (m *Metrics) staleFence() {
	if m != nil {
		m.stale.Inc()
	}
}

func (m *Metrics) releaseFailed() {
	if m != nil {
		m.relFailed.Inc()
	}
}

func (m *Metrics) labPause() {
	if m != nil {
		m.pauses.Inc()
	}
}

func (m *Metrics) bucketMove() {
	if m != nil {
		m.moves.Inc()
	}
}

func (m *Metrics) bucketTally() {
	if m != nil {
		m.tallies.Inc()
	}
}

func (m *Metrics) keptHold() {
	if m != nil {
		m.kept.Inc()
	}
}

func (m *Metrics) handedOver() {
	if m != nil {
		m.handovers.Inc()
	}
}
