package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/grace"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/payment"
	"github.com/seckill-lab/shop/internal/platform"
)

// services are the domain objects of one shop instance.
type services struct {
	db       *platform.DB
	packets  *dbx.Writer // nil: off
	locks    *lockx.Client
	products *inventory.Service
	orders   *order.Service
	queue    *queueMode // nil: the synchronous seckill mode
	payments *payment.Service
	idem     *idem.Store
	tokens   *idem.Tokens
}

func newServices(c platform.Config, db *platform.DB, rdb *platform.Redis, reg prometheus.Registerer, log *slog.Logger) *services {
	lockMetrics := lockx.NewMetrics("shop")
	idemMetrics := idem.NewMetrics("shop")
	reg.MustRegister(lockMetrics, idemMetrics)
	locks := lockx.New(rdb, lockx.Options{Prefix: c.RedisPrefix + "lock:", Metrics: lockMetrics, Logger: log, WaitReplicas: int(c.LockReplicas)})
	products := inventory.New(db.DB, locks, rdb, inventory.Config{
		Strategy: c.StockStrategy, LockTTL: c.LockTTL, LockWait: c.LockWait,
		KeyPrefix: c.RedisPrefix, Queued: c.SeckillMode == platform.SeckillQueue, SoldOutRecheck: c.SoldOutCache, PauseAfterLock: c.LabPauseAfterLock, PauseProbability: c.LabPauseProbability,
		Buckets: int(c.StockBuckets), HomeBucket: int(c.HomeBucket), KeepBatches: int(c.KeepBatches), KeepFor: c.KeepFor,
	}, inventory.NewMetrics(reg), log)
	var packets *dbx.Writer
	if c.DBPackets {
		var err error
		if packets, err = db.Packets(context.Background(), int(c.DBMaxConns)); err != nil {
			log.Warn("batch packets off: their pool did not open; each statement is its own round trip", "err", err)
		}
	}
	markers := idem.NewMarkers(rdb.PerRequest(), c.RedisPrefix+"done:", c.IdemRetention)
	orders := order.New(db.DB, products, markers, order.Config{
		BatchMax: int(c.BatchMax), BatchWindow: c.BatchWindow, UnpaidLimit: c.UnpaidUnits, NoIdempotency: c.LabNoIdempotency, Packets: packets,
	}, order.NewMetrics(reg), log)
	payments := payment.New(db.DB, locks, payment.Config{LockTTL: c.LockTTL, LockWait: c.LockWait, SlowPayment: c.LabSlowPayment},
		payment.NewMetrics(reg), log)
	return &services{
		db: db, locks: locks, packets: packets, products: products, orders: orders, payments: payments, queue: newQueueMode(c, orders, rdb, reg, log),
		idem:   idem.NewStore(rdb, idem.StoreOptions{Prefix: c.RedisPrefix + "idem:", Lease: c.IdemLease, Retention: c.IdemRetention, Keep: grace.Keep, Metrics: idemMetrics}),
		tokens: idem.NewTokens(rdb, c.RedisPrefix+"form:", 5*time.Minute).WithMetrics(idemMetrics),
	}
}

func (s *services) audit(ctx context.Context, o audit.Options) (audit.Report, error) {
	o.StockMirror = s.products.GateLevel
	return audit.Check(ctx, s.db.DB, o)
}

// close waits for order batches still running, then stops the lock client.
func (s *services) close() {
	if s.queue != nil {
		s.queue.close()
	}
	s.orders.Wait()
	if s.packets != nil {
		_ = s.packets.Close()
	}
	_ = s.locks.Close()
}
