package httpapi_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/testenv"
)

// TestRedisDown stops a private redis-server under a running instance:
// every route that needs Redis answers 503 unavailable with Retry-After
// (never 500), what the database alone can answer still answers (a seckill
// repeat, a regular-order retry, a payment retry, reading an order), and
// /readyz is 503. After Redis returns, orders flow and the audit is clean.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	rs := testenv.StartRedisServer(t)
	in := b.start(t, map[string]string{"SHOP_REDIS_URL": rs.URL()})
	admin, u1, u2, u3 := in.admin(t), in.user(t, 1), in.user(t, 2), in.user(t, 3)
	p := admin.createProduct("outage", 100, 20)
	pid := id(p.ID)
	admin.do("POST", "/api/v1/admin/wallets/2/credit", map[string]int64{"amount_cents": 10_000}, hdr{"Idempotency-Key", "c1"}).want(t, http.StatusOK, "")

	sk := u1.seckill(p.ID)
	sk.want(t, http.StatusCreated, "")
	reg := u1.regular(p.ID, 2, "r1")
	reg.want(t, http.StatusCreated, "")
	toPay := u2.regular(p.ID, 1, "r2").order(t)
	paid := u2.do("POST", "/api/v1/orders/"+toPay.OrderNo+"/pay", nil, hdr{"Idempotency-Key", "p1"})
	paid.want(t, http.StatusOK, "")
	unpaid := u2.regular(p.ID, 1, "r3").order(t)

	rs.Stop()

	noServerError := func(r reply) {
		t.Helper()
		if r.status >= 500 && r.status != http.StatusServiceUnavailable || r.status == 0 {
			t.Errorf("with Redis down: %v", r)
		}
	}
	unavailable := func(r reply) {
		t.Helper()
		noServerError(r)
		if r.want(t, http.StatusServiceUnavailable, "unavailable") && r.header.Get("Retry-After") == "" {
			t.Errorf("%v: no Retry-After", r)
		}
	}
	// What the database answers.
	r := u1.regular(p.ID, 2, "r1")
	noServerError(r)
	if r.want(t, http.StatusOK, "") && (!r.replayed() || r.order(t).OrderNo != reg.order(t).OrderNo) {
		t.Errorf("regular retry with Redis down: %v, want the first order replayed", r)
	}
	r = u2.do("POST", "/api/v1/orders/"+toPay.OrderNo+"/pay", nil, hdr{"Idempotency-Key", "p1"})
	noServerError(r)
	if r.want(t, http.StatusOK, "") && !r.replayed() {
		t.Errorf("payment retry with Redis down: %v, want a replay", r)
	}
	r = u1.do("GET", "/api/v1/orders/"+sk.order(t).OrderNo, nil)
	noServerError(r)
	r.want(t, http.StatusOK, "")
	noServerError(u1.do("GET", "/api/v1/orders", nil))
	noServerError(in.anon(t).do("GET", "/api/v1/products/"+pid, nil))

	// What needs Redis.
	unavailable(u3.seckill(p.ID))
	unavailable(u3.regular(p.ID, 1, "new"))
	unavailable(u2.do("POST", "/api/v1/orders/"+unpaid.OrderNo+"/pay", nil, hdr{"Idempotency-Key", "p2"}))
	unavailable(u2.do("POST", "/api/v1/orders/"+unpaid.OrderNo+"/cancel", nil))
	unavailable(u3.do("POST", "/api/v1/form-tokens", nil))
	unavailable(u3.do("POST", "/api/v1/orders", map[string]int64{"product_id": p.ID, "quantity": 1}, hdr{"Idempotency-Key", ""}, hdr{"X-Form-Token", "tok"}))
	unavailable(admin.do("POST", "/api/v1/admin/products/"+pid+"/restock", map[string]int64{"quantity": 5}, hdr{"Idempotency-Key", "rs1"}))
	in.anon(t).do("GET", "/readyz", nil).want(t, http.StatusServiceUnavailable, "not_ready")

	// A seckill repeat of a buyer who has an order is answered from the
	// database (docs/api.md), though the processed marker is gone with Redis.
	r = u1.seckill(p.ID)
	noServerError(r)
	if r.want(t, http.StatusOK, "") && (!r.replayed() || r.order(t).OrderNo != sk.order(t).OrderNo) {
		t.Errorf("seckill repeat with Redis down: %v, want the buyer's order replayed", r)
	}

	rs.Start()
	deadline := time.Now().Add(15 * time.Second)
	for in.anon(t).do("GET", "/readyz", nil).status != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("/readyz not 200 after Redis came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	u3.seckill(p.ID).want(t, http.StatusCreated, "")
	u1.seckill(p.ID).want(t, http.StatusOK, "")
	u2.do("POST", "/api/v1/orders/"+unpaid.OrderNo+"/pay", nil, hdr{"Idempotency-Key", "p2"}).want(t, http.StatusOK, "")
	if out, err := b.verify(t); err != nil || !strings.Contains(out, "OK") {
		t.Errorf("shop verify after the outage: %v\n%s", err, out)
	}
}

