package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/seckill-lab/shop/internal/audit"
)

func TestCleanShopPasses(t *testing.T) {
	t.Parallel()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			db := be.open(t)
			newSeeder(t, db).clean()
			r, err := audit.Check(context.Background(), db, audit.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if !r.OK || len(r.Violations) != 0 {
				t.Fatalf("clean shop failed:\n%s", text(r))
			}
			wantProducts := []audit.ProductSummary{
				{ProductID: 1, Stock: 8, Added: 10, Sold: 3, Returned: 1, Cancelled: 1, Ledger: 8},
				{ProductID: 2, Stock: 18, Added: 25, Sold: 9, Returned: 2, Cancelled: 2, Ledger: 18},
			}
			if !reflect.DeepEqual(r.Products, wantProducts) {
				t.Errorf("products = %+v, want %+v", r.Products, wantProducts)
			}
			wantWallets := []audit.WalletSummary{
				{UserID: 100, Balance: 9700, Ledger: 9700, Credited: 10_000, Paid: 300},
				{UserID: 101, Balance: 400, Ledger: 400, Credited: 500, Paid: 100},
			}
			if !reflect.DeepEqual(r.Wallets, wantWallets) {
				t.Errorf("wallets = %+v, want %+v", r.Wallets, wantWallets)
			}
			j, _ := json.Marshal(r)
			if !bytes.Contains(j, []byte(`"violations":[]`)) || !bytes.Contains(j, []byte(`"ok":true`)) {
				t.Errorf("JSON of a clean report: %s", j)
			}
			if out := text(r); !strings.HasSuffix(out, "\nOK\n") || !strings.Contains(out, "product 2: stock 18, added 25, sold 9") {
				t.Errorf("text report:\n%s", out)
			}
		})
	}
}

func TestEmptyShopPasses(t *testing.T) {
	t.Parallel()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			r, err := audit.Check(context.Background(), be.open(t), audit.Options{})
			if err != nil {
				t.Fatal(err)
			}
			j, _ := json.Marshal(r)
			if !r.OK || !bytes.Contains(j, []byte(`"products":[],"violations":[]`)) {
				t.Fatalf("empty shop: %s", j)
			}
		})
	}
}

// want is one expected violation: its invariant, whom it names, and values
// of key that must appear in its rows.
type want struct {
	inv     string
	product int64
	user    int64
	key     string
	values  []any
}

