package idem

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricsCollector(t *testing.T) {
	t.Parallel()
	m := NewMetrics("shop")
	m.inc(cReplays)
	m.inc(cReplays)
	m.inc(cTokensRejected)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
	}
	if len(got) != int(numCounters) {
		t.Errorf("%d metrics, want %d: %v", len(got), numCounters, got)
	}
	for name, want := range map[string]float64{
		"shop_idempotency_replays_total":  2,
		"shop_form_tokens_rejected_total": 1,
		"shop_idempotency_claims_total":   0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
}
