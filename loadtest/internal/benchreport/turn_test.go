package benchreport

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// turnMetrics is one instance's turn metrics as loadgen.MetricsBy returns
// them, from class -> {turns, orders, seconds, db, redis}.
func turnMetrics(classes map[string][5]float64) map[string]map[string]float64 {
	m := map[string]map[string]float64{}
	set := func(name, class string, v float64) {
		if m[name] == nil {
			m[name] = map[string]float64{}
		}
		m[name][class] = v
	}
	for class, c := range classes {
		set(TurnSecondsMetric+"_count", class, c[0])
		set(TurnOrdersMetric, class, c[1])
		set(TurnSecondsMetric+"_sum", class, c[2])
		set(TurnDBMetric, class, c[3])
		set(TurnRedisMetric, class, c[4])
		set(TurnSecondsMetric+"_bucket", class, 99) // (not read)
	}
	return m
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// The turn over a window: the growth of two instances' counters between
// two snapshots; the means per turn; and the line through the size
// classes' points weighted by their turns. The points (1, 1 ms) ×1 turn,
// (2, 3 ms) ×1 and (3, 2 ms) ×2 give 1.1818 ms + 0.3636 ms an order
// (unweighted it would be 1 ms + 0.5 ms).
func TestTurnBetween(t *testing.T) {
	before := TurnSnap{}
	before.AddInstance(turnMetrics(map[string][5]float64{"1": {10, 10, 0.5, 30, 20}}))
	before.AddInstance(turnMetrics(map[string][5]float64{"2-3": {5, 12, 0.2, 15, 10}}))
	after := TurnSnap{}
	after.AddInstance(turnMetrics(map[string][5]float64{"1": {11, 11, 0.501, 33, 22}, "2-3": {1, 2, 0.003, 3, 2}}))
	after.AddInstance(turnMetrics(map[string][5]float64{"2-3": {5, 12, 0.2, 15, 10}, "4-7": {2, 6, 0.004, 6, 4}}))
	got := TurnBetween(before, after)
	if got == nil {
		t.Fatal("no turn")
	}
	// 4 turns: 9 orders, 8 ms, 12 DB and 8 Redis round trips.
	if !near(got.HoldMs, 2) || !near(got.Batch, 2.25) || !near(got.DBRoundTrips, 3) || !near(got.RedisRoundTrips, 2) || got.Classes != 3 {
		t.Errorf("means: %+v; want 2 ms, batch 2.25, 3 DB, 2 Redis, 3 classes", got)
	}
	if !near(got.PerOrderMs, 1/2.75) || !near(got.FixedMs, 2-2.25/2.75) {
		t.Errorf("fit: %.4f ms + %.4f ms an order; want 1.1818 + 0.3636", got.FixedMs, got.PerOrderMs)
	}

	// Points on a line give that line.
	line := TurnSnap{}
	line.AddInstance(turnMetrics(map[string][5]float64{"1": {100, 100, 0.25, 0, 0}, "4-7": {50, 250, 0.225, 0, 0}, "32-63": {10, 400, 0.22, 0, 0}}))
	if l := TurnBetween(TurnSnap{}, line); !near(l.FixedMs, 2) || !near(l.PerOrderMs, 0.5) {
		t.Errorf("points on 2 ms + 0.5 ms an order: fit %.4f + %.4f", l.FixedMs, l.PerOrderMs)
	}

	// Halves of a window add up to the whole.
	mid := TurnSnap{}
	mid.AddInstance(turnMetrics(map[string][5]float64{"1": {10.5, 10.5, 0.5005, 31, 21}}))
	mid.AddInstance(turnMetrics(map[string][5]float64{"2-3": {5, 12, 0.2, 15, 10}, "4-7": {1, 3, 0.002, 3, 2}}))
	if h := TurnBetween(before, mid).plus(TurnBetween(mid, after)); !near(h.HoldMs, got.HoldMs) || !near(h.FixedMs, got.FixedMs) || !near(h.PerOrderMs, got.PerOrderMs) {
		t.Errorf("halves: %+v; want %+v", h, got)
	}
}

// One size class in the window: the means, and no line invented through
// one point; no turn at all (a shop without the metrics): no turn.
func TestTurnWithoutAFit(t *testing.T) {
	before, after := TurnSnap{}, TurnSnap{}
	before.AddInstance(turnMetrics(map[string][5]float64{"64+": {10, 700, 0.1, 30, 20}, "32-63": {4, 160, 0.03, 12, 8}}))
	after.AddInstance(turnMetrics(map[string][5]float64{"64+": {20, 1400, 0.2, 60, 40}, "32-63": {4, 160, 0.03, 12, 8}}))
	got := TurnBetween(before, after)
	if got == nil || !near(got.HoldMs, 10) || !near(got.Batch, 70) || got.Classes != 1 || got.FixedMs != 0 || got.PerOrderMs != 0 {
		t.Fatalf("one class: %+v; want 10 ms, batch 70, no fit", got)
	}
	b, err := json.Marshal(Orders{Turn: got})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"turn":{"hold_ms":10,"batch":70,`)) || bytes.Contains(b, []byte("fixed_ms")) || bytes.Contains(b, []byte("per_order_ms")) {
		t.Errorf("json: %s", b)
	}
	var text strings.Builder
	writeTurn(&text, Orders{Turn: got})
	if !strings.Contains(text.String(), "10.00 ms under the lock, batch 70.0") || !strings.Contains(text.String(), "no fit") {
		t.Errorf("text: %q", text.String())
	}
	if got := TurnBetween(TurnSnap{}, TurnSnap{}); got != nil {
		t.Errorf("no metrics: %+v, want no turn", got)
	}
	if b, _ := json.Marshal(Orders{}); bytes.Contains(b, []byte("turn")) || bytes.Contains(b, []byte("min_instance")) || bytes.Contains(b, []byte("restock")) {
		t.Errorf("a phase without the metrics: %s", b)
	}
}

// The slowest second of any instance, 0 included; none measured: none.
func TestMinInstanceOrders(t *testing.T) {
	series := []Sample{{InstanceOrders: []float64{300, 250, 280}}, {}, {InstanceOrders: []float64{310, 0, 290}}}
	if m := MinInstanceOrders(series); m == nil || *m != 0 {
		t.Errorf("min %v, want 0", m)
	}
	if m := MinInstanceOrders(series[:1]); m == nil || *m != 250 {
		t.Errorf("min %v, want 250", m)
	}
	if m := MinInstanceOrders([]Sample{{Orders: 5}}); m != nil {
		t.Errorf("min %v, want none", *m)
	}
}
