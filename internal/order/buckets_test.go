package order

import (
	"errors"
	"testing"

	"github.com/seckill-lab/shop/internal/inventory"
)

// A batch on a product held in 3 buckets of one unit each walks them: each
// bucket serves what it can, the rest moves on, and what no bucket could
// serve is decided against the sum at the end. Every request is answered
// once, with its final result.
func TestBatchWalksBuckets(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	s := f.service(t, inventory.Config{Buckets: 3})
	id := f.product(t, s, 3) // [1 1 1], home bucket 0
	batch := []*request{seckillReq(10, id), seckillReq(20, id), regularReq(30, id, 2, "k"), seckillReq(10, id), seckillReq(40, id), seckillReq(50, id)}
	s.runBatch(id, admit(t, s, batch))
	got := answers(batch)
	for i, r := range got {
		if errors.Is(r.err, inventory.ErrElsewhere) {
			t.Fatalf("request %d answered with the walk's internal refusal: %v", i, r.err)
		}
	}
	for _, i := range []int{0, 1, 4} {
		if !got[i].created || got[i].err != nil {
			t.Errorf("request %d: %+v; want created (buckets 0, 1, 2 in turn)", i, got[i])
		}
	}
	if got[3].err != nil || got[3].created || got[3].o.OrderNo != got[0].o.OrderNo {
		t.Errorf("the same buyer again: %+v; want a replay of %s", got[3], got[0].o.OrderNo)
	}
	for _, i := range []int{2, 5} {
		if !errors.Is(got[i].err, inventory.ErrSoldOut) {
			t.Errorf("request %d: %+v; want sold out (every bucket empty)", i, got[i])
		}
	}
	for _, r := range batch {
		select {
		case extra := <-r.done:
			t.Errorf("%s answered twice: %+v", r.o.OrderNo, extra)
		default:
		}
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM orders WHERE product_id = ?", id); n != 3 {
		t.Errorf("orders = %d, want 3", n)
	}
	if left := f.Count(t, "SELECT p.stock + (SELECT COALESCE(SUM(stock), 0) FROM stock_buckets WHERE product_id = p.id) FROM products p WHERE p.id = ?", id); left != 0 {
		t.Errorf("stock left = %d, want 0", left)
	}
	if _, known := s.inv.SoldOut(t.Context(), id); !known {
		t.Error("the sold-out book did not learn the product")
	}
}
