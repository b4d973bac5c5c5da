package inventory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/inventory"
)

// TestDeductionClosedMidHold: a caller whose work under a hold ended
// without Done (a panic its batch recovered from) still releases the
// product lock when it closes the deduction: the next batch takes the lock
// at once instead of waiting for a watchdog that would renew it for as
// long as the hold's context lives (for ever, without a deadline).
func TestDeductionClosedMidHold(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.service(t, inventory.Config{Strategy: inventory.LockFence, LockTTL: 30 * time.Second, LockWait: 200 * time.Millisecond})
	id := f.product(t, s, 5)
	ctx := context.Background()

	func() {
		d := s.Deduct(ctx, id, nil)
		defer d.Close()
		defer func() { recover() }()
		if !d.Next() {
			t.Fatalf("first hold: %v", d.Err())
		}
		panic("the batch's work panicked under the hold")
	}()

	d := s.Deduct(ctx, id, nil)
	defer d.Close()
	if !d.Next() {
		t.Fatalf("the next batch did not get the lock within its wait: %v (want the closed deduction's hold released)", d.Err())
	}
	take := d.Take()
	err := takeTx(d.Context(), s, take, inventory.Want{OrderNo: "CLOSED-1", Quantity: 1}, nil)
	d.Done(take.Taken(), err)
	if d.Next() || d.Err() != nil {
		t.Fatalf("after its one hold: next %v, err %v; want over, nil", d.Next(), d.Err())
	}
	if stock, _, sold := f.state(t, id); stock != 4 || sold != 1 {
		t.Errorf("stock %d, sold %d; want 4, 1", stock, sold)
	}
}

// TestDeductionDoneWithError: a transaction that failed under the hold ends
// the deduction with its error and releases the lock; nothing is written.
func TestDeductionDoneWithError(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.service(t, inventory.Config{Strategy: inventory.LockFence, LockWait: 200 * time.Millisecond})
	id := f.product(t, s, 5)
	ctx := context.Background()
	failed := errors.New("the transaction failed")

	d := s.Deduct(ctx, id, nil)
	if !d.Next() {
		t.Fatalf("hold: %v", d.Err())
	}
	d.Done(inventory.Taken{}, failed)
	if d.Next() || !errors.Is(d.Err(), failed) {
		t.Fatalf("after a failed transaction: err %v, want it", d.Err())
	}
	if _, ok := d.SoldOut(); ok {
		t.Error("a failed deduction reports the product sold out")
	}
	d.Close()
	if err := deduct(ctx, s, id, 5); err != nil {
		t.Fatalf("a deduction after the failed one: %v (the lock not released?)", err)
	}
	if v, ok := s.SoldOut(ctx, id); !ok || v == 0 {
		t.Errorf("sold-out book after the last 5 units: %d %v; want the version, true", v, ok)
	}
}