func TestSeededFaultsAreFlagged(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		seed func(s *seeder)
		want []want
	}{
		{
			// A lost update: two buyers both read stock 1 and both wrote 0.
			name: "oversell",
			seed: func(s *seeder) {
				s.product(3, 1)
				s.order("s-1-3", 1, 3, 1, "seckill", "pending", "")
				s.orderRow("s-2-3", 2, 3, 1, "seckill", "pending", "")
				no := "s-2-3"
				s.ledger(3, -1, "order", &no)
			},
			want: []want{
				{inv: "I2", product: 3, key: "sold", values: []any{2.0}},
				{inv: "I3", product: 3, key: "ledger", values: []any{-1.0}},
			},
		},
		{
			name: "duplicate seckill order",
			seed: func(s *seeder) {
				s.product(3, 10)
				s.order("s-7-3-a", 7, 3, 1, "seckill", "pending", "")
				s.order("s-7-3-b", 7, 3, 1, "seckill", "pending", "")
				s.order("s-8-3", 8, 3, 1, "seckill", "pending", "")
			},
			want: []want{{inv: "O1", product: 3, user: 7, key: "order_no", values: []any{"s-7-3-a", "s-7-3-b"}}},
		},
		{
			name: "duplicate regular order",
			seed: func(s *seeder) {
				s.product(3, 10)
				s.order("r-7-a", 7, 3, 2, "regular", "pending", "k1")
				s.order("r-7-b", 7, 3, 2, "regular", "cancelled", "k1")
				s.order("r-7-c", 7, 3, 2, "regular", "pending", "k2")
				s.order("r-8-a", 8, 3, 2, "regular", "pending", "k1")
			},
			want: []want{{inv: "O2", product: 3, user: 7, key: "order_no", values: []any{"r-7-a", "r-7-b"}}},
		},
		{
			name: "paid order without payment",
			seed: func(s *seeder) {
				s.product(3, 10)
				s.wallet(7, 1000)
				s.order("r-7-a", 7, 3, 1, "regular", "paid", "k1")
			},
			want: []want{{inv: "M1", user: 7, key: "order_no", values: []any{"r-7-a"}}},
		},
		{
			name: "wallet balance disagrees with its ledger",
			seed: func(s *seeder) {
				s.wallet(7, 1000)
				s.exec("UPDATE wallets SET balance_cents = 1500 WHERE user_id = 7")
			},
			want: []want{{inv: "M1", user: 7, key: "ledger_cents", values: []any{1000.0}}},
		},
		{
			name: "payment for a cancelled order",
			seed: func(s *seeder) {
				s.product(3, 10)
				s.wallet(7, 1000)
				s.order("r-7-a", 7, 3, 1, "regular", "cancelled", "k1")
				s.pay("r-7-a", 7, 100)
			},
			want: []want{{inv: "M1", user: 7, key: "order_no", values: []any{"r-7-a"}}},
		},
		{
			name: "payment amount differs from the order",
			seed: func(s *seeder) {
				s.product(3, 10)
				s.wallet(7, 1000)
				s.order("r-7-a", 7, 3, 1, "regular", "paid", "k1")
				s.pay("r-7-a", 7, 250)
			},
			want: []want{{inv: "M1", user: 7, key: "payment_cents", values: []any{250.0}}},
		},
		{
			name: "payment without its wallet debit",
			seed: func(s *seeder) {
				s.product(3, 10)
				s.wallet(7, 1000)
				s.order("r-7-a", 7, 3, 1, "regular", "paid", "k1")
				s.exec("INSERT INTO payments (request_id, order_no, user_id, amount_cents, created_at) VALUES ('q', 'r-7-a', 7, 100, ?)", s.now)
			},
			want: []want{{inv: "M1", user: 7, key: "ledger_id", values: []any{nil}}},
		},
		{
			name: "payment naming no order",
			seed: func(s *seeder) {
				s.wallet(7, 1000)
				s.pay("r-7-gone", 7, 100)
			},
			want: []want{{inv: "M1", user: 7, key: "order_no", values: []any{"r-7-gone"}}},
		},
		{
			name: "wallet debit without a payment",
			seed: func(s *seeder) {
				s.wallet(7, 1000)
				s.exec("UPDATE wallets SET balance_cents = 900 WHERE user_id = 7")
				s.exec("INSERT INTO wallet_ledger (user_id, delta, reason, ref, created_at) VALUES (7, -100, 'payment', 'r-7-x', ?)", s.now)
			},
			want: []want{{inv: "M1", user: 7, key: "ref", values: []any{"r-7-x"}}},
		},
		{
			name: "stock changed without a ledger row",
			seed: func(s *seeder) {
				s.product(3, 10)
				s.exec("UPDATE products SET stock = 7 WHERE id = 3")
			},
			want: []want{
				{inv: "I2", product: 3, key: "stock", values: []any{7.0}},
				{inv: "I3", product: 3, key: "ledger", values: []any{10.0}},
			},
		},
		{
			name: "cancelled order whose stock was not returned",
			seed: func(s *seeder) {
				s.product(3, 10)
				s.orderRow("s-7-3", 7, 3, 1, "seckill", "cancelled", "")
				no := "s-7-3"
				s.exec("UPDATE products SET stock = stock - 1 WHERE id = 3")
				s.ledger(3, -1, "order", &no)
			},
			want: []want{
				{inv: "I2", product: 3, key: "stock", values: []any{9.0}},
				{inv: "I4", product: 3, user: 7, key: "order_no", values: []any{"s-7-3"}},
			},
		},
		{
			name: "paid order whose stock was returned",
			seed: func(s *seeder) {
				s.product(3, 10)
				s.wallet(7, 1000)
				s.paidOrder("s-7-3", 7, 3, 1, "seckill", "")
				no := "s-7-3"
				s.exec("UPDATE products SET stock = stock + 1 WHERE id = 3")
				s.ledger(3, 1, "cancel", &no)
			},
			want: []want{
				{inv: "I2", product: 3, key: "stock", values: []any{10.0}},
				{inv: "I4", product: 3, user: 7, key: "cancel_ledger_delta", values: []any{1.0}},
			},
		},
		{
			name: "order lost after its stock was taken",
			seed: func(s *seeder) {
				s.product(3, 10)
				no := "s-7-3"
				s.exec("UPDATE products SET stock = stock - 1 WHERE id = 3")
				s.ledger(3, -1, "order", &no)
			},
			want: []want{
				{inv: "I2", product: 3, key: "stock", values: []any{9.0}},
				{inv: "I4", product: 3, key: "order_no", values: []any{"s-7-3"}},
			},
		},
		{
			name: "order that never took its stock",
			seed: func(s *seeder) {
				s.product(3, 10)
				s.orderRow("s-7-3", 7, 3, 1, "seckill", "pending", "")
			},
			want: []want{
				{inv: "I2", product: 3, key: "stock", values: []any{10.0}},
				{inv: "I4", product: 3, user: 7, key: "order_ledger_id", values: []any{nil}},
			},
		},
		{
			name: "ledger rows of a product that does not exist",
			seed: func(s *seeder) {
				s.ledger(9, 5, "create", nil)
			},
			want: []want{
				{inv: "I2", product: 9, key: "missing", values: []any{true}},
				{inv: "I3", product: 9, key: "ledger", values: []any{5.0}},
			},
		},
	}
	for _, tc := range cases {
		for _, be := range backends {
			t.Run(tc.name+"/"+be.name, func(t *testing.T) {
				t.Parallel()
				db := be.open(t)
				s := newSeeder(t, db)
				s.clean()
				tc.seed(s)
				r, err := audit.Check(context.Background(), db, audit.Options{})
				if err != nil {
					t.Fatal(err)
				}
				assertViolations(t, r, tc.want)
			})
		}
	}
}

