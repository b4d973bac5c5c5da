package order

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/testenv/stocktest"
)

// A sold-out product's buyer list keeps at most SoldOutBuyers buyers; a
// buyer left off it is still answered with its order (the database), and
// a stranger is still refused.
func TestBuyerListIsBounded(t *testing.T) {
	t.Parallel()
	f := stocktest.New(t)
	inv, _ := f.Inventory(t, inventory.Config{Strategy: inventory.LockFence, SoldOutRecheck: time.Hour})
	s := New(f.DB, inv, f.Markers(), Config{BatchMax: 64, SoldOutBuyers: 2}, NewMetrics(prometheus.NewRegistry()), stocktest.Discard())
	t.Cleanup(s.Wait)
	ctx := context.Background()
	id := f.Product(t, inv, 100, 3)
	bought := map[int64]string{}
	for u := int64(1); u <= 3; u++ {
		o, created, err := s.Seckill(ctx, u, id)
		if err != nil || !created {
			t.Fatalf("buyer %d: created %v, %v", u, created, err)
		}
		bought[u] = o.OrderNo
	}
	if _, _, err := s.Seckill(ctx, 4, id); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("buyer 4: %v, want ErrSoldOut", err)
	}
	s.buyers.mu.RLock()
	l := s.buyers.products[id]
	s.buyers.mu.RUnlock()
	if l == nil || !l.ok || len(l.byUser) != 2 || !l.partial {
		t.Fatalf("buyer list: %+v; want 2 of the 3 buyers, marked partial", l)
	}
	for u, no := range bought {
		o, created, err := s.Seckill(ctx, u, id)
		if err != nil || created || o.OrderNo != no {
			t.Errorf("repeat of buyer %d (listed: %v): %s created %v, %v; want %s replayed", u, l.byUser[u] != "", o.OrderNo, created, err, no)
		}
	}
	if _, _, err := s.Seckill(ctx, 5, id); !errors.Is(err, inventory.ErrSoldOut) {
		t.Errorf("a stranger after the sell-out: %v, want ErrSoldOut", err)
	}
}

// A buyer list whose read runs past its bound does not hold the sold-out
// answer: it keeps what it read, marked partial, and the database answers
// each repeat buyer (its order) and each stranger (refused).
func TestBuyerListReadIsBounded(t *testing.T) {
	t.Parallel()
	f := stocktest.New(t)
	inv, _ := f.Inventory(t, inventory.Config{Strategy: inventory.LockFence, SoldOutRecheck: time.Hour})
	s := New(f.DB, inv, f.Markers(), Config{BatchMax: 64}, NewMetrics(prometheus.NewRegistry()), stocktest.Discard())
	t.Cleanup(s.Wait)
	s.buyers.readFor = time.Nanosecond // every read is cut short
	ctx := context.Background()
	id := f.Product(t, inv, 100, 2)
	bought := map[int64]string{}
	for u := int64(1); u <= 2; u++ {
		o, created, err := s.Seckill(ctx, u, id)
		if err != nil || !created {
			t.Fatalf("buyer %d: created %v, %v", u, created, err)
		}
		bought[u] = o.OrderNo
	}
	if _, _, err := s.Seckill(ctx, 3, id); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("buyer 3: %v, want ErrSoldOut", err)
	}
	s.buyers.mu.RLock()
	l := s.buyers.products[id]
	s.buyers.mu.RUnlock()
	if l == nil || !l.ok || !l.partial {
		t.Fatalf("buyer list: %+v; want one marked partial", l)
	}
	for u, no := range bought {
		o, created, err := s.Seckill(ctx, u, id)
		if err != nil || created || o.OrderNo != no {
			t.Errorf("repeat of buyer %d: %s created %v, %v; want %s replayed", u, o.OrderNo, created, err, no)
		}
	}
	if _, _, err := s.Seckill(ctx, 4, id); !errors.Is(err, inventory.ErrSoldOut) {
		t.Errorf("a stranger after the sell-out: %v, want ErrSoldOut", err)
	}
}
