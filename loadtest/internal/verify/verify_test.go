package verify

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/internal/testenv"
	"github.com/seckill-lab/shop/internal/testenv/testdb"
)

// The checker must be able to fail: each case seeds a clean shop, breaks one
// thing the way a broken shop would, and expects the harness's verdict to
// name the invariant, with rows.

var dbs = []struct {
	name string
	open func(t *testing.T) *gorm.DB
}{
	{"mysql", func(t *testing.T) *gorm.DB { return openDB(t, testenv.MySQL(t), "") }},
	{"sqlite", func(t *testing.T) *gorm.DB { return openDB(t, "", filepath.Join(t.TempDir(), "shop.db")) }},
}

func openDB(t *testing.T, dsn, path string) *gorm.DB { return testdb.Open(t, dsn, path).DB }

// shop writes rows as the shop does, so a test breaks exactly one thing.
type shop struct {
	t   *testing.T
	db  *gorm.DB
	now time.Time
}

func (s *shop) exec(q string, args ...any) {
	s.t.Helper()
	if err := s.db.Exec(q, args...).Error; err != nil {
		s.t.Fatalf("%v\n%s", err, q)
	}
}

func (s *shop) product(id, stock int64) {
	s.t.Helper()
	s.exec("INSERT INTO products (id, name, price_cents, stock, created_at, updated_at) VALUES (?, 'p', 100, ?, ?, ?)", id, stock, s.now, s.now)
	s.exec("INSERT INTO stock_ledger (product_id, delta, reason, created_at) VALUES (?, ?, 'create', ?)", id, stock, s.now)
}

// bucketed creates product id held in two stock buckets (docs chapter 9):
// one unit on its products row (bucket 0), two in bucket 1.
func (s *shop) bucketed(id int64) {
	s.t.Helper()
	s.exec("INSERT INTO products (id, name, price_cents, stock, buckets, created_at, updated_at) VALUES (?, 'p', 100, 1, 2, ?, ?)", id, s.now, s.now)
	s.exec("INSERT INTO stock_buckets (product_id, bucket, stock) VALUES (?, 1, 2)", id)
	s.exec("INSERT INTO stock_ledger (product_id, delta, reason, created_at) VALUES (?, 3, 'create', ?)", id, s.now)
}

// bucketOrder places a seckill order taken from one bucket under its fence.
func (s *shop) bucketOrder(no string, user, product int64, bucket int, fence int64) {
	s.t.Helper()
	s.exec(`INSERT INTO orders (order_no, user_id, product_id, quantity, amount_cents, kind, status, created_at, updated_at)
VALUES (?, ?, ?, 1, 100, 'seckill', 'pending', ?, ?)`, no, user, product, s.now, s.now)
	if bucket == 0 {
		s.exec("UPDATE products SET stock = stock - 1 WHERE id = ?", product)
	} else {
		s.exec("UPDATE stock_buckets SET stock = stock - 1 WHERE product_id = ? AND bucket = ?", product, bucket)
	}
	s.exec("INSERT INTO stock_ledger (product_id, delta, reason, order_no, fence, bucket, created_at) VALUES (?, -1, 'order', ?, ?, ?, ?)", product, no, fence, bucket, s.now)
}

