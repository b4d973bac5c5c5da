package order_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/testenv"
	"github.com/seckill-lab/shop/internal/testenv/testdb"
)

// commandCounter counts the commands a Redis client sends.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// countStatements counts every statement gorm sends on db.
func countStatements(t *testing.T, db *gorm.DB) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	count := func(*gorm.DB) { n.Add(1) }
	cb := db.Callback()
	for _, err := range []error{
		cb.Query().Before("gorm:query").Register("test:count", count),
		cb.Row().Before("gorm:row").Register("test:count", count),
		cb.Raw().Before("gorm:raw").Register("test:count", count),
		cb.Create().Before("gorm:create").Register("test:count", count),
		cb.Update().Before("gorm:update").Register("test:count", count),
		cb.Delete().Before("gorm:delete").Register("test:count", count),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return &n
}

// The sold-out path touches neither Redis nor the database: a refusal is a
// map lookup and a repeat buyer one point read. A Redis FLUSHALL after the
// sell-out changes nothing for a repeat buyer, in this instance or in a new
// one that never saw the sale.
func TestSoldOutPathTouchesNothingAndSurvivesFlushall(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	opt, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	redisCmds := &commandCounter{}
	rdb.AddHook(redisCmds)
	db := testdb.MigratedMySQL(t).DB
	sql := countStatements(t, db)
	newShop := func() *order.Service {
		locks := lockx.New(rdb, lockx.Options{Prefix: "lock:"})
		t.Cleanup(func() { locks.Close() })
		inv := inventory.New(db, locks, rdb, inventory.Config{Strategy: inventory.LockFence, LockTTL: 5 * time.Second, LockWait: 5 * time.Second, SoldOutRecheck: time.Hour},
			nil, discard())
		s := order.New(db, inv, idem.NewMarkers(rdb, "done:", time.Hour), order.Config{BatchMax: 64},
			order.NewMetrics(prometheus.NewRegistry()), discard())
		t.Cleanup(s.Wait)
		return s
	}
	s := newShop()
	ctx := context.Background()
	p, _, err := inventory.New(db, nil, rdb, inventory.Config{}, nil, discard()).Create(ctx, "last one", 100, 1, true, "", "")
	if err != nil {
		t.Fatal(err)
	}
	first, created, err := s.Seckill(ctx, 1, p.ID)
	if err != nil || !created {
		t.Fatalf("the one unit: created %v, %v", created, err)
	}
	s.Wait() // the batch's markers are written

	redisCmds.n.Store(0)
	sql.Store(0)
	for u := range int64(100) {
		if _, _, err := s.Seckill(ctx, 1000+u, p.ID); !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("buyer %d after the sell-out: %v, want ErrSoldOut", 1000+u, err)
		}
	}
	if r, q := redisCmds.n.Load(), sql.Load(); r != 0 || q != 0 {
		t.Errorf("100 sold-out refusals sent %d Redis commands and %d SQL statements; want 0 and 0", r, q)
	}
	again, created, err := s.Seckill(ctx, 1, p.ID)
	if err != nil || created || again.OrderNo != first.OrderNo {
		t.Fatalf("repeat buyer: %s created %v, %v; want %s replayed", again.OrderNo, created, err, first.OrderNo)
	}
	if r, q := redisCmds.n.Load(), sql.Load(); r != 0 || q != 1 {
		t.Errorf("a repeat buyer after the sell-out sent %d Redis commands and %d SQL statements; want 0 and 1", r, q)
	}

	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for name, shop := range map[string]*order.Service{"same instance": s, "new instance": newShop()} {
		again, created, err := shop.Seckill(ctx, 1, p.ID)
		if err != nil || created || again.OrderNo != first.OrderNo {
			t.Errorf("%s, repeat buyer after FLUSHALL: %s created %v, %v; want %s replayed", name, again.OrderNo, created, err, first.OrderNo)
		}
		if _, _, err := shop.Seckill(ctx, 5000, p.ID); !errors.Is(err, inventory.ErrSoldOut) {
			t.Errorf("%s, new buyer after FLUSHALL: %v, want ErrSoldOut", name, err)
		}
	}
	var orders int64
	db.Raw("SELECT COUNT(*) FROM orders WHERE product_id = ?", p.ID).Row().Scan(&orders)
	if orders != 1 {
		t.Errorf("orders = %d, want 1", orders)
	}
}

