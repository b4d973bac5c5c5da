package inventory_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/inventory"
)

// TestQueuedHoldOutlivesTheGateLease: a queued order's unit is held for
// the queue's lease, not the gate's: a reaper that runs after the gate's
// lease ended leaves it held (the message is still in the queue); settled
// sold it stays taken, settled not sold it goes back; settling twice
// changes nothing.
func TestQueuedHoldOutlivesTheGateLease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.service(t, inventory.Config{Strategy: inventory.LockFence, GateLease: testLease, Queued: true})
	id := f.product(t, s, 5)
	ctx := context.Background()
	sold, refused, err := s.AdmitQueued(ctx, id, "queued-sold", time.Hour)
	if err != nil || refused != nil || sold.Gen == "" {
		t.Fatalf("admit: %+v refused %v err %v", sold, refused, err)
	}
	back, _, err := s.AdmitQueued(ctx, id, "queued-back", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(testLease + 50*time.Millisecond) // the gate's lease is over, the queue's is not

	bg, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.RunGateReaper(bg, 20*time.Millisecond) }()
	time.Sleep(100 * time.Millisecond) // several reaper rounds
	stop()
	<-done
	if u, h := level(t, s, id); u != 3 || h != 2 {
		t.Fatalf("after the reaper: gate %d, held %d; want 3, 2 (both queued units still held)", u, h)
	}
	commit(t, s, id, "queued-sold", 1)
	s.SettleQueued(ctx, sold, true)
	s.SettleQueued(ctx, back, false)
	s.SettleQueued(ctx, sold, true)
	s.SettleQueued(ctx, back, false)
	if u, h := level(t, s, id); u != 4 || h != 0 {
		t.Fatalf("after settling: gate %d, held %d; want 4 (one sold, one back), 0", u, h)
	}
	if v := r1(t, f, s, id); len(v) != 0 {
		t.Errorf("R1: %v", v)
	}
	again, _, err := s.AdmitQueued(ctx, id, "queued-sold", time.Hour)
	if err != nil || again.Gen != "" {
		t.Errorf("admitting a sold order number again: %+v %v; want nothing taken", again, err)
	}
}
