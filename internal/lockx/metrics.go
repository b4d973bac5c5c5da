package lockx

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Metrics is a prometheus.Collector for everything lockx does. Register it
// yourself (lockx never touches the global registry) and pass it in Options;
// a nil *Metrics records nothing.
type Metrics struct {
	acquire         *prometheus.HistogramVec
	wait            prometheus.Histogram
	retries         prometheus.Counter
	hold            prometheus.Histogram
	holdRatio       prometheus.Histogram
	held            prometheus.Gauge
	renewals        prometheus.Counter
	renewalFailures prometheus.Counter
	lost            prometheus.Counter
}

const (
	resultObtained    = "obtained"
	resultNotObtained = "not_obtained"
	resultError       = "error"
)

// NewMetrics builds the collectors under namespace, subsystem "lock":
//
//	<ns>_lock_acquire_duration_seconds{result}  acquire latency (obtained|not_obtained|error)
//	<ns>_lock_wait_duration_seconds             time spent waiting, for acquires that waited
//	<ns>_lock_acquire_retries_total             attempts after the first
//	<ns>_lock_hold_duration_seconds             first acquire to final release or loss
//	<ns>_lock_hold_ttl_ratio                    hold time / TTL: alert when it nears 1 without a watchdog
//	<ns>_lock_held                              holds currently open in this process
//	<ns>_lock_renewals_total                    watchdog renewals
//	<ns>_lock_renewal_failures_total            renewals that failed (transport or lock gone)
//	<ns>_lock_lost_total                        holds lost before release
func NewMetrics(namespace string) *Metrics {
	const sub = "lock"
	lat := []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	return &Metrics{
		acquire: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: sub, Name: "acquire_duration_seconds",
			Help: "Time from Acquire call to return, by result.", Buckets: lat,
		}, []string{"result"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: sub, Name: "wait_duration_seconds",
			Help: "Time Acquire spent waiting for a held lock.", Buckets: lat,
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: sub, Name: "acquire_retries_total",
			Help: "Acquire attempts after the first one.",
		}),
		hold: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: sub, Name: "hold_duration_seconds",
			Help: "Time from first acquire to final release or loss.", Buckets: lat,
		}),
		holdRatio: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: sub, Name: "hold_ttl_ratio",
			Help:    "Hold time divided by TTL; values near 1 mean the TTL is too short.",
			Buckets: []float64{.1, .25, .5, .75, .9, 1, 1.5, 3, 10},
		}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: sub, Name: "held",
			Help: "Holds currently open in this process.",
		}),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: sub, Name: "renewals_total",
			Help: "Successful watchdog renewals.",
		}),
		renewalFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: sub, Name: "renewal_failures_total",
			Help: "Watchdog renewals that failed (transport error or lock gone).",
		}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: sub, Name: "lost_total",
			Help: "Holds lost before release (expired, taken over, or validity passed).",
		}),
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.acquire, m.wait, m.retries, m.hold, m.holdRatio, m.held, m.renewals, m.renewalFailures, m.lost}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// The recorders take start times rather than durations so that a nil
// *Metrics costs no clock read: time.Now is not free on every VM.

func (m *Metrics) acquired(result string, start time.Time) {
	if m != nil {
		m.acquire.WithLabelValues(result).Observe(time.Since(start).Seconds())
	}
}

// waited records a wait that ended; its exemplar is ctx's trace, when
// that one is sampled, so a slow lock-wait bucket links to a wait in a
// trace.
func (m *Metrics) waited(ctx context.Context, start time.Time, retries int) {
	if m == nil {
		return
	}
	d := time.Since(start).Seconds()
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		m.wait.(prometheus.ExemplarObserver).ObserveWithExemplar(d, prometheus.Labels{"trace_id": sc.TraceID().String()})
	} else {
		m.wait.Observe(d)
	}
	m.retries.Add(float64(retries))
}

func (m *Metrics) heldInc() {
	if m != nil {
		m.held.Inc()
	}
}

func (m *Metrics) holdEnded(start time.Time, ttl time.Duration) {
	if m != nil {
		d := time.Since(start)
		m.held.Dec()
		m.hold.Observe(d.Seconds())
		m.holdRatio.Observe(float64(d) / float64(ttl))
	}
}

func (m *Metrics) renewed() {
	if m != nil {
		m.renewals.Inc()
	}
}

func (m *Metrics) renewalFailed() {
	if m != nil {
		m.renewalFailures.Inc()
	}
}

func (m *Metrics) lostLock() {
	if m != nil {
		m.lost.Inc()
	}
}
