package order_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/lockx"
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
