package order_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/order"
)

// TestBucketsNeverOversellAcrossInstances: three instances, each starting
// at its own bucket of a product held in three, and three buyers per unit
// spread over them: exactly as many orders as units, and a clean audit.
func TestBucketsNeverOversellAcrossInstances(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	shops := make([]shop, 3)
	for i := range shops {
		inv, _ := f.Inventory(t, inventory.Config{Strategy: inventory.LockFence, SoldOutRecheck: time.Second, Buckets: 3, HomeBucket: i})
		orders := order.New(f.DB, inv, f.Markers(), order.Config{BatchMax: 16, Packets: f.Packets(t)}, order.NewMetrics(prometheus.NewRegistry()), discard())
		t.Cleanup(orders.Wait)
		shops[i] = shop{inv, orders}
	}
	const units = 31 // [11 10 10]
	id := f.product(t, shops[0], units)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	created, soldOut := 0, 0
	var wg sync.WaitGroup
	for u := int64(1); u <= 3*units; u++ {
		s := shops[u%3]
		wg.Go(func() {
			_, ok, err := s.orders.Seckill(ctx, u, id)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && ok:
				created++
			case errors.Is(err, inventory.ErrSoldOut):
				soldOut++
			default:
				t.Errorf("user %d: created %v, %v", u, ok, err)
			}
		})
	}
	wg.Wait()
	if created != units || soldOut != 2*units {
		t.Errorf("%d created, %d sold out; want %d and %d", created, soldOut, units, 2*units)
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM orders WHERE product_id = ?", id); n != units {
		t.Errorf("orders = %d, want %d", n, units)
	}
	r, err := audit.Check(ctx, f.DB, audit.Options{ProductID: id})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK || r.Products[0].Stock != 0 || r.Products[0].Sold != units {
		t.Errorf("audit: ok %v, %+v, violations %+v", r.OK, r.Products, r.Violations)
	}
}