// order places an order: row, stock taken with the fence, ledger row.
func (s *shop) order(no string, user, product, qty int64, kind, status string, fence int64) {
	s.t.Helper()
	var key any
	if kind == "regular" {
		key = "key-" + no
	}
	s.exec(`INSERT INTO orders (order_no, user_id, product_id, quantity, amount_cents, kind, status, idem_key, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, no, user, product, qty, qty*100, kind, status, key, s.now, s.now)
	s.exec("UPDATE products SET stock = stock - ? WHERE id = ?", qty, product)
	s.exec("INSERT INTO stock_ledger (product_id, delta, reason, order_no, fence, created_at) VALUES (?, ?, 'order', ?, ?, ?)", product, -qty, no, fence, s.now)
}

func (s *shop) wallet(user, cents int64) {
	s.t.Helper()
	s.exec("INSERT INTO wallets (user_id, balance_cents, created_at, updated_at) VALUES (?, ?, ?, ?)", user, cents, s.now, s.now)
	s.exec("INSERT INTO wallet_ledger (user_id, delta, reason, ref, created_at) VALUES (?, ?, 'credit', ?, ?)", user, cents, "credit-"+testenv.Random(4), s.now)
}

func (s *shop) pay(no string, user, cents int64) {
	s.t.Helper()
	s.exec("UPDATE orders SET status = 'paid', paid_at = ? WHERE order_no = ?", s.now, no)
	s.exec("INSERT INTO payments (request_id, order_no, user_id, amount_cents, created_at) VALUES (?, ?, ?, ?, ?)", "req-"+no, no, user, cents, s.now)
	s.exec("UPDATE wallets SET balance_cents = balance_cents - ? WHERE user_id = ?", cents, user)
	s.exec("INSERT INTO wallet_ledger (user_id, delta, reason, ref, created_at) VALUES (?, ?, 'payment', ?, ?)", user, -cents, no, s.now)
}

// clean: product 1 (5 units) with two seckill orders, one paid; product 2
// (10 units) with a regular order of 3.
func (s *shop) clean() {
	s.product(1, 5)
	s.product(2, 10)
	s.wallet(11, 1000)
	s.order("S-11", 11, 1, 1, "seckill", "pending", 1)
	s.order("S-12", 12, 1, 1, "seckill", "pending", 2)
	s.order("R-11", 11, 2, 3, "regular", "pending", 1)
	s.pay("S-11", 11, 100)
}

// acks are the clients' records of the clean shop.
func acks(base time.Time) []loadgen.Record {
	rec := func(op, no string, user, product, qty int64, status int) loadgen.Record {
		return loadgen.Record{Op: op, UserID: user, ProductID: product, Quantity: qty, Status: status, OrderNo: no,
			OrderQuantity: qty, OrderUserID: user, OrderProduct: product, Start: base, End: base.Add(time.Millisecond)}
	}
	return []loadgen.Record{
		rec(loadgen.OpSeckill, "S-11", 11, 1, 1, 201),
		rec(loadgen.OpSeckill, "S-12", 12, 1, 1, 201),
		rec(loadgen.OpOrder, "R-11", 11, 2, 3, 201),
	}
}

func TestCheckerFlagsBrokenShops(t *testing.T) {
	cases := []struct {
		name    string
		breakIt func(s *shop) // nil: the clean shop
		recs    func(base time.Time) []loadgen.Record
		want    []string
		check   func(t *testing.T, v Verdict)
	}{
		{name: "clean shop passes"},
		{
			name: "oversell (lost update: more orders than units)",
			breakIt: func(s *shop) {
				s.product(3, 2)
				s.exec("UPDATE products SET stock = 100 WHERE id = 3") // the CHECK (stock >= 0) would stop the third
				s.order("S-31", 31, 3, 1, "seckill", "pending", 1)
				s.order("S-32", 32, 3, 1, "seckill", "pending", 2)
				s.order("S-33", 33, 3, 1, "seckill", "pending", 3)
				s.exec("UPDATE products SET stock = 0 WHERE id = 3") // a read-modify-write overwrote the count
			},
			want:  []string{"I2", "I3"},
			check: func(t *testing.T, v Verdict) { want(t, "oversold", v.Counts.Oversold, 1) },
		},
		{
			name: "duplicate seckill order",
			breakIt: func(s *shop) {
				s.order("S-12-again", 12, 1, 1, "seckill", "pending", 3)
			},
			want:  []string{"O1"},
			check: func(t *testing.T, v Verdict) { want(t, "duplicates", v.Counts.Duplicates, 1) },
		},
		{
			name:    "paid order without a payment",
			breakIt: func(s *shop) { s.exec("UPDATE orders SET status = 'paid' WHERE order_no = 'S-12'") },
			want:    []string{"M1"},
		},
		{
			name:    "wallet balance not the ledger's (a double charge that skipped the ledger)",
			breakIt: func(s *shop) { s.exec("UPDATE wallets SET balance_cents = balance_cents - 100 WHERE user_id = 11") },
			want:    []string{"M1"},
		},
		{
			name:    "stock not the ledger's sum",
			breakIt: func(s *shop) { s.exec("UPDATE products SET stock = stock + 1 WHERE id = 2") },
			want:    []string{"I2", "I3"},
		},
		{
			name: "201 whose order the database does not have",
			recs: func(base time.Time) []loadgen.Record {
				return append(acks(base), loadgen.Record{Op: loadgen.OpSeckill, UserID: 13, ProductID: 1, Quantity: 1, Status: 201,
					OrderNo: "S-13-lost", Start: base, End: base.Add(time.Millisecond)})
			},
			want:  []string{"O3"},
			check: func(t *testing.T, v Verdict) { want(t, "lost acks", int64(v.Counts.LostAcks), 1) },
		},
		{
			name: "stock write with a stale fencing token",
			breakIt: func(s *shop) {
				s.order("S-14", 14, 1, 1, "seckill", "pending", 9)
				s.order("S-15", 15, 1, 1, "seckill", "pending", 4) // a holder past its lease wrote after fence 9
			},
			want: []string{"L2"},
		},
		{
			name: "stock buckets: each bucket's fence counter rises on its own",
			breakIt: func(s *shop) {
				s.bucketed(4)
				s.bucketOrder("S-41", 41, 4, 0, 9)
				s.bucketOrder("S-42", 42, 4, 1, 2) // bucket 1's own counter: no L2
			},
		},
		{
			name: "stock buckets: a stale fence within one bucket",
			breakIt: func(s *shop) {
				s.bucketed(4)
				s.bucketOrder("S-41", 41, 4, 1, 9)
				s.bucketOrder("S-42", 42, 4, 0, 1)
				s.bucketOrder("S-43", 43, 4, 1, 4) // bucket 1 after its fence 9
			},
			want: []string{"L2"},
		},
		{
			name: "sold out while stock was left (undersell)",
			recs: func(base time.Time) []loadgen.Record {
				return append(acks(base), loadgen.Record{Op: loadgen.OpSeckill, UserID: 16, ProductID: 1, Quantity: 1, Status: 409,
					Code: "sold_out", Start: base, End: base.Add(time.Millisecond)})
			},
			want:  []string{"O5", loadgen.LIN},
			check: func(t *testing.T, v Verdict) { want(t, "linearizable", linearInt(v.Linearizable), 0) },
		},
	}
	for _, db := range dbs {
		for _, c := range cases {
			t.Run(db.name+"/"+c.name, func(t *testing.T) {
				s := &shop{t: t, db: db.open(t), now: time.Now().UTC().Truncate(time.Microsecond)}
				s.clean()
				if c.breakIt != nil {
					c.breakIt(s)
				}
				base := time.Now()
				recs := acks(base)
				if c.recs != nil {
					recs = c.recs(base)
				}
				v, err := DB(context.Background(), s.db, CheckInput{Records: recs, Products: map[int64]int64{1: 5, 2: 10, 3: 2}, Linear: &loadgen.LinearOptions{}})
				if err != nil {
					t.Fatal(err)
				}
				got := v.Invariants()
				if c.want == nil && len(got) > 0 {
					t.Fatalf("clean shop: violations %v: %+v", got, v.Violations)
				}
				if c.want == nil && linearInt(v.Linearizable) != 1 {
					t.Fatalf("clean shop: histories not linearizable: %+v", v.Linear)
				}
				for _, w := range c.want {
					if !slices.Contains(got, w) {
						t.Errorf("want %s among the violations, got %v: %+v", w, got, v.Violations)
					}
				}
				for _, x := range v.Violations {
					if len(x.Rows) == 0 {
						t.Errorf("%s violation without rows: %+v", x.Invariant, x)
					}
				}
				if c.check != nil {
					c.check(t, v)
				}
			})
		}
	}
}

// linearInt is a verdict as a number: 1 linearizable, 0 not, -1 unknown.
func linearInt(b *bool) int64 {
	switch {
	case b == nil:
		return -1
	case *b:
		return 1
	}
	return 0
}

func want(t *testing.T, what string, got, w int64) {
	t.Helper()
	if got != w {
		t.Errorf("%s = %d, want %d", what, got, w)
	}
}
