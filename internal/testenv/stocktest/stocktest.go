// Package stocktest is the fixture the inventory and order tests share: one
// test's migrated database and Redis key prefix, and a stock service on them
// built the way one shop instance builds it. It imports inventory, so the
// order package's own (internal) tests can use it and inventory's external
// tests can too.
package stocktest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/platform"
	"github.com/seckill-lab/shop/internal/testenv"
	"github.com/seckill-lab/shop/internal/testenv/testdb"
)

// Fixture is one test's private database and Redis key prefix, shared by
// the instances the test builds on it.
type Fixture struct {
	DB     *gorm.DB
	RDB    redis.UniversalClient
	Prefix string
	db     *platform.DB
}

// New gives the test a fresh migrated MySQL database and Redis prefix.
func New(t testing.TB) *Fixture {
	t.Helper()
	rdb, prefix := testenv.RedisClient(t)
	db := testdb.MigratedMySQL(t)
	return &Fixture{DB: db.DB, RDB: rdb, Prefix: prefix, db: db}
}

// Packets is a packet writer on the fixture's database, as a shop opens
// one (SHOP_DB_PACKETS), closed at cleanup.
func (f *Fixture) Packets(t testing.TB) *dbx.Writer {
	t.Helper()
	w, err := f.db.Packets(context.Background(), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// Discard is the logger of services under test.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// Inventory is one instance's stock service: its own lock client (closed at
// cleanup) and metrics registry, on the fixture's database and prefix. A
// zero LockTTL or LockWait is 5s or 30s; a zero KeepBatches and KeepFor
// are the shop's defaults (16, 50ms): holds are kept as in a shop.
func (f *Fixture) Inventory(t testing.TB, cfg inventory.Config) (*inventory.Service, *prometheus.Registry) {
	t.Helper()
	locks := lockx.New(f.RDB, lockx.Options{Prefix: f.Prefix + "lock:"})
	t.Cleanup(func() { locks.Close() })
	if cfg.LockTTL == 0 {
		cfg.LockTTL = 5 * time.Second
	}
	if cfg.LockWait == 0 {
		cfg.LockWait = 30 * time.Second
	}
	if cfg.KeepBatches == 0 && cfg.KeepFor == 0 {
		cfg.KeepBatches, cfg.KeepFor = 16, 50*time.Millisecond
	}
	cfg.KeyPrefix = f.Prefix
	reg := prometheus.NewRegistry()
	return inventory.New(f.DB, locks, f.RDB, cfg, inventory.NewMetrics(reg), Discard()), reg
}

// Markers are order's processed markers under the fixture's prefix.
func (f *Fixture) Markers() *idem.Markers {
	return idem.NewMarkers(f.RDB, f.Prefix+"done:", time.Hour)
}

// Product creates a product of stock units at price cents.
func (f *Fixture) Product(t testing.TB, inv *inventory.Service, price, stock int64) int64 {
	t.Helper()
	p, created, err := inv.Create(context.Background(), "widget", price, stock, true, "", "")
	if err != nil || !created {
		t.Fatalf("create product: %v (created %v)", err, created)
	}
	return p.ID
}

// Count runs a query that returns one number.
func (f *Fixture) Count(t testing.TB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := f.DB.Raw(q, args...).Row().Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}
