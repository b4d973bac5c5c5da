package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/loadtest/internal/report"
)

// TestDescribeFailover: recovery is the first created order of the hot
// product after the last failure the fault explains; a deliberate early
// give-up, another product's failure and a failure after the next fault
// do not count.
func TestDescribeFailover(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	rec := func(product int64, status int, start, end int) loadgen.Record {
		return loadgen.Record{ProductID: product, Status: status, Start: at(start), End: at(end)}
	}
	gaveUp := func(r loadgen.Record) loadgen.Record { r.GaveUp = true; return r }
	res := loadgen.Result{Records: []loadgen.Record{
		rec(1, 201, -50, 20),          // a batch holding the lock before the fault
		rec(1, 503, 100, 1500),        // unavailable: explained by the fault
		gaveUp(rec(1, 0, 1600, 1650)), // given up after 50 ms on purpose
		rec(2, 503, 200, 3500),        // answered, but later than lock wait + 1 s
		rec(2, 0, 300, 5300),          // left without an answer
		rec(2, 503, 2000, 2600),       // another product
		rec(1, 201, 1400, 1700),       // ends after the last failure: orders flow
		rec(1, 201, 1900, 2000),
		rec(1, 0, 5000, 7000), // after the next fault
	}}
	f := report.FailoverRow{Start: t0, PromotedAt: at(1000), Bound: 6 * time.Second,
		Before: map[string]float64{"shop_inventory_stale_fence_rejections_total": 2}}
	describeFailover(&f, res, 1, map[string]float64{"shop_inventory_stale_fence_rejections_total": 5}, at(4000), 3*time.Second)
	if f.Recovery != 1700*time.Millisecond {
		t.Errorf("recovery %v, want 1.7s", f.Recovery)
	}
	if f.StaleFences != 3 {
		t.Errorf("stale fences %v, want 3", f.StaleFences)
	}
	if f.Slow != 1 || f.NoAnswer != 1 {
		t.Errorf("slow %d, no answer %d; want 1 and 1 (a deliberate give-up is neither)", f.Slow, f.NoAnswer)
	}
	if f.ByStatus["503"] != 2 || f.ByStatus["201"] != 2 || f.ByStatus["no answer"] != 1 || f.ByStatus["gave up (tiny timeout)"] != 1 {
		t.Errorf("answers in the window %v", f.ByStatus)
	}
	var b strings.Builder
	report.WriteFailover(&b, []report.FailoverRow{f})
	if !strings.Contains(b.String(), "1700ms") {
		t.Errorf("table lacks the recovery:\n%s", b.String())
	}
	if h := report.FailoverHTML([]report.FailoverRow{f}); !strings.Contains(h, "<td class=ok>1700ms</td>") {
		t.Errorf("report.html row lacks the recovery within its bound:\n%s", h)
	}
}