// TestWithoutUniqueIndexes drops the unique indexes that make double returns
// and double charges impossible, to show the checker still finds them.
func TestWithoutUniqueIndexes(t *testing.T) {
	t.Parallel()
	db := backends[0].open(t) // MySQL: SQLite cannot drop a table's UNIQUE constraint
	s := newSeeder(t, db)
	s.clean()
	s.exec("ALTER TABLE stock_ledger DROP INDEX uq_ledger_order_reason")
	s.exec("ALTER TABLE payments DROP INDEX uq_payments_order")
	s.exec("ALTER TABLE wallet_ledger DROP INDEX uq_wallet_ledger_ref")

	s.product(3, 10)
	s.order("s-7-3", 7, 3, 1, "seckill", "cancelled", "")
	no := "s-7-3"
	s.exec("UPDATE products SET stock = stock + 1 WHERE id = 3")
	s.ledger(3, 1, "cancel", &no) // returned twice

	s.wallet(7, 1000)
	s.paidOrder("r-7-a", 7, 3, 1, "regular", "k1")
	s.exec("INSERT INTO payments (request_id, order_no, user_id, amount_cents, created_at) VALUES ('again', 'r-7-a', 7, 100, ?)", s.now)
	s.exec("UPDATE wallets SET balance_cents = balance_cents - 100 WHERE user_id = 7")
	s.exec("INSERT INTO wallet_ledger (user_id, delta, reason, ref, created_at) VALUES (7, -100, 'payment', 'r-7-a', ?)", s.now)

	r, err := audit.Check(context.Background(), db, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	assertViolations(t, r, []want{
		{inv: "I2", product: 3, key: "returned", values: []any{2.0}}, // the unit came back twice
		{inv: "I4", product: 3, key: "order_no", values: []any{"s-7-3"}},
		{inv: "M1", user: 7, key: "request_id", values: []any{"again", "req-r-7-a"}},
		{inv: "M1", user: 7, key: "ref", values: []any{"r-7-a"}},
	})
	if p := r.Products[2]; p.Sold != 2 || p.Cancelled != 1 {
		t.Errorf("orders counted twice through the joins: %+v", p)
	}
}

// assertViolations checks r has exactly the wanted violations and that the
// wanted values appear in their rows (compared through JSON, as clients see
// them).
func assertViolations(t *testing.T, r audit.Report, wants []want) {
	t.Helper()
	if r.OK {
		t.Fatalf("report OK, want %d violations", len(wants))
	}
	var got, exp []string
	for _, v := range r.Violations {
		got = append(got, fmt.Sprintf("%s p%d u%d", v.Invariant, v.ProductID, v.UserID))
	}
	for _, w := range wants {
		exp = append(exp, fmt.Sprintf("%s p%d u%d", w.inv, w.product, w.user))
	}
	sort.Strings(got)
	sort.Strings(exp)
	if !reflect.DeepEqual(got, exp) {
		t.Fatalf("violations %v, want %v\n%s", got, exp, text(r))
	}
	for _, w := range wants {
		for _, val := range w.values {
			found := false
			for _, v := range r.Violations {
				if v.Invariant != w.inv || v.ProductID != w.product || v.UserID != w.user {
					continue
				}
				var rows []map[string]any
				j, _ := json.Marshal(v.Rows)
				if err := json.Unmarshal(j, &rows); err != nil {
					t.Fatal(err)
				}
				for _, row := range rows {
					got, ok := row[w.key]
					found = found || (ok && reflect.DeepEqual(got, val))
				}
			}
			if !found {
				t.Errorf("%s p%d u%d: no row with %s=%v\n%s", w.inv, w.product, w.user, w.key, val, text(r))
			}
		}
	}
	for _, v := range r.Violations {
		if v.Detail == "" || len(v.Rows) == 0 {
			t.Errorf("%s: empty detail or rows: %+v", v.Invariant, v)
		}
	}
	want := fmt.Sprintf("FAIL: %d violations\n", len(wants))
	if len(wants) == 1 {
		want = "FAIL: 1 violation\n"
	}
	if out := text(r); !strings.HasSuffix(out, want) {
		t.Errorf("text report does not end in %q:\n%s", want, out)
	}
}

func TestProductFilter(t *testing.T) {
	t.Parallel()
	onCleanShops(t, func(t *testing.T, s *seeder) {
		db := s.db
		s.order("s-7-1-dup", 101, 1, 1, "seckill", "pending", "")    // O1 on product 1
		s.exec("UPDATE products SET stock = stock - 1 WHERE id = 2") // I2, I3 on product 2
		s.exec("UPDATE wallets SET balance_cents = 1 WHERE user_id = 100")

		ctx := context.Background()
		all, err := audit.Check(ctx, db, audit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		assertViolations(t, all, []want{
			{inv: "O1", product: 1, user: 101, key: "order_no", values: []any{"s-7-1-dup", "s-101-1"}},
			{inv: "I2", product: 2, key: "stock", values: []any{17.0}},
			{inv: "I3", product: 2, key: "stock", values: []any{17.0}},
			{inv: "M1", user: 100, key: "balance_cents", values: []any{1.0}},
		})

		one, err := audit.Check(ctx, db, audit.Options{ProductID: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(one.Products) != 1 || one.Products[0].ProductID != 1 || one.Wallets != nil {
			t.Fatalf("product 1 only: products %+v wallets %+v", one.Products, one.Wallets)
		}
		assertViolations(t, one, []want{{inv: "O1", product: 1, user: 101, key: "order_no", values: []any{"s-7-1-dup", "s-101-1"}}})
		if j, _ := json.Marshal(one); bytes.Contains(j, []byte(`"wallets"`)) {
			t.Errorf("wallets in a product report: %s", j)
		}

		two, err := audit.Check(ctx, db, audit.Options{ProductID: 2})
		if err != nil {
			t.Fatal(err)
		}
		assertViolations(t, two, []want{
			{inv: "I2", product: 2, key: "stock", values: []any{17.0}},
			{inv: "I3", product: 2, key: "stock", values: []any{17.0}},
		})

		if _, err := audit.Check(ctx, db, audit.Options{ProductID: 404}); !errors.Is(err, audit.ErrNotFound) {
			t.Fatalf("unknown product: err %v, want ErrNotFound", err)
		}
	})
}

func TestMaxRowsCapsRowsNotCount(t *testing.T) {
	t.Parallel()
	db := backends[1].open(t)
	s := newSeeder(t, db)
	s.product(1, 100)
	for u := int64(1); u <= 3; u++ {
		s.order(fmt.Sprintf("s-%d-a", u), u, 1, 1, "seckill", "pending", "")
		s.order(fmt.Sprintf("s-%d-b", u), u, 1, 1, "seckill", "pending", "")
	}
	r, err := audit.Check(context.Background(), db, audit.Options{MaxRows: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Violations) != 1 {
		t.Fatalf("want one O1 violation for the product:\n%s", text(r))
	}
	v := r.Violations[0]
	if v.Invariant != "O1" || v.UserID != 0 || len(v.Rows) != 4 || !strings.HasSuffix(v.Detail, ": 6") {
		t.Fatalf("violation %+v", v)
	}
}

func TestStockMirror(t *testing.T) {
	t.Parallel()
	db := backends[1].open(t)
	s := newSeeder(t, db)
	for id := int64(1); id <= 6; id++ {
		s.product(id, 5)
	}
	type reading struct{ units, held int64 }
	var mu sync.Mutex
	calls := map[int64]int{}
	mirror := map[int64][]reading{
		1: {{4, 1}},         // a unit in flight: taken, held, not committed yet
		2: {{6, 0}},         // admits one too many
		3: nil,              // no mirror
		4: {{2, 1}},         // two units gone from the gate with no live hold: lost
		5: {{3, 3}},         // an order committed, its request not settled yet
		6: {{4, 0}, {5, 0}}, // a cancellation between the reads: fine on the second look
	}
	r, err := audit.Check(context.Background(), db, audit.Options{StockMirror: func(_ context.Context, id int64) (int64, int64, bool, error) {
		mu.Lock()
		defer mu.Unlock()
		rs := mirror[id]
		if len(rs) == 0 {
			return 0, 0, false, nil
		}
		v := rs[min(calls[id], len(rs)-1)]
		calls[id]++
		return v.units, v.held, true, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	assertViolations(t, r, []want{
		{inv: "R1", product: 2, key: "mirror", values: []any{6.0}},
		{inv: "R1", product: 4, key: "held", values: []any{1.0}},
	})
	if m := r.Products[0].Mirror; m == nil || *m != 4 || r.Products[2].Mirror != nil {
		t.Errorf("mirrors in summaries: %+v", r.Products)
	}
	for _, v := range r.Violations {
		if v.ProductID == 4 && !strings.Contains(v.Detail, "2 units lost") {
			t.Errorf("lost units detail: %q", v.Detail)
		}
	}

	boom := errors.New("redis down")
	if _, err := audit.Check(context.Background(), db, audit.Options{StockMirror: func(context.Context, int64) (int64, int64, bool, error) {
		return 0, 0, false, boom
	}}); !errors.Is(err, boom) {
		t.Fatalf("mirror error: %v", err)
	}
}

func text(r audit.Report) string {
	var b strings.Builder
	r.WriteText(&b)
	return b.String()
}
