package order

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

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
	s.runBatch(id, batch)
	got := answers(batch)
	for i, r := range got {
		if r.err != nil && !errors.Is(r.err, inventory.ErrSoldOut) && !errors.Is(r.err, inventory.ErrInsufficientStock) && !errors.Is(r.err, inventory.ErrBusy) {
			t.Fatalf("request %d answered with something a buyer is never told: %v (a bucket's refusal is the walk's own)", i, r.err)
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

// A batch transaction that rolls back and runs again must not act on what
// the rolled-back run found. Here the first run serves one want from bucket
// 0 (emptying it) and leaves the other open; its order INSERT then fails
// as a deadlock victim would, while another writer commits both orders.
// The rerun finds them and calls no DeductTx, so the walk ends there: bucket
// 0, whose unit the rollback gave back, is not remembered as empty, and
// the next buyer is served from it.
func TestBatchRerunForgetsTheRolledBackTake(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	s := f.service(t, inventory.Config{Buckets: 3, HomeBucket: 0})
	id := f.product(t, s, 3) // [1 1 1]
	batch := []*request{seckillReq(10, id), seckillReq(20, id)}
	var armed atomic.Bool
	armed.Store(true)
	err := f.DB.Callback().Raw().Before("gorm:raw").Register("test:deadlock-once", func(tx *gorm.DB) {
		if !strings.HasPrefix(tx.Statement.SQL.String(), "INSERT INTO orders") || !armed.CompareAndSwap(true, false) {
			return
		}
		twins := []Order{batch[0].o, batch[1].o}
		for i := range twins {
			twins[i].Status, twins[i].CreatedAt, twins[i].UpdatedAt = StatusPending, time.Now(), time.Now()
		}
		if err := f.DB.Create(&twins).Error; err != nil {
			t.Errorf("twins: %v", err)
		}
		tx.AddError(&mysql.MySQLError{Number: 1213, Message: "test: deadlock"})
	})
	if err != nil {
		t.Fatal(err)
	}
	s.runBatch(id, batch)
	for i, r := range answers(batch) {
		if r.err != nil || r.created {
			t.Errorf("request %d: %+v; want the twin's order, replayed", i, r)
		}
	}
	if armed.Load() {
		t.Fatal("the injected failure never ran")
	}
	next := []*request{seckillReq(30, id)}
	s.runBatch(id, next)
	if r := answers(next)[0]; r.err != nil || !r.created {
		t.Fatalf("next buyer: %+v; want created", r)
	}
	if left := f.Count(t, "SELECT stock FROM products WHERE id = ?", id); left != 0 {
		t.Errorf("bucket 0 holds %d after the next buyer; want 0 (served from its home bucket, not skipped as empty)", left)
	}
}
