package faults

import (
	"testing"

	"github.com/seckill-lab/shop/internal/loadgen"
)

// Redeliveries add up across samples; an instance that restarted counts
// from 0 again, and one that did not answer is counted next time.
func TestRedeliveries(t *testing.T) {
	var r redeliveries
	const m = "shop_queue_redelivered_total"
	if n := r.add([]map[string]float64{{m: 2}, {m: 1}}); n != 3 {
		t.Fatalf("first sample: %d, want 3", n)
	}
	if n := r.add([]map[string]float64{{m: 5}, {}}); n != 3 {
		t.Fatalf("second sample: %d, want 3 (instance 2 not answering)", n)
	}
	if n := r.add([]map[string]float64{{m: 1}, {m: 4}}); n != 4 {
		t.Fatalf("third sample: %d, want 4 (instance 1 restarted: 1; instance 2: 3)", n)
	}
	if r.total != 10 {
		t.Fatalf("total %d, want 10", r.total)
	}
}

// A buyer is answered when any of its sends was.
func TestUnansweredBuyers(t *testing.T) {
	recs := []loadgen.Record{{UserID: 1}, {UserID: 1, Status: 202}, {UserID: 2}, {UserID: 3, Status: 409}}
	if n := unansweredBuyers(recs); n != 1 {
		t.Fatalf("unanswered %d, want 1 (buyer 2)", n)
	}
}