// A restock reopens a sold-out product in every instance at once (the
// stock-returned channel), and with no message at all within
// SoldOutRecheck (one re-read of the product row).
func TestSoldOutEndsOnRestock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := f.shop(t), f.shop(t)
	go a.inv.Follow(ctx)
	id := f.product(t, a, 1)
	if _, _, err := a.orders.Seckill(ctx, 1, id); err != nil {
		t.Fatal(err)
	}
	for _, s := range []shop{a, b} {
		if _, _, err := s.orders.Seckill(ctx, 2, id); !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("sold out: %v", err)
		}
		if !s.orders.CheckSeckill(ctx, 0, id).SoldOut() {
			t.Fatal("the instance did not learn the sell-out")
		}
	}
	channel := f.Prefix + "soldout:reset"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if subs, _ := f.RDB.PubSubNumSub(ctx, channel).Result(); subs[channel] >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("instance a did not subscribe")
		}
	}
	if _, _, err := b.inv.Restock(ctx, id, 2, "r1", ""); err != nil {
		t.Fatal(err)
	}
	// a follows the channel: it sells at once. b does not follow: it sells
	// once its book aged past SoldOutRecheck (1s in the fixture), and a
	// regular order (which never reads the seckill buyers) rechecks too.
	start := time.Now()
	for _, tc := range []struct {
		s       shop
		user    int64
		by      time.Duration
		regular bool
	}{{a, 3, time.Second, false}, {b, 4, 3 * time.Second, true}} {
		for {
			var created bool
			var err error
			if tc.regular {
				_, created, err = tc.s.orders.Regular(ctx, tc.user, id, 1, "after-restock", "h")
			} else {
				_, created, err = tc.s.orders.Seckill(ctx, tc.user, id)
			}
			if err == nil && created {
				break
			}
			if time.Since(start) > tc.by {
				t.Fatalf("user %d still refused %v after the restock: %v", tc.user, time.Since(start), err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// Under redis-gate the gate turns buyers away before any batch sees the
// empty row (the batch that took the last units wrote without reading
// it), so the first refusal must teach the book, or every later refusal
// costs a Redis call and a database read.
func TestSoldOutLearnedFromGateRefusal(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	inv, _ := f.Inventory(t, inventory.Config{Strategy: inventory.RedisGate, SoldOutRecheck: time.Hour})
	s := order.New(f.DB, inv, f.Markers(), order.Config{BatchMax: 64, Packets: f.Packets(t)}, order.NewMetrics(prometheus.NewRegistry()), discard())
	t.Cleanup(s.Wait)
	ctx := context.Background()
	id := f.Product(t, inv, 250, 2)
	for u := range int64(2) {
		if _, created, err := s.Seckill(ctx, 1+u, id); err != nil || !created {
			t.Fatalf("buyer %d: created %v, %v", 1+u, created, err)
		}
	}
	if _, _, err := s.Seckill(ctx, 3, id); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("buyer 3: %v, want ErrSoldOut", err)
	}
	if !s.CheckSeckill(ctx, 0, id).SoldOut() {
		t.Fatal("a refusal by the gate did not teach the sold-out book")
	}
	// A fresh instance after Redis lost everything (markers, gate): the
	// gate, reseeded from the database, refuses before any batch looks
	// for the order; the buyer still gets it.
	first, err := s.Get(ctx, 1, order.SeckillNo(1, id))
	if err != nil {
		t.Fatal(err)
	}
	f.deleteKeys(t)
	freshInv, _ := f.Inventory(t, inventory.Config{Strategy: inventory.RedisGate, SoldOutRecheck: time.Hour})
	fresh := order.New(f.DB, freshInv, f.Markers(), order.Config{BatchMax: 64}, order.NewMetrics(prometheus.NewRegistry()), discard())
	t.Cleanup(fresh.Wait)
	again, created, err := fresh.Seckill(ctx, 1, id)
	if err != nil || created || again.OrderNo != first.OrderNo {
		t.Fatalf("repeat buyer after Redis lost its keys: %s created %v, %v; want %s replayed", again.OrderNo, created, err, first.OrderNo)
	}
}
