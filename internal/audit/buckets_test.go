package audit_test

import (
	"context"
	"strings"
	"testing"

	"github.com/seckill-lab/shop/internal/audit"
)

// bucketed creates product id held in 3 stock buckets (docs chapter 9):
// 2 units on its products row (bucket 0), 2 in bucket 1, 1 in bucket 2,
// one create ledger row of 5; then sells one unit from bucket 2.
func (s *seeder) bucketed(id int64) {
	s.t.Helper()
	s.exec("INSERT INTO products (id, name, price_cents, stock, buckets, created_at, updated_at) VALUES (?, 'p', 100, 2, 3, ?, ?)", id, s.now, s.now)
	s.exec("INSERT INTO stock_buckets (product_id, bucket, stock) VALUES (?, 1, 2), (?, 2, 1)", id, id)
	s.ledger(id, 5, "create", nil)
	no := "s-7-bucketed"
	s.orderRow(no, 7, id, 1, "seckill", "pending", "")
	s.exec("UPDATE stock_buckets SET stock = stock - 1 WHERE product_id = ? AND bucket = 2", id)
	s.ledger(id, -1, "order", &no)
}

// TestBucketedProductJudgedOnTheSum: the audit adds a product's stock
// buckets to its products row, and flags a bucket below zero even when the
// sum is right.
func TestBucketedProductJudgedOnTheSum(t *testing.T) {
	t.Parallel()
	onCleanShops(t, func(t *testing.T, s *seeder) {
		db := s.db
		s.bucketed(3)
		r, err := audit.Check(context.Background(), db, audit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK {
			t.Fatalf("a consistent bucketed product failed:\n%s", text(r))
		}
		if p := r.Products[2]; p.ProductID != 3 || p.Stock != 4 || p.Ledger != 4 || p.Sold != 1 {
			t.Errorf("product 3 = %+v, want stock 4 (2+2+0), ledger 4, sold 1", p)
		}
		if r, err = audit.Check(context.Background(), db, audit.Options{ProductID: 3}); err != nil || !r.OK || r.Products[0].Stock != 4 {
			t.Fatalf("one-product check: %v\n%s", err, text(r))
		}

		s.exec("UPDATE stock_buckets SET stock = stock + 1 WHERE product_id = 3 AND bucket = 1")
		r, err = audit.Check(context.Background(), db, audit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		assertViolations(t, r, []want{
			{inv: "I2", product: 3, key: "stock", values: []any{5.0}},
			{inv: "I3", product: 3, key: "ledger", values: []any{4.0}},
		})
	})
}

func TestNegativeBucketIsI1(t *testing.T) {
	t.Parallel()
	db := backends[0].open(t) // MySQL: SQLite cannot drop a CHECK constraint
	s := newSeeder(t, db)
	s.bucketed(3)
	s.exec("ALTER TABLE stock_buckets DROP CONSTRAINT ck_stock_buckets_stock")
	// One unit moved from bucket 1 to bucket 0 and one more taken from
	// bucket 1: the sum is right, bucket 1 is below zero.
	s.exec("UPDATE stock_buckets SET stock = -1 WHERE product_id = 3 AND bucket = 1")
	s.exec("UPDATE products SET stock = 5 WHERE id = 3")
	r, err := audit.Check(context.Background(), db, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || len(r.Violations) != 1 || r.Violations[0].Invariant != audit.I1 || !strings.Contains(r.Violations[0].Detail, "bucket 1 holds -1") {
		t.Fatalf("want one I1 violation naming bucket 1:\n%s", text(r))
	}
}
