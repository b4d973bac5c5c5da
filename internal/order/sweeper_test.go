package order_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/order"
)

// TestSweepPassesABusyProduct: the oldest due orders all belong to a product
// whose lock stays taken; one sweep still cancels the newer due orders of
// another product instead of giving up on the batch (issue 11 item 10).
func TestSweepPassesABusyProduct(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.shop(t)
	hot, cold := f.product(t, s, 100), f.product(t, s, 100)
	ctx := context.Background()
	for u := int64(1); u <= 3; u++ {
		if _, _, err := s.orders.Regular(ctx, u, hot, 1, "key:hot"+strconv.FormatInt(u, 10), "h"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	for u := int64(1); u <= 2; u++ {
		if _, _, err := s.orders.Regular(ctx, u, cold, 1, "key:cold"+strconv.FormatInt(u, 10), "h"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)

	locks := lockx.New(f.RDB, lockx.Options{Prefix: f.Prefix + "lock:"})
	t.Cleanup(func() { locks.Close() })
	held, err := locks.Acquire(ctx, "product:"+strconv.FormatInt(hot, 10), lockx.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	n, err := s.orders.Sweep(ctx, 10*time.Millisecond, 2)
	if err != nil || n != 2 {
		t.Errorf("sweep with the oldest orders' product busy: %d cancelled, %v; want the 2 orders of the other product", n, err)
	}
	if c := f.Count(t, "SELECT COUNT(*) FROM orders WHERE product_id = ? AND status = 'cancelled'", cold); c != 2 {
		t.Errorf("%d orders of the idle product cancelled, want 2", c)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.orders.Sweep(ctx, 10*time.Millisecond, 100); err != nil || n != 3 {
		t.Errorf("sweep once the lock is free: %d, %v; want the 3 orders of the hot product", n, err)
	}
}

// countCancels counts the UPDATE statements gorm sends that cancel orders.
func countCancels(t *testing.T, db *gorm.DB) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	err := db.Callback().Update().Before("gorm:update").Register("test:count-cancels", func(tx *gorm.DB) {
		if m, ok := tx.Statement.Dest.(map[string]any); ok && tx.Statement.Table == "orders" && m["status"] == order.StatusCancelled {
			n.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestSweepOneTransactionPerProduct: the sweeper cancels the due orders of
// a product together (one guarded UPDATE, one transaction), not one by one,
// and returns each order's units exactly once (I4), while payments race it:
// every order ends either paid (its payment won, nothing returned) or
// cancelled (the payment changed nothing, the units came back once).
func TestSweepOneTransactionPerProduct(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.shop(t)
	products := []int64{f.product(t, s, 20), f.product(t, s, 20)}
	ctx := context.Background()
	var placed []order.Order
	for _, id := range products {
		for u := int64(1); u <= 8; u++ {
			o, _, err := s.orders.Regular(ctx, u, id, 1, "sweep:"+strconv.FormatInt(id, 10)+":"+strconv.FormatInt(u, 10), "h")
			if err != nil {
				t.Fatal(err)
			}
			placed = append(placed, o)
		}
	}
	time.Sleep(20 * time.Millisecond)
	updates := countCancels(t, f.DB)

	var paid atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, o := range placed {
		if i%2 == 1 {
			continue // half of the orders are only swept
		}
		wg.Go(func() {
			<-start
			err := dbx.Tx(ctx, f.DB, func(tx *gorm.DB) error {
				cur, err := order.GetTx(tx, o.OrderNo)
				if err != nil {
					return err
				}
				_, err = order.MarkPaidTx(tx, cur, dbx.Now())
				return err
			})
			switch {
			case err == nil:
				paid.Add(1)
			case !errors.Is(err, order.ErrInvalidState):
				t.Errorf("payment of %s: %v", o.OrderNo, err)
			}
		})
	}
	close(start)
	n, err := s.orders.Sweep(ctx, 10*time.Millisecond, 100)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if got := int64(n) + paid.Load(); got != int64(len(placed)) {
		t.Errorf("%d cancelled + %d paid = %d, want every one of the %d orders exactly once", n, paid.Load(), got, len(placed))
	}
	if u := updates.Load(); u != int64(len(products)) {
		t.Errorf("the sweep sent %d UPDATEs cancelling orders of %d products, want one per product", u, len(products))
	}
	for _, id := range products {
		cancelled := f.Count(t, "SELECT COUNT(*) FROM orders WHERE product_id = ? AND status = 'cancelled'", id)
		returned := f.Count(t, "SELECT COUNT(*) FROM stock_ledger WHERE product_id = ? AND reason = 'cancel'", id)
		pending := f.Count(t, "SELECT COUNT(*) FROM orders WHERE product_id = ? AND status = 'pending'", id)
		sold := f.Count(t, "SELECT COUNT(*) FROM orders WHERE product_id = ? AND status = 'paid'", id)
		if pending != 0 || returned != cancelled || f.stock(t, id) != 20-sold {
			t.Errorf("product %d: %d pending, %d cancelled with %d returns, %d paid, stock %d; want 0 pending, one return per cancel, stock 20 - paid",
				id, pending, cancelled, returned, sold, f.stock(t, id))
		}
	}
}
