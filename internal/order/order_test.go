package order_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/testenv"
	"github.com/seckill-lab/shop/internal/testenv/stocktest"
)

func discard() *slog.Logger { return stocktest.Discard() }

// fixture is stocktest's, with this package's helpers on top.
type fixture struct{ *stocktest.Fixture }

func newFixture(t *testing.T) *fixture { return &fixture{stocktest.New(t)} }

// shop is one instance's inventory and orders on the shared backends.
type shop struct {
	inv    *inventory.Service
	orders *order.Service
}

func (f *fixture) shop(t *testing.T) shop {
	t.Helper()
	inv, _ := f.Inventory(t, inventory.Config{Strategy: inventory.LockFence, SoldOutRecheck: time.Second})
	orders := order.New(f.DB, inv, f.Markers(), order.Config{BatchMax: 64, Packets: f.Packets(t)}, order.NewMetrics(prometheus.NewRegistry()), discard())
	t.Cleanup(orders.Wait)
	return shop{inv, orders}
}

func (f *fixture) product(t *testing.T, s shop, stock int64) int64 {
	t.Helper()
	return f.Product(t, s.inv, 250, stock)
}

func (f *fixture) stock(t *testing.T, id int64) int64 {
	return f.Count(t, "SELECT stock FROM products WHERE id = ?", id)
}

// deleteKeys drops every Redis key of the test (what a Redis restart does).
func (f *fixture) deleteKeys(t *testing.T) {
	t.Helper()
	if err := testenv.DeletePrefix(context.Background(), f.RDB, f.Prefix); err != nil {
		t.Fatal(err)
	}
}

func TestSeckillOnePerUserAnyInterleaving(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a, b := f.shop(t), f.shop(t)
	id := f.product(t, a, 10)
	ctx := context.Background()

	// One user, twenty requests at once on two instances.
	type result struct {
		o       order.Order
		created bool
		err     error
	}
	results := make([]result, 20)
	var wg sync.WaitGroup
	for i := range results {
		s := []shop{a, b}[i%2]
		wg.Go(func() {
			o, created, err := s.orders.Seckill(ctx, 7, id)
			results[i] = result{o, created, err}
		})
	}
	wg.Wait()
	created, first := 0, ""
	for _, r := range results {
		switch {
		case r.err != nil:
			t.Errorf("seckill: %v", r.err)
		case r.created:
			created++
			first = r.o.OrderNo
		}
	}
	for _, r := range results {
		if r.err == nil && r.o.OrderNo != first {
			t.Errorf("answers name %s and %s", r.o.OrderNo, first)
		}
	}
	if created != 1 || f.Count(t, "SELECT COUNT(*) FROM orders WHERE user_id = 7") != 1 || f.stock(t, id) != 9 {
		t.Fatalf("%d created, stock %d; want one order and stock 9", created, f.stock(t, id))
	}

	// Sold out: others are refused, the buyer still gets its order, even
	// when Redis forgot everything.
	last := f.product(t, a, 1)
	o, ok, err := a.orders.Seckill(ctx, 8, last)
	if err != nil || !ok || o.Quantity != 1 || o.Kind != order.KindSeckill || o.Status != order.StatusPending || o.AmountCents != 250 {
		t.Fatalf("last unit: %+v created %v err %v", o, ok, err)
	}
	if _, _, err := b.orders.Seckill(ctx, 9, last); !errors.Is(err, inventory.ErrSoldOut) {
		t.Errorf("another user after sell-out: %v, want ErrSoldOut", err)
	}
	f.deleteKeys(t)
	again, ok, err := b.orders.Seckill(ctx, 8, last)
	if err != nil || ok || again.OrderNo != o.OrderNo {
		t.Errorf("buyer's repeat after sell-out without Redis: %s created %v err %v; want %s replayed", again.OrderNo, ok, err, o.OrderNo)
	}
	if _, _, err := a.orders.Seckill(ctx, 8, 999999); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("unknown product: %v, want ErrNotFound", err)
	}
}

func TestRegularKeyReplayAndMismatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.shop(t)
	id := f.product(t, s, 10)
	ctx := context.Background()

	o, created, err := s.orders.Regular(ctx, 1, id, 2, "key:k1", "hash-a")
	if err != nil || !created || o.Quantity != 2 || o.AmountCents != 500 || o.Kind != order.KindRegular {
		t.Fatalf("first: %+v created %v err %v", o, created, err)
	}
	again, created, err := s.orders.Regular(ctx, 1, id, 2, "key:k1", "hash-a")
	if err != nil || created || again.OrderNo != o.OrderNo {
		t.Errorf("same request again: %s created %v err %v; want %s replayed", again.OrderNo, created, err, o.OrderNo)
	}
	if _, _, err := s.orders.Regular(ctx, 1, id, 3, "key:k1", "hash-b"); !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Errorf("same key, different request: %v, want ErrFingerprintMismatch", err)
	}
	other, created, err := s.orders.Regular(ctx, 2, id, 1, "key:k1", "hash-a")
	if err != nil || !created || other.OrderNo == o.OrderNo {
		t.Errorf("another user with the same key: %s created %v err %v; want a new order", other.OrderNo, created, err)
	}
	if _, _, err := s.orders.Regular(ctx, 1, id, 8, "key:k2", "hash-c"); !errors.Is(err, inventory.ErrInsufficientStock) {
		t.Errorf("more than the stock: %v, want ErrInsufficientStock", err)
	}
	if _, _, err := s.orders.Regular(ctx, 1, 424242, 1, "key:k3", "hash-d"); !errors.Is(err, inventory.ErrNotFound) {
		t.Errorf("unknown product: %v, want ErrNotFound", err)
	}
	if got := f.stock(t, id); got != 7 {
		t.Errorf("stock %d, want 7", got)
	}
}

func TestCancelReturnsStockOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a, b := f.shop(t), f.shop(t)
	id := f.product(t, a, 10)
	ctx := context.Background()
	o, _, err := a.orders.Regular(ctx, 1, id, 3, "key:c1", "h")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.orders.Cancel(ctx, 2, o.OrderNo); !errors.Is(err, order.ErrNotFound) {
		t.Errorf("another user's cancel: %v, want ErrNotFound", err)
	}

	outs := make([]order.Order, 8)
	errs := make([]error, 8)
	var wg sync.WaitGroup
	for i := range outs {
		s := []shop{a, b}[i%2]
		wg.Go(func() { outs[i], errs[i] = s.orders.Cancel(ctx, 1, o.OrderNo) })
	}
	wg.Wait()
	for i := range outs {
		if errs[i] != nil || outs[i].Status != order.StatusCancelled || outs[i].CancelledAt == nil ||
			!outs[i].CancelledAt.Equal(*outs[0].CancelledAt) {
			t.Errorf("cancel %d: %+v, %v; want cancelled at one time", i, outs[i], errs[i])
		}
	}
	if got := f.stock(t, id); got != 10 {
		t.Errorf("stock after eight cancels = %d, want 10", got)
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM stock_ledger WHERE order_no = ? AND reason = 'cancel'", o.OrderNo); n != 1 {
		t.Errorf("%d cancel ledger rows, want 1", n)
	}

	paid, _, err := a.orders.Regular(ctx, 1, id, 1, "key:c2", "h")
	if err != nil {
		t.Fatal(err)
	}
	f.DB.Exec("UPDATE orders SET status = 'paid', paid_at = ?, version = version + 1 WHERE order_no = ?", time.Now().UTC(), paid.OrderNo)
	if _, err := a.orders.Cancel(ctx, 1, paid.OrderNo); !errors.Is(err, order.ErrInvalidState) {
		t.Errorf("cancel of a paid order: %v, want ErrInvalidState", err)
	}
	if got := f.stock(t, id); got != 9 {
		t.Errorf("stock after refusing to cancel a paid order = %d, want 9", got)
	}
}

func TestSweepersInTwoInstancesCancelOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a, b := f.shop(t), f.shop(t)
	id := f.product(t, a, 100)
	other := f.product(t, a, 100)
	ctx := context.Background()
	var nos []string
	for u := int64(1); u <= 10; u++ {
		o, _, err := a.orders.Seckill(ctx, u, id)
		if err != nil {
			t.Fatal(err)
		}
		r, _, err := b.orders.Regular(ctx, u, []int64{id, other}[u%2], u, "key:s"+strconv.FormatInt(u, 10), "h")
		if err != nil {
			t.Fatal(err)
		}
		nos = append(nos, o.OrderNo, r.OrderNo)
	}
	if n, err := a.orders.Sweep(ctx, time.Hour, 100); err != nil || n != 0 {
		t.Fatalf("sweep of young orders: %d, %v; want 0", n, err)
	}
	time.Sleep(20 * time.Millisecond)

	// Three sweeps per instance at once.
	var mu sync.Mutex
	total := 0
	var wg sync.WaitGroup
	for i := range 6 {
		s := []shop{a, b}[i%2]
		wg.Go(func() {
			n, err := s.orders.Sweep(ctx, 10*time.Millisecond, 7)
			for err == nil && n > 0 {
				var more int
				more, err = s.orders.Sweep(ctx, 10*time.Millisecond, 7)
				n += more
				if more == 0 {
					break
				}
			}
			if err != nil {
				t.Errorf("sweep: %v", err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	if total != len(nos) {
		t.Errorf("sweeps cancelled %d orders in all, want %d", total, len(nos))
	}
	for _, no := range nos {
		if n := f.Count(t, "SELECT COUNT(*) FROM stock_ledger WHERE order_no = ? AND reason = 'cancel'", no); n != 1 {
			t.Errorf("order %s: %d cancel ledger rows, want 1", no, n)
		}
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM orders WHERE status <> 'cancelled'"); n != 0 {
		t.Errorf("%d orders left uncancelled", n)
	}
	if s1, s2 := f.stock(t, id), f.stock(t, other); s1 != 100 || s2 != 100 {
		t.Errorf("stock after the sweep: %d and %d, want 100 and 100", s1, s2)
	}
	if n, err := b.orders.Sweep(ctx, 10*time.Millisecond, 100); err != nil || n != 0 {
		t.Errorf("sweep again: %d, %v; want 0", n, err)
	}
}

// A buyer's repeat needs no lock: while the product lock is held elsewhere
// and Redis has forgotten the processed marker, the repeat still gets its
// order, and another buyer gets ErrBusy.
func TestSeckillRepeatWhileLockBusy(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	locks := lockx.New(f.RDB, lockx.Options{Prefix: f.Prefix + "lock:"})
	t.Cleanup(func() { locks.Close() })
	inv := inventory.New(f.DB, locks, f.RDB, inventory.Config{Strategy: inventory.LockFence,
		LockTTL: 5 * time.Second, LockWait: 50 * time.Millisecond, KeyPrefix: f.Prefix},
		nil, discard())
	orders := order.New(f.DB, inv, idem.NewMarkers(f.RDB, f.Prefix+"done:", time.Hour), order.Config{BatchMax: 64}, nil, discard())
	t.Cleanup(orders.Wait)
	id := f.product(t, f.shop(t), 5)
	ctx := context.Background()
	first, created, err := orders.Seckill(ctx, 11, id)
	if err != nil || !created {
		t.Fatalf("first seckill: created %v, %v", created, err)
	}
	f.deleteKeys(t)
	held, err := locks.Acquire(ctx, "product:"+strconv.FormatInt(id, 10), lockx.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	again, created, err := orders.Seckill(ctx, 11, id)
	if err != nil || created || again.OrderNo != first.OrderNo {
		t.Errorf("repeat while the lock is busy: %s created %v err %v; want %s replayed", again.OrderNo, created, err, first.OrderNo)
	}
	if _, _, err := orders.Seckill(ctx, 12, id); !errors.Is(err, inventory.ErrBusy) {
		t.Errorf("new buyer while the lock is busy: %v, want ErrBusy", err)
	}
}