// TestRedisDownMidTraffic: three instances carry seckill orders, regular
// orders and payments of 24 buyers while their Redis stops and starts
// again: no answer is a 500, a buyer's repeat of an order it has is
// answered 200 (from the database while Redis is down), every buyer ends
// with its orders paid, and the audit is clean.
func TestRedisDownMidTraffic(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	rs := testenv.StartRedisServer(t)
	// The buyers resend and repeat faster than a person (they are the
	// outage's load), so the per-user rate limits are off here.
	env := map[string]string{"SHOP_REDIS_URL": rs.URL(), "SHOP_LOCK_WAIT": "500ms", "SHOP_RATE_ORDERS": "off", "SHOP_RATE_PAY": "off"}
	ins := []*instance{b.start(t, env), b.start(t, env), b.start(t, env)}
	admin := ins[0].admin(t)
	sk := admin.createProduct("outage-seckill", 100, 1000)
	reg := admin.createProduct("outage-regular", 100, 1000)
	const buyers = 24
	for u := 1; u <= buyers; u++ {
		admin.do("POST", "/api/v1/admin/wallets/"+id(int64(u))+"/credit", map[string]int64{"amount_cents": 10_000},
			hdr{"Idempotency-Key", "c"}).want(t, http.StatusOK, "")
	}

	var mu sync.Mutex
	statuses := map[int]int{}
	record := func(r reply) reply {
		mu.Lock()
		statuses[r.status]++
		mu.Unlock()
		if r.status >= 500 && r.status != http.StatusServiceUnavailable || r.status == 0 {
			t.Errorf("%v", r)
		}
		return r
	}
	// until resends a request while it answers 503, for at most 20 s.
	until := func(send func() reply) reply {
		deadline := time.Now().Add(20 * time.Second)
		for {
			r := record(send())
			if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
				return r
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for u := int64(1); u <= buyers; u++ {
		c := ins[u%3].user(t, u)
		wg.Go(func() {
			time.Sleep(time.Duration(u) * 150 * time.Millisecond) // first orders before, during and after the outage
			first := until(func() reply { return c.seckill(sk.ID) })
			if !first.want(t, http.StatusCreated, "") {
				return
			}
			o := until(func() reply { return c.regular(reg.ID, 1, "k") })
			if o.status != http.StatusCreated && o.status != http.StatusOK {
				t.Errorf("regular order: %v", o)
				return
			}
			for _, no := range []string{first.order(t).OrderNo, o.order(t).OrderNo} {
				if p := until(func() reply { return c.do("POST", "/api/v1/orders/"+no+"/pay", nil, hdr{"Idempotency-Key", "p"}) }); p.status != http.StatusOK {
					t.Errorf("pay: %v", p)
				}
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r := record(c.seckill(sk.ID)); r.status != http.StatusOK || r.order(t).OrderNo != first.order(t).OrderNo {
					t.Errorf("a seckill repeat: %v, want 200 with the buyer's order", r)
				}
				if r := record(c.regular(reg.ID, 1, "k")); r.status != http.StatusOK && r.status != http.StatusCreated {
					t.Errorf("a regular-order retry: %v, want its order", r)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	time.Sleep(time.Second)
	rs.Stop()
	time.Sleep(3 * time.Second)
	rs.Start()
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("answers by status: %v", statuses)
	if n := b.count(t, "SELECT COUNT(*) FROM orders WHERE status = 'paid'"); n != 2*buyers {
		t.Errorf("%d paid orders, want %d", n, 2*buyers)
	}
	if out, err := b.verify(t); err != nil || !strings.Contains(out, "OK") {
		t.Errorf("shop verify after the outage: %v\n%s", err, out)
	}
}
