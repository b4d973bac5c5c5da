package order

import (
	"math/bits"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the orders. A nil *Metrics records nothing.
type Metrics struct {
	createdTotal   *prometheus.CounterVec
	replayedTotal  *prometheus.CounterVec
	cancelledTotal *prometheus.CounterVec
	fastPathTotal  prometheus.Counter
	batchSize      prometheus.Histogram
	inDoubtTotal   *prometheus.CounterVec
	packets        *prometheus.CounterVec
	turn           turnMetrics
}

// turnMetrics are a batch's turns under its product's lock, by batch size
// class (sizeClass): how long each took and the round trips it made, so a
// benchmark can read the turn as a + b·n (docs chapter 9).
type turnMetrics struct {
	seconds    *prometheus.HistogramVec
	orders     *prometheus.CounterVec
	dbTrips    *prometheus.CounterVec
	redisTrips *prometheus.CounterVec
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
	m.packets = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shop", Subsystem: "orders", Name: "packets_total",
		Help: "Order batches sent as one packet (one round trip), by outcome: committed, guard_missed (nothing written: too little stock for all, or a stale fence), rolled_back (in doubt, and not there), refused (a duplicate order number, a deadlock: nothing written). All but committed then run as a transaction with reads."}, []string{"outcome"})
	size := []string{"size"}
	m.turn = turnMetrics{
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "shop", Subsystem: "order", Name: "turn_seconds",
			Help:    "A batch's turn under its product's lock: from the hold taken (or kept from the batch before) to its transaction decided and the hold released or kept, by batch size class.",
			Buckets: []float64{.0005, .001, .002, .003, .005, .0075, .01, .02, .05, .1, .5}}, size),
		orders:     prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shop", Subsystem: "order", Name: "turn_orders_total", Help: "Order requests in the turns of shop_order_turn_seconds, by batch size class."}, size),
		dbTrips:    prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shop", Subsystem: "order", Name: "turn_db_round_trips_total", Help: "Database round trips the turns made (statements, BEGIN and COMMIT, packets), by batch size class."}, size),
		redisTrips: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "shop", Subsystem: "order", Name: "turn_redis_round_trips_total", Help: "Redis round trips the turns' holds made (acquire, release, a kept hold's check beside its transaction), by batch size class."}, size),
	}
	reg.MustRegister(m.createdTotal, m.replayedTotal, m.cancelledTotal, m.fastPathTotal, m.batchSize, m.inDoubtTotal, m.packets,
		m.turn.seconds, m.turn.orders, m.turn.dbTrips, m.turn.redisTrips)
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

func (m *Metrics) packet(outcome string) {
	if m != nil {
		m.packets.WithLabelValues(outcome).Inc()
	}
}

// turned records one turn of a batch of n requests.
func (m *Metrics) turned(n int, took time.Duration, dbTrips int64, redisTrips int) {
	if m == nil {
		return
	}
	c := sizeClass(n)
	m.turn.seconds.WithLabelValues(c).Observe(took.Seconds())
	m.turn.orders.WithLabelValues(c).Add(float64(n))
	m.turn.dbTrips.WithLabelValues(c).Add(float64(dbTrips))
	m.turn.redisTrips.WithLabelValues(c).Add(float64(redisTrips))
}

// sizeClass is the batch size class of n: 1, 2-3, 4-7, ... 32-63, 64+.
func sizeClass(n int) string {
	switch {
	case n <= 1:
		return "1"
	case n >= 64:
		return "64+"
	}
	lo := 1 << (bits.Len(uint(n)) - 1)
	return strconv.Itoa(lo) + "-" + strconv.Itoa(2*lo-1)
}
