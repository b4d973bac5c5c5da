package order_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/queue"
	"github.com/seckill-lab/shop/internal/testenv"
)

// queued is one instance's queued mode on the fixture, publishing to the
// test's own quorum queue (through via, when given: a proxy the test mutes).
type queued struct {
	shop
	q    *order.Queued
	qcfg queue.Config
}

func (f *fixture) queued(t *testing.T) queued {
	t.Helper()
	amqpURL, name := testenv.RabbitMQ(t)
	return f.queuedVia(t, amqpURL, name)
}

func (f *fixture) queuedVia(t *testing.T, amqpURL, name string) queued {
	t.Helper()
	s := f.shop(t)
	qcfg := queue.Config{URL: amqpURL, Queue: name, Prefetch: 64}
	pub := queue.NewPublisher(qcfg)
	t.Cleanup(pub.Close)
	q := s.orders.Queued(pub, f.RDB, order.QueuedConfig{Lease: time.Hour, ConfirmTimeout: 2 * time.Second,
		RejectedRetention: time.Hour, KeyPrefix: f.Prefix}, nil)
	return queued{shop: s, q: q, qcfg: qcfg}
}

// consume runs a consumer until the test ends; each message it finished
// with arrives on the channel returned (before its acknowledgement).
func (s queued) consume(t *testing.T) <-chan queue.Delivery {
	handled, _ := s.consumeUntil(t)
	return handled
}

// consumeUntil is consume with a stop that returns once the consumer did,
// its acknowledgements sent.
func (s queued) consumeUntil(t *testing.T) (<-chan queue.Delivery, func()) {
	t.Helper()
	handled := make(chan queue.Delivery, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		queue.Consume(ctx, s.qcfg, func(ctx context.Context, d queue.Delivery) bool {
			ok := s.q.Take(ctx, d.Body, d.Redelivered)
			if ok {
				handled <- d
			}
			return ok
		})
	}()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return handled, stop
}

// await is the next message a consumer finished with.
func await(t *testing.T, handled <-chan queue.Delivery) queue.Delivery {
	t.Helper()
	select {
	case d := <-handled:
		return d
	case <-time.After(30 * time.Second):
		t.Fatal("no message was consumed in 30s")
		return queue.Delivery{}
	}
}

func (f *fixture) orders(t *testing.T, product int64) int64 {
	return f.Count(t, "SELECT COUNT(*) FROM orders WHERE product_id = ?", product)
}

// gateHeld reports the product's gate counter and the units it holds.
func gateHeld(t *testing.T, inv *inventory.Service, product int64) (units, held int64) {
	t.Helper()
	units, held, ok, err := inv.GateLevel(context.Background(), product)
	if err != nil || !ok {
		t.Fatalf("gate level: ok %v, %v", ok, err)
	}
	return units, held
}

// TestQueuedAcceptedThenPlaced: a 202 is a queued order the buyer can read
// and repeat (200, the same order), then, once consumed, the order; the
// gate's unit stays sold.
func TestQueuedAcceptedThenPlaced(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.queued(t)
	id := f.product(t, s.shop, 5)
	ctx := context.Background()

	tk, accepted, err := s.q.Accept(ctx, 7, id)
	if err != nil || !accepted || tk.Status != order.StatusQueued || tk.OrderNo != order.SeckillNo(7, id) {
		t.Fatalf("accept: %+v accepted %v err %v; want a queued order accepted", tk, accepted, err)
	}
	again, accepted, err := s.q.Accept(ctx, 7, id)
	if err != nil || accepted || again.Status != order.StatusQueued {
		t.Fatalf("repeat before the consumer: %+v accepted %v err %v; want the queued order, not accepted again", again, accepted, err)
	}
	if got, err := s.q.Get(ctx, 7, tk.OrderNo); err != nil || got.Status != order.StatusQueued {
		t.Fatalf("get before the consumer: %+v %v; want queued", got, err)
	}
	if _, err := s.q.Get(ctx, 8, tk.OrderNo); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("another user's get: %v; want ErrNotFound", err)
	}
	await(t, s.consume(t))
	got, err := s.q.Get(ctx, 7, tk.OrderNo)
	if err != nil || got.Status != order.StatusPending {
		t.Fatalf("get after the consumer: %+v %v; want the pending order", got, err)
	}
	if again, accepted, err := s.q.Accept(ctx, 7, id); err != nil || accepted || again.Status != order.StatusPending {
		t.Fatalf("repeat after the consumer: %+v accepted %v err %v; want the placed order", again, accepted, err)
	}
	if n := f.orders(t, id); n != 1 {
		t.Fatalf("orders = %d, want 1", n)
	}
	if units, held := gateHeld(t, s.inv, id); units != 4 || held != 0 {
		t.Fatalf("gate = %d units, %d held; want 4, 0", units, held)
	}
}

