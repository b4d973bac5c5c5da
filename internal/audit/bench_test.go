package audit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/seckill-lab/shop/internal/audit"
)

// BenchmarkCheck100k audits a consistent MariaDB shop of 10^5 orders over 10
// products (a third paid, a sixth cancelled) and 10^4 wallets:
//
//	go test -run '^$' -bench Check100k ./internal/audit/
func BenchmarkCheck100k(b *testing.B) {
	db := backends[0].open(b)
	s := newSeeder(b, db)
	const products, orders, users = 10, 100_000, 10_000
	for p := int64(1); p <= products; p++ {
		s.product(p, orders)
	}
	var ord, led, pay, wled []string
	flush := func(table, cols string, rows *[]string) {
		if len(*rows) > 0 {
			s.exec("INSERT INTO " + table + " (" + cols + ") VALUES " + strings.Join(*rows, ","))
			*rows = (*rows)[:0]
		}
	}
	ts := "'" + s.now.Format("2006-01-02 15:04:05") + "'"
	paid := map[int64]int64{}
	taken := map[int64]int64{}
	for i := 0; i < orders; i++ {
		user, product := int64(i%users+1), int64(i/users+1)
		no := fmt.Sprintf("o-%d", i)
		status := "pending"
		switch i % 6 {
		case 0, 1:
			status = "paid"
		case 2:
			status = "cancelled"
		}
		ord = append(ord, fmt.Sprintf("('%s', %d, %d, 1, 100, 'seckill', '%s', %s, %s)", no, user, product, status, ts, ts))
		led = append(led, fmt.Sprintf("(%d, -1, 'order', '%s', %s)", product, no, ts))
		taken[product]++
		if status == "cancelled" {
			led = append(led, fmt.Sprintf("(%d, 1, 'cancel', '%s', %s)", product, no, ts))
			taken[product]--
		}
		if status == "paid" {
			pay = append(pay, fmt.Sprintf("('r-%s', '%s', %d, 100, %s)", no, no, user, ts))
			wled = append(wled, fmt.Sprintf("(%d, -100, 'payment', '%s', %s)", user, no, ts))
			paid[user] += 100
		}
		if len(ord) == 1000 {
			flush("orders", "order_no, user_id, product_id, quantity, amount_cents, kind, status, created_at, updated_at", &ord)
			flush("stock_ledger", "product_id, delta, reason, order_no, created_at", &led)
			flush("payments", "request_id, order_no, user_id, amount_cents, created_at", &pay)
			flush("wallet_ledger", "user_id, delta, reason, ref, created_at", &wled)
		}
	}
	for p, n := range taken {
		s.exec("UPDATE products SET stock = stock - ? WHERE id = ?", n, p)
	}
	var w []string
	for u := int64(1); u <= users; u++ {
		w = append(w, fmt.Sprintf("(%d, %d, %s, %s)", u, 100_000-paid[u], ts, ts))
		wled = append(wled, fmt.Sprintf("(%d, 100000, 'credit', 'c-%d', %s)", u, u, ts))
		if len(w) == 1000 {
			flush("wallets", "user_id, balance_cents, created_at, updated_at", &w)
			flush("wallet_ledger", "user_id, delta, reason, ref, created_at", &wled)
		}
	}
	s.exec("ANALYZE TABLE products, stock_ledger, orders, wallets, wallet_ledger, payments")
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		r, err := audit.Check(ctx, db, audit.Options{})
		if err != nil || !r.OK {
			b.Fatalf("err %v, violations %d", err, len(r.Violations))
		}
	}
}
