package audit_test

import (
	"path/filepath"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/testenv"
	"github.com/seckill-lab/shop/internal/testenv/testdb"
)

// backends are the databases every test runs against.
var backends = []struct {
	name string
	open func(t testing.TB) *gorm.DB
}{
	{"mysql", func(t testing.TB) *gorm.DB { return openDB(t, testenv.MySQL(t), "") }},
	{"sqlite", func(t testing.TB) *gorm.DB { return openDB(t, "", filepath.Join(t.TempDir(), "shop.db")) }},
}

func openDB(t testing.TB, dsn, path string) *gorm.DB { return testdb.Open(t, dsn, path).DB }

// seeder writes rows the way the shop does (every stock change with its
// ledger row, every payment with its debit) unless a test says otherwise.
type seeder struct {
	t   testing.TB
	db  *gorm.DB
	now time.Time
}

// onCleanShops runs fn, in parallel, on a clean shop of each backend
// (s.db is its database).
func onCleanShops(t *testing.T, fn func(t *testing.T, s *seeder)) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			s := newSeeder(t, be.open(t))
			s.clean()
			fn(t, s)
		})
	}
}

func newSeeder(t testing.TB, db *gorm.DB) *seeder {
	return &seeder{t: t, db: db, now: time.Now().UTC()}
}

func (s *seeder) exec(q string, args ...any) {
	s.t.Helper()
	if err := s.db.Exec(q, args...).Error; err != nil {
		s.t.Fatalf("%v\n%s", err, q)
	}
}

// product creates product id with stock units and its create ledger row.
func (s *seeder) product(id, stock int64) {
	s.t.Helper()
	s.exec("INSERT INTO products (id, name, price_cents, stock, created_at, updated_at) VALUES (?, ?, 100, ?, ?, ?)",
		id, "p", stock, s.now, s.now)
	s.ledger(id, stock, "create", nil)
}

func (s *seeder) restock(id, q int64, ref string) {
	s.t.Helper()
	s.exec("UPDATE products SET stock = stock + ? WHERE id = ?", q, id)
	s.exec("INSERT INTO stock_ledger (product_id, delta, reason, ref, created_at) VALUES (?, ?, 'restock', ?, ?)", id, q, ref, s.now)
}

func (s *seeder) ledger(productID, delta int64, reason string, orderNo *string) {
	s.t.Helper()
	s.exec("INSERT INTO stock_ledger (product_id, delta, reason, order_no, created_at) VALUES (?, ?, ?, ?, ?)",
		productID, delta, reason, orderNo, s.now)
}

// orderRow inserts only the order row.
func (s *seeder) orderRow(no string, user, product, qty int64, kind, status, idemKey string) {
	s.t.Helper()
	var key *string
	if idemKey != "" {
		key = &idemKey
	}
	s.exec(`INSERT INTO orders (order_no, user_id, product_id, quantity, amount_cents, kind, status, idem_key, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, no, user, product, qty, qty*100, kind, status, key, s.now, s.now)
}

// order places an order as the shop does: row, stock taken, ledger row; a
// cancelled one also gets its stock back.
func (s *seeder) order(no string, user, product, qty int64, kind, status, idemKey string) {
	s.t.Helper()
	s.orderRow(no, user, product, qty, kind, status, idemKey)
	s.exec("UPDATE products SET stock = stock - ? WHERE id = ?", qty, product)
	s.ledger(product, -qty, "order", &no)
	if status == "cancelled" {
		s.exec("UPDATE products SET stock = stock + ? WHERE id = ?", qty, product)
		s.ledger(product, qty, "cancel", &no)
	}
}

// wallet creates user's wallet credited with cents.
func (s *seeder) wallet(user, cents int64) {
	s.t.Helper()
	s.exec("INSERT INTO wallets (user_id, balance_cents, created_at, updated_at) VALUES (?, ?, ?, ?)", user, cents, s.now, s.now)
	s.exec("INSERT INTO wallet_ledger (user_id, delta, reason, ref, created_at) VALUES (?, ?, 'credit', ?, ?)",
		user, cents, "credit-"+testenv.Random(4), s.now)
}

// pay records the payment of order no (amount qty*100) and debits the wallet;
// it does not touch the order's status.
func (s *seeder) pay(no string, user, cents int64) {
	s.t.Helper()
	s.exec("INSERT INTO payments (request_id, order_no, user_id, amount_cents, created_at) VALUES (?, ?, ?, ?, ?)",
		"req-"+no, no, user, cents, s.now)
	s.exec("UPDATE wallets SET balance_cents = balance_cents - ? WHERE user_id = ?", cents, user)
	s.exec("INSERT INTO wallet_ledger (user_id, delta, reason, ref, created_at) VALUES (?, ?, 'payment', ?, ?)", user, -cents, no, s.now)
}

// paidOrder places an order and pays it.
func (s *seeder) paidOrder(no string, user, product, qty int64, kind, idemKey string) {
	s.t.Helper()
	s.order(no, user, product, qty, kind, "paid", idemKey)
	s.pay(no, user, qty*100)
}

// clean seeds a consistent shop: two products with restocks, every kind and
// status of order, wallets with payments.
func (s *seeder) clean() {
	s.t.Helper()
	s.product(1, 10)
	s.product(2, 5)
	s.restock(2, 20, "restock-2-a")
	s.wallet(100, 10_000)
	s.wallet(101, 500)
	s.order("s-100-1", 100, 1, 1, "seckill", "pending", "")
	s.paidOrder("s-101-1", 101, 1, 1, "seckill", "")
	s.order("s-102-1", 102, 1, 1, "seckill", "cancelled", "")
	s.paidOrder("r-100-a", 100, 2, 3, "regular", "key-a")
	s.order("r-100-b", 100, 2, 2, "regular", "cancelled", "key-b")
	s.order("r-101-a", 101, 2, 4, "regular", "pending", "key-a") // same key, other user: fine
}
