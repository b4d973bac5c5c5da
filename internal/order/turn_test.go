package order

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/testenv/stocktest"
)

// turnFixture is one leader's product on an instance that counts its turns.
type turnFixture struct {
	f      *stocktest.Fixture
	s      *Service
	m      *Metrics
	invReg *prometheus.Registry
	id     int64
}

func newTurnFixture(t *testing.T, stock int64) *turnFixture {
	t.Helper()
	f := stocktest.New(t)
	inv, invReg := f.Inventory(t, inventory.Config{Strategy: inventory.LockFence, SoldOutRecheck: time.Minute})
	m := NewMetrics(prometheus.NewRegistry())
	s := New(f.DB, inv, f.Markers(), Config{BatchMax: 64, UnpaidLimit: 100, Packets: f.Packets(t)}, m, stocktest.Discard())
	t.Cleanup(s.Wait)
	return &turnFixture{f: f, s: s, m: m, invReg: invReg, id: f.Product(t, inv, 100, stock)}
}

func (tf *turnFixture) buyers(from, n int64) []*request {
	batch := make([]*request, n)
	for i := range batch {
		batch[i] = seckillReq(from+int64(i), tf.id)
	}
	return batch
}

func (tf *turnFixture) kept(t *testing.T) (kept, handedOver float64) {
	t.Helper()
	mfs, err := tf.invReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "shop_inventory_holds_kept_total":
			kept = mf.GetMetric()[0].GetCounter().GetValue()
		case "shop_inventory_holds_handed_over_total":
			handedOver = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return kept, handedOver
}

// A leader's second batch runs under the hold its first kept, and goes to
// the database as one packet, the unpaid cap a condition of its guard: one
// database round trip and one Redis check beside it, where a batch that
// takes and releases its own hold and runs statement by statement makes
// seven and two.
func TestTurnKeepsTheHoldAndWritesOnePacket(t *testing.T) {
	t.Parallel()
	tf := newTurnFixture(t, 100)
	l := tf.s.leadBatches(tf.id)
	first, second := tf.buyers(1, 1), tf.buyers(100, 10)
	l.run(first) // the price is not known yet: the read path
	l.run(second)
	l.idle()
	for _, r := range append(answers(first), answers(second)...) {
		if r.err != nil || !r.created {
			t.Fatalf("an order was not created: %+v", r)
		}
	}
	if got := testutil.ToFloat64(tf.m.packets.WithLabelValues("committed")); got != 1 {
		t.Errorf("%v packets committed, want 1 (the second batch)", got)
	}
	if got := testutil.ToFloat64(tf.m.turn.dbTrips.WithLabelValues("8-15")); got != 1 {
		t.Errorf("the second batch made %v database round trips, want 1 (the packet)", got)
	}
	if got := testutil.ToFloat64(tf.m.turn.redisTrips.WithLabelValues("8-15")); got != 1 {
		t.Errorf("the second batch made %v Redis round trips, want 1 (the check beside its packet)", got)
	}
	if kept, _ := tf.kept(t); kept != 1 {
		t.Errorf("%v batches ran under a kept hold, want 1", kept)
	}
	if n := tf.f.Count(t, "SELECT stock FROM products WHERE id = ?", tf.id); n != 89 {
		t.Errorf("stock %d, want 89", n)
	}
	if n := tf.f.Count(t, "SELECT COUNT(*) FROM stock_ledger WHERE product_id = ? AND reason = 'order'", tf.id); n != 11 {
		t.Errorf("%d ledger rows, want 11", n)
	}
	if n := tf.f.Count(t, "SELECT COUNT(*) FROM orders WHERE product_id = ? AND amount_cents = 100", tf.id); n != 11 {
		t.Errorf("%d orders of 100 cents, want 11", n)
	}
}

