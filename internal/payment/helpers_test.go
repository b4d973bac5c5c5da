package payment_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/payment"
	"github.com/seckill-lab/shop/internal/platform"
	"github.com/seckill-lab/shop/internal/testenv"
	"github.com/seckill-lab/shop/internal/testenv/testdb"
)

var bg = context.Background()

// shop is one test's services on a private MySQL database and Redis prefix.
type shop struct {
	t        testing.TB
	db       *gorm.DB
	locks    *lockx.Client
	lockReg  *prometheus.Registry
	products *inventory.Service
	orders   *order.Service
	pay      *payment.Service
}

// newShop builds the services; at cleanup (before the database is dropped)
// it runs the audit, the check behind `shop verify`, and fails on violations.
func newShop(t testing.TB, cfg payment.Config) *shop {
	t.Helper()
	db := testdb.MigratedMySQL(t)
	url, prefix := testenv.Redis(t)
	log := slog.New(slog.DiscardHandler)
	rdb, err := platform.OpenRedis(url, "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	lm := lockx.NewMetrics("shop")
	reg := prometheus.NewRegistry()
	reg.MustRegister(lm)
	locks := lockx.New(rdb, lockx.Options{Prefix: prefix + "lock:", Metrics: lm})
	t.Cleanup(func() { _ = locks.Close() })
	if cfg.LockTTL == 0 {
		cfg.LockTTL = 2 * time.Second
	}
	if cfg.LockWait == 0 {
		cfg.LockWait = 10 * time.Second
	}
	inv := inventory.New(db.DB, locks, rdb, inventory.Config{LockTTL: 2 * time.Second, LockWait: 10 * time.Second, KeyPrefix: prefix}, nil, log)
	orders := order.New(db.DB, inv, idem.NewMarkers(rdb, prefix+"done:", time.Hour), order.Config{}, nil, log)
	s := &shop{t: t, db: db.DB, locks: locks, lockReg: reg, products: inv, orders: orders,
		pay: payment.New(db.DB, locks, cfg, nil, log)}
	t.Cleanup(func() { s.mustAudit() })
	return s
}

// mustAudit fails the test on any invariant violation (shop verify).
func (s *shop) mustAudit() {
	s.t.Helper()
	r, err := audit.Check(bg, s.db, audit.Options{})
	if err != nil {
		s.t.Fatalf("audit: %v", err)
	}
	if !r.OK {
		s.t.Errorf("audit found violations: %+v", r.Violations)
	}
}

func (s *shop) product(price, stock int64) inventory.Product {
	s.t.Helper()
	p, _, err := s.products.Create(bg, "widget", price, stock, false, "", "")
	if err != nil {
		s.t.Fatal(err)
	}
	return p
}

func (s *shop) order(user, productID int64) order.Order {
	s.t.Helper()
	o, _, err := s.orders.Regular(bg, user, productID, 1, "k-"+testenv.Random(8), "")
	if err != nil {
		s.t.Fatal(err)
	}
	return o
}

func (s *shop) credit(user, cents int64) payment.Wallet {
	s.t.Helper()
	w, _, err := s.pay.Credit(bg, user, cents, payment.CreditRef("admin", user, "c-"+testenv.Random(6)), "")
	if err != nil {
		s.t.Fatal(err)
	}
	return w
}

func (s *shop) balance(user int64) int64 {
	s.t.Helper()
	w, err := s.pay.Wallet(bg, user)
	if err != nil {
		s.t.Fatal(err)
	}
	return w.BalanceCents
}

func (s *shop) count(query string, args ...any) int64 {
	s.t.Helper()
	var n int64
	if err := s.db.Raw(query, args...).Scan(&n).Error; err != nil {
		s.t.Fatal(err)
	}
	return n
}

func (s *shop) orderNow(no string) order.Order {
	s.t.Helper()
	o, err := order.GetTx(s.db, no)
	if err != nil {
		s.t.Fatal(err)
	}
	return o
}

// lockMetric reads one lockx counter (e.g. "shop_lock_renewals_total").
func (s *shop) lockMetric(name string) float64 {
	s.t.Helper()
	mfs, err := s.lockReg.Gather()
	if err != nil {
		s.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var v float64
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue()
		}
		return v
	}
	return 0
}
