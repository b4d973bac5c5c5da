package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/testenv"
	"github.com/seckill-lab/shop/internal/wire"
)

// TestQueuedSeckill: in the queued mode a first request is 202 with the
// queued order and its Location, readable as queued while no consumer ran,
// a repeat 200 with the same order; once another instance's consumer
// placed it, GET shows the order and a repeat replays it.
func TestQueuedSeckill(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	amqpURL, name := testenv.RabbitMQ(t)
	env := map[string]string{"SHOP_SECKILL_MODE": "queue", "SHOP_AMQP_URL": amqpURL, "SHOP_QUEUE_NAME": name, "SHOP_QUEUE_CONSUME": "false"}
	accepter := b.start(t, env)
	p := accepter.admin(t).createProduct("queued", 300, 3)
	u := accepter.user(t, 5)

	first := u.seckill(p.ID)
	first.want(t, http.StatusAccepted, "")
	o := first.order(t)
	loc := first.header.Get("Location")
	if o.Status != order.StatusQueued || o.OrderNo != order.SeckillNo(5, p.ID) || loc != "/api/v1/orders/"+o.OrderNo {
		t.Fatalf("202: %+v, Location %q", o, loc)
	}
	again := u.seckill(p.ID)
	again.want(t, http.StatusOK, "")
	if !again.replayed() || again.order(t).OrderNo != o.OrderNo {
		t.Fatalf("repeat: %v", again)
	}
	if got := u.do("GET", loc, nil); got.status != http.StatusOK || got.order(t).Status != order.StatusQueued {
		t.Fatalf("get before any consumer: %v", got)
	}
	accepter.user(t, 6).do("GET", loc, nil).want(t, http.StatusNotFound, "not_found")

	env["SHOP_QUEUE_CONSUME"] = "true"
	consumer := b.start(t, env)
	var placed wire.Order
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if placed = consumer.user(t, 5).do("GET", loc, nil).order(t); placed.Status != order.StatusQueued {
			break
		}
	}
	if placed.Status != order.StatusPending || placed.AmountCents != 300 {
		t.Fatalf("after the consumer: %+v, want the pending order", placed)
	}
	replay := u.seckill(p.ID)
	replay.want(t, http.StatusOK, "")
	if replay.order(t).Status != order.StatusPending {
		t.Fatalf("repeat after the consumer: %v", replay)
	}
	if n := b.count(t, "SELECT COUNT(*) FROM orders WHERE product_id = ?", p.ID); n != 1 {
		t.Fatalf("orders = %d, want 1", n)
	}
}
