package idem

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what the store and the form tokens decide. It is a
// prometheus.Collector and registers nothing globally: the host adds it to
// its own registry. A nil *Metrics counts nothing, so every option that
// takes one may be left empty.
type Metrics struct {
	namespace string
	c         [numCounters]atomic.Uint64
}

type counter int

const (
	cClaims counter = iota
	cReplays
	cInUse
	cMismatches
	cStored
	cLost
	cTokensConsumed
	cTokensRejected
	numCounters
)

// counterInfo names each counter; the order follows the constants above.
var counterInfo = [numCounters]struct{ name, help string }{
	cClaims:         {"idempotency_claims_total", "Idempotency keys claimed: the request ran."},
	cReplays:        {"idempotency_replays_total", "Stored results replayed for a retried key."},
	cInUse:          {"idempotency_in_use_total", "Requests refused because their key was still in flight (409)."},
	cMismatches:     {"idempotency_mismatches_total", "Keys reused with a different request (422)."},
	cStored:         {"idempotency_stored_total", "Results stored for replay."},
	cLost:           {"idempotency_claims_lost_total", "Claims whose lease ran out before Complete or Release (lease too short?)."},
	cTokensConsumed: {"form_tokens_consumed_total", "One-time form tokens consumed."},
	cTokensRejected: {"form_tokens_rejected_total", "Form tokens rejected: consumed, expired, unknown or foreign."},
}

// NewMetrics returns counters named namespace_idempotency_..._total and
// namespace_form_tokens_..._total.
func NewMetrics(namespace string) *Metrics {
	return &Metrics{namespace: namespace}
}

func (m *Metrics) inc(c counter) {
	if m != nil {
		m.c[c].Add(1)
	}
}

func (m *Metrics) value(c counter) uint64 {
	if m == nil {
		return 0
	}
	return m.c[c].Load()
}

// desc builds counter i's descriptor; cheap enough to do on every scrape.
func (m *Metrics) desc(i int) *prometheus.Desc {
	ci := counterInfo[i]
	return prometheus.NewDesc(prometheus.BuildFQName(m.namespace, "", ci.name), ci.help, nil, nil)
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for i := range counterInfo {
		ch <- m.desc(i)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for i := range counterInfo {
		ch <- prometheus.MustNewConstMetric(m.desc(i), prometheus.CounterValue, float64(m.value(counter(i))))
	}
}
