package httpapi_test

import (
	"net/http"
	"strings"
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
