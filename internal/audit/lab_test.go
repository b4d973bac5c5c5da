package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/seckill-lab/shop/internal/audit"
)

// TestLabProductsApart: a lab race's product and its violations are reported
// under lab and leave ok alone; the shop's own products keep the contract;
// asking for the lab product alone reports it as any other.
func TestLabProductsApart(t *testing.T) {
	t.Parallel()
	onCleanShops(t, func(t *testing.T, s *seeder) {
		db := s.db
		// Product 3 is a naive lab race's: two orders for one unit (I2).
		s.product(3, 1)
		s.exec("INSERT INTO lab_products (product_id, stock_strategy, created_at) VALUES (3, 'naive', ?)", s.now)
		s.order("s-200-3", 200, 3, 1, "seckill", "pending", "")
		second := "s-201-3" // a lost update: sold, but the stock was not taken
		s.orderRow(second, 201, 3, 1, "seckill", "pending", "")
		s.ledger(3, -1, "order", &second)
		ctx := context.Background()

		r, err := audit.Check(ctx, db, audit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK || len(r.Violations) != 0 || r.Lab == nil {
			t.Fatalf("a lab product's oversell turned the shop red:\n%s", text(r))
		}
		for _, p := range r.Products {
			if p.ProductID == 3 {
				t.Errorf("lab product 3 among the shop's products: %+v", r.Products)
			}
		}
		if len(r.Lab.Products) != 1 || r.Lab.Products[0].ProductID != 3 || r.Lab.Products[0].StockStrategy != "naive" ||
			r.Lab.Products[0].Oversold() != 1 {
			t.Errorf("lab products: %+v", r.Lab.Products)
		}
		if len(r.Lab.Violations) == 0 {
			t.Fatalf("the lab product's violations are gone:\n%s", text(r))
		}
		for _, v := range r.Lab.Violations {
			if v.ProductID != 3 {
				t.Errorf("lab violation of product %d: %+v", v.ProductID, v)
			}
		}
		j, _ := json.Marshal(r)
		if !bytes.Contains(j, []byte(`"ok":true`)) || !bytes.Contains(j, []byte(`"lab":{"products":[{"product_id":3,`)) ||
			!bytes.Contains(j, []byte(`"stock_strategy":"naive"}`)) {
			t.Errorf("JSON: %s", j)
		}
		out := text(r)
		if !strings.HasSuffix(out, "\nOK\n") || !strings.Contains(out, "product 3: stock 0, added 1, sold 2") ||
			!strings.Contains(out, ", raced with naive\n") || !strings.Contains(out, "  lab finding I2 product 3: ") {
			t.Errorf("text report:\n%s", out)
		}

		// One product asked for: reported as before, lab or not.
		one, err := audit.Check(ctx, db, audit.Options{ProductID: 3})
		if err != nil {
			t.Fatal(err)
		}
		if one.OK || one.Lab != nil || len(one.Products) != 1 || one.Products[0].ProductID != 3 {
			t.Errorf("product 3 alone: %+v", one)
		}

		// A fault of the shop's own product still fails the shop-wide audit.
		s.exec("UPDATE products SET stock = stock - 1 WHERE id = 2")
		r, err = audit.Check(ctx, db, audit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if r.OK || len(r.Lab.Violations) == 0 {
			t.Fatalf("shop fault beside a lab one:\n%s", text(r))
		}
		for _, v := range r.Violations {
			if v.ProductID != 2 {
				t.Errorf("shop violation of product %d: %+v", v.ProductID, v)
			}
		}
		if out := text(r); !strings.HasSuffix(out, "\nFAIL: 2 violations\n") {
			t.Errorf("text report:\n%s", out)
		}
	})
}