// A packet whose guard misses (more buyers than units) writes nothing, and
// the batch is decided want by want by the read path; a repeat of an order
// a packet committed is answered from it (the duplicate rolls the packet
// back).
func TestTurnPacketFallsBackAndRepeatsReplay(t *testing.T) {
	t.Parallel()
	tf := newTurnFixture(t, 5)
	l := tf.s.leadBatches(tf.id)
	defer l.idle()
	l.run(tf.buyers(1, 1))
	second := tf.buyers(2, 2)
	l.run(second)
	third := append(tf.buyers(10, 4), seckillReq(2, tf.id)) // 4 new buyers for 2 units, and buyer 2 again
	l.run(third)
	res := answers(third)
	for i, want := range []bool{true, true, false, false} {
		if created := res[i].err == nil && res[i].created; created != want {
			t.Errorf("buyer %d: %+v, created want %v", i, res[i], want)
		}
	}
	if r := res[4]; r.err != nil || r.created || r.o.OrderNo != SeckillNo(2, tf.id) {
		t.Errorf("the repeat of buyer 2: %+v, want its order replayed", r)
	}
	if got := testutil.ToFloat64(tf.m.packets.WithLabelValues("committed")); got != 1 {
		t.Errorf("%v packets committed, want 1", got)
	}
	if got := testutil.ToFloat64(tf.m.packets.WithLabelValues("refused")) + testutil.ToFloat64(tf.m.packets.WithLabelValues("guard_missed")); got != 1 {
		t.Errorf("%v packets wrote nothing, want 1", got)
	}
	if n := tf.f.Count(t, "SELECT stock FROM products WHERE id = ?", tf.id); n != 0 {
		t.Errorf("stock %d, want 0", n)
	}
	if n := tf.f.Count(t, "SELECT COUNT(*) FROM orders WHERE product_id = ?", tf.id); n != 5 {
		t.Errorf("%d orders, want 5", n)
	}
}

// A restock from another instance that finds the lock kept marks it
// wanted, and the leader hands it over after its next batch instead of
// keeping it for the batch after.
func TestTurnHandsTheKeptHoldToAWaiter(t *testing.T) {
	t.Parallel()
	tf := newTurnFixture(t, 100)
	other, _ := tf.f.Inventory(t, inventory.Config{Strategy: inventory.LockFence})
	l := tf.s.leadBatches(tf.id)
	defer l.idle()
	l.run(tf.buyers(1, 1))
	l.run(tf.buyers(2, 1)) // kept after this one
	restocked := make(chan error, 1)
	go func() {
		_, _, err := other.Restock(context.Background(), tf.id, 10, "r1", "h1")
		restocked <- err
	}()
	key := tf.f.Prefix + "lock:{product:" + strconv.FormatInt(tf.id, 10) + "}"
	for deadline := time.Now().Add(10 * time.Second); !tf.f.RDB.HExists(context.Background(), key, "#wanted").Val(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the restock never asked for the lock")
		}
	}
	l.run(tf.buyers(3, 1)) // sees the mark: hands the hold over
	select {
	case err := <-restocked:
		if err != nil {
			t.Fatalf("restock: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the restock did not get the lock after the leader's batch")
	}
	if _, handed := tf.kept(t); handed != 1 {
		t.Errorf("%v holds handed over, want 1", handed)
	}
	if n := tf.f.Count(t, "SELECT stock FROM products WHERE id = ?", tf.id); n != 107 {
		t.Errorf("stock %d, want 107", n)
	}
}

// The unpaid cap in the packet's guard: a buyer who fits commits in the
// packet; one who would pass the cap makes the guard miss, and the read
// path refuses that buyer alone, exactly.
func TestTurnPacketKeepsTheUnpaidCap(t *testing.T) {
	t.Parallel()
	tf := newTurnFixture(t, 1000) // the cap is 100 units
	l := tf.s.leadBatches(tf.id)
	defer l.idle()
	l.run([]*request{regularReq(7, tf.id, 99, "a")})
	fits := []*request{seckillReq(7, tf.id), seckillReq(8, tf.id)} // buyer 7 at 100
	l.run(fits)
	over := []*request{regularReq(7, tf.id, 1, "b"), seckillReq(9, tf.id)} // buyer 7 at 101
	l.run(over)
	for i, r := range append(answers(fits), answers(over)...) {
		if want := i != 2; (r.err == nil && r.created) != want || (!want && !errors.Is(r.err, ErrUnpaidLimit)) {
			t.Errorf("request %d: %+v, created want %v (else ErrUnpaidLimit)", i, r, want)
		}
	}
	if got := testutil.ToFloat64(tf.m.packets.WithLabelValues("committed")); got != 1 {
		t.Errorf("%v packets committed, want 1 (buyer 7 at the cap)", got)
	}
	if got := testutil.ToFloat64(tf.m.packets.WithLabelValues("guard_missed")); got != 1 {
		t.Errorf("%v packets missed their guard, want 1 (buyer 7 over it)", got)
	}
	if n := tf.f.Count(t, "SELECT SUM(quantity) FROM orders WHERE user_id = 7"); n != 100 {
		t.Errorf("buyer 7 holds %d units, want 100 (the cap)", n)
	}
}
