package app

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/platform"
	"github.com/seckill-lab/shop/internal/queue"
)

// queueMode is the queued seckill mode of one instance: the order book's
// queued side, its consumer loop (nil: this instance does not consume) and
// what to close at the end.
type queueMode struct {
	queued  *order.Queued
	consume func(ctx context.Context)
	close   func()
}

// newQueueMode builds the queued mode from c, or returns nil in the sync
// mode. The consumer runs in every instance (SHOP_QUEUE_CONSUME): its
// messages are placed by this instance's coalescer, in the same fenced
// batches as its own requests, and a hot sale's consumers scale with its
// instances; one process kind to deploy and to kill in the harness.
func newQueueMode(c platform.Config, orders *order.Service, rdb *platform.Redis, reg prometheus.Registerer, log *slog.Logger) *queueMode {
	if c.SeckillMode != platform.SeckillQueue {
		return nil
	}
	qcfg := queue.Config{URL: c.AMQPURL, Queue: c.QueueName, Prefetch: int(c.QueuePrefetch), AutoAck: c.LabQueueShortcut == "auto-ack", Log: log}
	ocfg := order.QueuedConfig{Lease: c.QueueLease, ConfirmTimeout: c.QueueConfirmTimeout, RejectedRetention: c.IdemRetention,
		KeyPrefix: c.RedisPrefix, NoOrderNo: c.LabQueueShortcut == "no-order-no"}
	m := &queueMode{}
	var pub order.Publisher
	if c.LabQueueShortcut == "in-process" {
		ch := queue.NewInProcess(int(c.QueuePrefetch) * 64)
		pub, m.close = ch, func() {}
		m.consume = func(ctx context.Context) { ch.Consume(ctx, int(c.QueuePrefetch), m.take) }
	} else {
		p := queue.NewPublisher(qcfg)
		pub, m.close = p, p.Close
		m.consume = func(ctx context.Context) { queue.Consume(ctx, qcfg, m.take) }
	}
	m.queued = orders.Queued(pub, rdb, ocfg, order.NewQueueMetrics(reg))
	if !c.QueueConsume {
		m.consume = nil
	}
	return m
}

func (m *queueMode) take(ctx context.Context, d queue.Delivery) bool {
	return m.queued.Take(ctx, d.Body, d.Redelivered)
}
