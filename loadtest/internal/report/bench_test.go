package report

import (
	"strings"
	"testing"
	"time"
)

// Two halves of a baseline add up to one phase: counts and seconds add,
// the rate is the whole's, a quantile is the larger half's, and the mean
// batch is weighted by the orders each half committed.
func TestBenchHalvesAddUp(t *testing.T) {
	a := BenchOrders{Committed: 3000, Seconds: 1, BatchMean: 30, Series: []BenchSample{{T: 1, Orders: 3000}},
		Load: BenchRate{Requests: 3000, Seconds: 1, PerSec: 3000, P50: 10 * time.Millisecond, P99: 40 * time.Millisecond, Answers: map[string]int{"201": 3000}}}
	b := BenchOrders{Committed: 1000, Seconds: 1, BatchMean: 10, Series: []BenchSample{{T: 1, Orders: 1000}},
		Load: BenchRate{Requests: 1000, Seconds: 1, PerSec: 1000, P50: 20 * time.Millisecond, P99: 30 * time.Millisecond, Answers: map[string]int{"201": 1000, "503 busy": 2}}}
	got := a.Plus(b)
	if got.Committed != 4000 || got.Seconds != 2 || got.OrdersPerSec != 2000 || got.BatchMean != 20 {
		t.Errorf("orders: %d in %.0fs = %.0f/s, batch %.1f; want 4000 in 2s = 2000/s, batch 20", got.Committed, got.Seconds, got.OrdersPerSec, got.BatchMean)
	}
	if l := got.Load; l.Requests != 4000 || l.PerSec != 2000 || l.P50 != 20*time.Millisecond || l.P99 != 40*time.Millisecond ||
		l.Answers["201"] != 4000 || l.Answers["503 busy"] != 2 || got.Answers["201"] != 4000 {
		t.Errorf("load: %+v", l)
	}
	if len(got.Series) != 2 || got.Series[1].T != 2 || len(a.Series) != 1 || a.Load.Answers["201"] != 3000 {
		t.Errorf("series %+v (the halves must be left as they were: %+v)", got.Series, a)
	}
}

// TestBenchTargetsShowTheSpread: three instances are judged against their
// baseline, and the baseline's halves, one thing measured twice, show how
// far apart the machine puts two measurements.
func TestBenchTargetsShowTheSpread(t *testing.T) {
	br := &Bench{Raw: BenchRaw{TxPerSec: 1000}, Orders: []BenchOrders{
		{Instances: 1, Routing: RouteDirect, Coalescing: true, OrdersPerSec: 3000, OfRaw: 3, OfOne: 1},
		{Instances: 1, Routing: RouteDirect, Coalescing: true, OrdersPerSec: 2700, OfOne: 0.9, Baseline: true, Halves: []float64{3000, 2400}},
		{Instances: 3, Routing: RouteAffine, Coalescing: true, OrdersPerSec: 2430, OfOne: 0.81, OfBaseline: 0.9},
	}}
	var judged, spread *BenchTarget
	targets := BenchTargets(br)
	for i, tg := range targets {
		switch {
		case strings.Contains(tg.What, "3 instances, "+RouteAffine) && tg.Want == ">= 1.0x":
			judged = &targets[i]
		case strings.Contains(tg.What, "halves, the higher ÷ the lower"):
			spread = &targets[i]
		}
	}
	if judged == nil || judged.Met || judged.Got != 0.9 {
		t.Errorf("3 instances against their baseline: %+v, want 0.9x, missed", judged)
	}
	if spread == nil || !spread.Met || spread.Got != 1.25 {
		t.Errorf("the baseline's spread: %+v, want 1.25x, no target", spread)
	}
	var out strings.Builder
	WriteBench(&out, br)
	if !strings.Contains(out.String(), "halves before and after it: 3000 and 2400") {
		t.Errorf("the baseline's row does not give its halves:\n%s", out.String())
	}
}