// TestQueuedConfirmLost: the link to the broker goes silent after the
// publish left: no confirm comes, so the buyer gets ErrNotAccepted (503)
// and the gate its unit back; no queued record is left to promise anything.
func TestQueuedConfirmLost(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	amqpURL, name := testenv.RabbitMQ(t)
	p := startMuter(t, amqpURL)
	s := f.queuedVia(t, strings.Replace(amqpURL, "127.0.0.1:5672", p.addr, 1), name)
	id := f.product(t, s.shop, 5)
	ctx := context.Background()
	if _, accepted, err := s.q.Accept(ctx, 1, id); err != nil || !accepted {
		t.Fatalf("accept through the open link: accepted %v, %v", accepted, err)
	}
	p.muted.Store(true)
	_, accepted, err := s.q.Accept(ctx, 2, id)
	if !errors.Is(err, order.ErrNotAccepted) || accepted {
		t.Fatalf("accept with the link silent: accepted %v, %v; want ErrNotAccepted", accepted, err)
	}
	if units, held := gateHeld(t, s.inv, id); units != 4 || held != 1 {
		t.Fatalf("gate = %d units, %d held; want 4 and 1 (the unconfirmed order's unit back, the accepted one's held)", units, held)
	}
	if _, err := s.q.Get(ctx, 2, order.SeckillNo(2, id)); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("get of the unconfirmed order: %v; want ErrNotFound (nothing promised)", err)
	}
}

// TestQueuedRedeliveryMakesOneOrder: the same message delivered twice (a
// publish retried after a lost confirm, a redelivery) makes one order; the
// second is acknowledged as a replay.
func TestQueuedRedeliveryMakesOneOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.queued(t)
	id := f.product(t, s.shop, 5)
	ctx := context.Background()
	if _, accepted, err := s.q.Accept(ctx, 3, id); err != nil || !accepted {
		t.Fatalf("accept: %v %v", accepted, err)
	}
	body := takeRaw(t, s.qcfg, true) // delivered, given back: in the queue again
	pub := queue.NewPublisher(s.qcfg)
	defer pub.Close()
	if err := pub.Publish(ctx, order.SeckillNo(3, id), body); err != nil {
		t.Fatal(err)
	}
	handled := s.consume(t)
	first, second := await(t, handled), await(t, handled)
	if !first.Redelivered && !second.Redelivered {
		t.Errorf("neither delivery was marked redelivered")
	}
	if n := f.orders(t, id); n != 1 {
		t.Fatalf("orders = %d after two deliveries, want 1", n)
	}
	if units, held := gateHeld(t, s.inv, id); units != 4 || held != 0 {
		t.Fatalf("gate = %d units, %d held; want 4, 0", units, held)
	}
}

