package order_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/queue"
	"github.com/seckill-lab/shop/internal/testenv"
)

// dieOnDelivery is a consumer that takes what the broker hands it and dies
// before placing anything: the handler never returns true, and the
// connection is gone before any message could be acknowledged.
func dieOnDelivery(t *testing.T, cfg queue.Config, n int) {
	t.Helper()
	got := make(chan struct{}, n)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		queue.Consume(ctx, cfg, func(ctx context.Context, d queue.Delivery) bool {
			got <- struct{}{}
			<-ctx.Done() // killed while holding it
			return false
		})
	}()
	for range n {
		select {
		case <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("the dying consumer got no message in 30s")
		}
	}
	cancel()
	<-done
}

// acceptAll accepts one order for each user and fails unless every one is a 202.
func acceptAll(t *testing.T, q *order.Queued, id int64, users ...int64) {
	t.Helper()
	for _, u := range users {
		if _, accepted, err := q.Accept(context.Background(), u, id); err != nil || !accepted {
			t.Fatalf("accept %d: %v %v", u, accepted, err)
		}
	}
}

// TestQueuedManualAckSurvivesADeadConsumer is the safe row of the queue
// column in small: a consumer dies holding every message, the next one
// places them all.
func TestQueuedManualAckSurvivesADeadConsumer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.queued(t)
	id := f.product(t, s.shop, 10)
	acceptAll(t, s.q, id, 1, 2, 3)
	dieOnDelivery(t, s.qcfg, 3)
	handled := s.consume(t)
	for range 3 {
		await(t, handled)
	}
	if n := f.orders(t, id); n != 3 {
		t.Fatalf("orders = %d after a consumer died holding three accepted ones, want 3", n)
	}
}

// TestQueuedAutoAckLosesAcceptedOrders: with auto-ack (the lab shortcut)
// the broker forgets a message once delivered, so the consumer that dies
// holding it loses accepted orders: three 202s, no order.
func TestQueuedAutoAckLosesAcceptedOrders(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.queued(t)
	id := f.product(t, s.shop, 10)
	acceptAll(t, s.q, id, 1, 2, 3)
	auto := s.qcfg
	auto.AutoAck = true
	dieOnDelivery(t, auto, 3)
	if n := ready(t, s.qcfg); n != 0 {
		t.Fatalf("%d messages left in the queue, want 0: auto-ack forgot them on delivery", n)
	}
	if n := f.orders(t, id); n != 0 {
		t.Fatalf("orders = %d, want 0: the three accepted orders are lost", n)
	}
}

// TestQueuedWithoutOrderNumberDuplicates: a consumer that places under a
// random order number (the lab's plain INSERT) makes a second order when
// the message comes again after its COMMIT.
func TestQueuedWithoutOrderNumberDuplicates(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	amqpURL, name := testenv.RabbitMQ(t)
	s := f.queuedVia(t, amqpURL, name)
	id := f.product(t, s.shop, 10)
	acceptAll(t, s.q, id, 4)
	plain := s.orders.Queued(queue.NewPublisher(s.qcfg), f.RDB, order.QueuedConfig{Lease: time.Hour, ConfirmTimeout: time.Second,
		RejectedRetention: time.Hour, KeyPrefix: f.Prefix, NoOrderNo: true}, nil)
	conn, ch := rawChannel(t, s.qcfg)
	m, ok, err := ch.Get(s.qcfg.Queue, false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if !plain.Take(context.Background(), m.Body, false) {
		t.Fatal("not placed")
	}
	conn.Close() // killed between COMMIT and ack
	_, ch = rawChannel(t, s.qcfg)
	m, ok, err = ch.Get(s.qcfg.Queue, false)
	if err != nil || !ok || !m.Redelivered {
		t.Fatalf("redelivery: ok %v redelivered %v %v", ok, m.Redelivered, err)
	}
	if !plain.Take(context.Background(), m.Body, true) {
		t.Fatal("not placed")
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM orders WHERE product_id = ? AND user_id = 4", id); n != 2 {
		t.Fatalf("orders of the buyer = %d, want 2: the redelivery inserted a second one", n)
	}
}

// TestQueuedInProcessLosesWhatTheChannelHeld: the in-process channel (the
// lab shortcut) answers 202 before anything is durable; a process that
// dies takes the channel with it.
func TestQueuedInProcessLosesWhatTheChannelHeld(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.shop(t)
	id := f.product(t, s, 10)
	q := s.orders.Queued(queue.NewInProcess(16), f.RDB, order.QueuedConfig{Lease: time.Hour, ConfirmTimeout: time.Second,
		RejectedRetention: time.Hour, KeyPrefix: f.Prefix}, nil)
	acceptAll(t, q, id, 1, 2, 3)
	// The process dies: the channel is gone. A new process starts with an
	// empty one, and nothing else holds the three accepted orders.
	restarted := queue.NewInProcess(16)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	taken := 0
	restarted.Consume(ctx, 4, func(ctx context.Context, d queue.Delivery) bool { taken++; return true })
	if n := f.orders(t, id); taken != 0 || n != 0 {
		t.Fatalf("taken %d, orders %d; want 0, 0: the accepted orders died with the process", taken, n)
	}
}