// TestQueuedConsumerKilledBetweenCommitAndAck: a consumer commits the
// order and dies before its acknowledgement; the broker delivers the
// message again, the next consumer finds the order by its number and
// acknowledges it: one order, the queue empty.
func TestQueuedConsumerKilledBetweenCommitAndAck(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.queued(t)
	id := f.product(t, s.shop, 5)
	ctx := context.Background()
	if _, accepted, err := s.q.Accept(ctx, 4, id); err != nil || !accepted {
		t.Fatalf("accept: %v %v", accepted, err)
	}
	conn, ch := rawChannel(t, s.qcfg)
	m, ok, err := ch.Get(s.qcfg.Queue, false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if !s.q.Take(ctx, m.Body, m.Redelivered) {
		t.Fatal("the first consumer did not place the order")
	}
	conn.Close() // killed: committed, never acknowledged
	if n := f.orders(t, id); n != 1 {
		t.Fatalf("orders = %d after the commit, want 1", n)
	}
	handled, stop := s.consumeUntil(t)
	d := await(t, handled)
	stop() // a message not acknowledged goes back to the queue now
	if !d.Redelivered {
		t.Error("the second delivery was not marked redelivered")
	}
	if n := f.orders(t, id); n != 1 {
		t.Fatalf("orders = %d after the redelivery, want 1", n)
	}
	if n := ready(t, s.qcfg); n != 0 {
		t.Fatalf("%d messages still in the queue, want 0 (acknowledged on redelivery)", n)
	}
}

// TestQueuedRejectedGivesTheUnitBack: accepted orders the database cannot
// serve (a regular order took the stock the gate still counted) end
// rejected as sold_out, readable and repeatable, their units back at the
// gate; a redelivery of a rejected order places nothing.
func TestQueuedRejectedGivesTheUnitBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.queued(t)
	id := f.product(t, s.shop, 2)
	ctx := context.Background()
	for _, u := range []int64{11, 12} {
		if _, accepted, err := s.q.Accept(ctx, u, id); err != nil || !accepted {
			t.Fatalf("accept %d: %v %v", u, accepted, err)
		}
	}
	if _, _, err := s.orders.Regular(ctx, 99, id, 2, "all-of-it", "h"); err != nil {
		t.Fatalf("regular order of the whole stock: %v", err)
	}
	handled := s.consume(t)
	bodies := [][]byte{await(t, handled).Body, await(t, handled).Body}
	for _, u := range []int64{11, 12} {
		got, err := s.q.Get(ctx, u, order.SeckillNo(u, id))
		if err != nil || got.Status != order.StatusRejected || got.Reason != order.ReasonSoldOut {
			t.Fatalf("get %d: %+v %v; want rejected sold_out", u, got, err)
		}
		if again, accepted, err := s.q.Accept(ctx, u, id); err != nil || accepted || again.Status != order.StatusRejected {
			t.Fatalf("repeat %d: %+v accepted %v %v; want the rejection", u, again, accepted, err)
		}
	}
	if units, held := gateHeld(t, s.inv, id); units != 2 || held != 0 {
		t.Fatalf("gate = %d units, %d held; want 2 (both given back), 0", units, held)
	}
	pub := queue.NewPublisher(s.qcfg)
	defer pub.Close()
	if err := pub.Publish(ctx, "again", bodies[0]); err != nil {
		t.Fatal(err)
	}
	await(t, handled)
	if n := f.orders(t, id); n != 1 {
		t.Fatalf("orders = %d, want 1 (the regular one)", n)
	}
}

func rawChannel(t *testing.T, cfg queue.Config) (*amqp.Connection, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.Dial(cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return conn, ch
}

// takeRaw gets one message and gives it back (requeue) or leaves it
// unacknowledged until the connection closes.
func takeRaw(t *testing.T, cfg queue.Config, requeue bool) []byte {
	t.Helper()
	_, ch := rawChannel(t, cfg)
	m, ok, err := ch.Get(cfg.Queue, false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if requeue {
		if err := m.Nack(false, true); err != nil {
			t.Fatal(err)
		}
	}
	return m.Body
}

// ready is the queue's count of messages ready for delivery.
func ready(t *testing.T, cfg queue.Config) int {
	t.Helper()
	_, ch := rawChannel(t, cfg)
	q, err := ch.QueueDeclarePassive(cfg.Queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// muter is a TCP proxy to the broker that, muted, swallows what the client
// sends: a publish leaves the client and never arrives, so no confirm comes.
type muter struct {
	addr  string
	muted atomic.Bool
}

func startMuter(t *testing.T, amqpURL string) *muter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	target := strings.TrimSuffix(strings.SplitN(strings.SplitN(amqpURL, "@", 2)[1], "/", 2)[0], "/")
	p := &muter{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); s.Close() })
			go func() { _, _ = io.Copy(c, s) }()
			go p.forward(s, c)
		}
	}()
	return p
}

func (p *muter) forward(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if !p.muted.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}
