package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/app"
	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/testenv"
	"github.com/seckill-lab/shop/internal/wire"
)

func id(n int64) string { return strconv.FormatInt(n, 10) }

// raceInFlight bounds the requests of a race in flight at once: every
// instance may open 50 database connections and the test MariaDB (shared
// with the other packages' tests) allows 151 in all.
const raceInFlight = 30

// seckillRace sends one seckill request per user, all released at once (at
// most raceInFlight in flight), user i to instance i % len(instances), and
// returns the answers by user.
func seckillRace(t *testing.T, instances []*instance, productID, firstUser int64, users int) []reply {
	t.Helper()
	out := make([]reply, users)
	start := make(chan struct{})
	slots := make(chan struct{}, raceInFlight)
	var wg sync.WaitGroup
	for i := range users {
		c := instances[i%len(instances)].user(t, firstUser+int64(i))
		wg.Go(func() {
			<-start
			slots <- struct{}{}
			defer func() { <-slots }()
			out[i] = c.seckill(productID)
		})
	}
	close(start)
	wg.Wait()
	return out
}

// TestSeckillRaceThreeInstances: 200 buyers for 50 units through three
// instances sharing one database and one Redis: exactly 50 orders, the rest
// sold out, and the invariants hold. Then a restock (retried) sells again on
// every instance within about a second.
func TestSeckillRaceThreeInstances(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	env := map[string]string{"SHOP_LOCK_WAIT": "30s"}
	shops := []*instance{b.start(t, env), b.start(t, env), b.start(t, env)}
	admin := shops[0].admin(t)
	p := admin.createProduct("flash", 999, 50)

	answers := seckillRace(t, shops, p.ID, 1000, 200)
	created, soldOut := 0, 0
	nos := map[string]bool{}
	winner := int64(0)
	for i, r := range answers {
		switch r.status {
		case http.StatusCreated:
			created++
			o := r.order(t)
			nos[o.OrderNo] = true
			if o.UserID != 1000+int64(i) || o.ProductID != p.ID || o.Quantity != 1 || o.AmountCents != 999 ||
				o.Kind != "seckill" || o.Status != "pending" || o.CancelledAt != nil || o.PaidAt != nil {
				t.Errorf("user %d got %+v", 1000+i, o)
			}
			if r.header.Get("Location") != "/api/v1/orders/"+o.OrderNo || r.replayed() {
				t.Errorf("201 headers: %v", r.header)
			}
			winner = o.UserID
		case http.StatusConflict:
			if r.problem().Code == "sold_out" {
				soldOut++
				continue
			}
			fallthrough
		default:
			t.Errorf("unexpected answer: %v", r)
		}
	}
	if created != 50 || soldOut != 150 || len(nos) != 50 {
		t.Fatalf("%d created (%d distinct), %d sold out; want 50 and 150", created, len(nos), soldOut)
	}
	if n := b.count(t, "SELECT COUNT(*) FROM orders WHERE product_id = ?", p.ID); n != 50 {
		t.Errorf("%d orders in the database, want 50", n)
	}
	if s := b.stock(t, p.ID); s != 0 {
		t.Errorf("stock %d, want 0", s)
	}
	if out, err := b.verify(t); err != nil {
		t.Errorf("shop verify: %v\n%s", err, out)
	}
	var rep struct {
		OK       bool `json:"ok"`
		Products []struct {
			ProductID int64 `json:"product_id"`
			Added     int64 `json:"added"`
			Sold      int64 `json:"sold"`
		} `json:"products"`
	}
	shops[1].admin(t).do("GET", "/api/v1/admin/audit", nil).json(t, &rep)
	if !rep.OK {
		t.Errorf("audit: %+v", rep)
	}
	// The shop-wide audit is published for Prometheus (deploy/prometheus): a
	// clean one leaves no violation series and stamps its time.
	if m := shops[1].anon(t).do("GET", "/metrics", nil); !bytes.Contains(m.body, []byte("\nshop_audit_last_run_timestamp_seconds ")) ||
		bytes.Contains(m.body, []byte("\nshop_audit_violations{")) {
		t.Errorf("/metrics after a clean audit: no audit time, or a violation:\n%s", m.body)
	}
	r := shops[2].admin(t).do("GET", "/api/v1/admin/audit?product_id="+id(p.ID), nil)
	r.json(t, &rep)
	if !rep.OK || len(rep.Products) != 1 || rep.Products[0].Added != 50 || rep.Products[0].Sold != 50 {
		t.Errorf("audit of the product: %s", r.body)
	}

	// After the sell-out a buyer's repeat still gets its order, a loser
	// still sees sold out.
	r = shops[2].user(t, winner).seckill(p.ID)
	if r.want(t, http.StatusOK, "") && (!r.replayed() || r.order(t).UserID != winner || r.header.Get("Location") == "") {
		t.Errorf("winner's repeat after sell-out: %v %v", r, r.header)
	}
	shops[1].user(t, 5000).seckill(p.ID).want(t, http.StatusConflict, "sold_out")

	// Restock three units, retried: added once.
	restock := func(in *instance) reply {
		return in.admin(t).do("POST", "/api/v1/admin/products/"+id(p.ID)+"/restock", map[string]int{"quantity": 3}, hdr{"Idempotency-Key", "restock-1"})
	}
	first := restock(shops[0])
	restockedAt := time.Now()
	if first.want(t, http.StatusOK, "") && first.product(t).Stock != 3 {
		t.Errorf("restock: %v", first)
	}
	again := restock(shops[1])
	if !again.replayed() || !bytes.Equal(again.body, first.body) || again.status != http.StatusOK {
		t.Errorf("retried restock: %v (replayed %v), want the first answer replayed", again, again.replayed())
	}
	if s, n := b.stock(t, p.ID), b.count(t, "SELECT COUNT(*) FROM stock_ledger WHERE product_id = ? AND reason = 'restock'", p.ID); s != 3 || n != 1 {
		t.Errorf("after a retried restock: stock %d, %d restock rows; want 3 and 1", s, n)
	}

	// Every instance sells again within about a second.
	var wg sync.WaitGroup
	for i, in := range shops {
		c := in.user(t, 6000+int64(i))
		wg.Go(func() {
			for {
				r := c.seckill(p.ID)
				if r.status == http.StatusCreated {
					if d := time.Since(restockedAt); d > 1500*time.Millisecond {
						t.Errorf("instance %s sold again only %v after the restock", in.base, d)
					}
					return
				}
				if r.problem().Code != "sold_out" || time.Since(restockedAt) > 5*time.Second {
					t.Errorf("instance %s after the restock: %v", in.base, r)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	if s := b.stock(t, p.ID); s != 0 {
		t.Errorf("stock %d after selling the restock, want 0", s)
	}
	if out, err := b.verify(t, "--product", id(p.ID)); err != nil {
		t.Errorf("shop verify after the restock: %v\n%s", err, out)
	}
}

// TestNaiveStrategyIsCaughtByVerify proves the checker can fail: without a
// lock the read-modify-write loses updates under the same race, and shop
// verify exits 1.
func TestNaiveStrategyIsCaughtByVerify(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	env := map[string]string{"SHOP_STOCK_STRATEGY": "naive"}
	shops := []*instance{b.start(t, env), b.start(t, env), b.start(t, env)}
	admin := shops[0].admin(t)
	for round := range 3 {
		p := admin.createProduct("naive "+id(int64(round)), 100, 20)
		seckillRace(t, shops, p.ID, int64(10000*(round+1)), 150)
		out, err := b.verify(t, "--product", id(p.ID))
		if err == nil {
			t.Logf("round %d: no violation yet (stock %d)", round, b.stock(t, p.ID))
			continue
		}
		if code := app.ExitCode(err); code != 1 || !strings.Contains(out, "I") {
			t.Fatalf("verify: exit %d, %v\n%s", code, err, out)
		}
		var rep struct {
			OK bool `json:"ok"`
		}
		admin.do("GET", "/api/v1/admin/audit?product_id="+id(p.ID), nil).json(t, &rep)
		if rep.OK {
			t.Error("verify failed but the audit route says ok")
		}
		t.Logf("round %d: verify caught it:\n%s", round, out)
		return
	}
	t.Fatal("three naive races of 150 buyers for 20 units never broke an invariant: the checker or the race is broken")
}

// TestSweeperInTwoInstances: both instances sweep unpaid orders at once;
// each expired order is cancelled once and its stock returned once.
func TestSweeperInTwoInstances(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	env := map[string]string{"SHOP_PAYMENT_TIMEOUT": "1s", "SHOP_SWEEP_INTERVAL": "200ms"}
	shops := []*instance{b.start(t, env), b.start(t, env)}
	p := shops[0].admin(t).createProduct("swept", 500, 50)
	var nos []string
	for u := int64(1); u <= 10; u++ {
		r := shops[u%2].user(t, u).seckill(p.ID)
		r.want(t, http.StatusCreated, "")
		nos = append(nos, r.order(t).OrderNo)
		r = shops[(u+1)%2].user(t, 100+u).regular(p.ID, 2, "sweep-"+id(u))
		r.want(t, http.StatusCreated, "")
		nos = append(nos, r.order(t).OrderNo)
	}
	deadline := time.Now().Add(20 * time.Second)
	for b.count(t, "SELECT COUNT(*) FROM orders WHERE status <> 'cancelled'") > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("orders still pending 20s after they expired")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := b.count(t, "SELECT COUNT(*) FROM stock_ledger WHERE reason = 'cancel'"); n != int64(len(nos)) {
		t.Errorf("%d cancel ledger rows, want %d", n, len(nos))
	}
	if n := b.count(t, "SELECT COUNT(*) FROM (SELECT order_no FROM stock_ledger WHERE reason = 'cancel' GROUP BY order_no HAVING COUNT(*) <> 1) d"); n != 0 {
		t.Errorf("%d orders returned their stock more than once", n)
	}
	if s := b.stock(t, p.ID); s != 50 {
		t.Errorf("stock %d after every order expired, want 50", s)
	}
	if out, err := b.verify(t); err != nil {
		t.Errorf("shop verify: %v\n%s", err, out)
	}
	c := shops[0].user(t, 1)
	var page wire.Page[wire.Order]
	c.do("GET", "/api/v1/orders", nil).json(t, &page)
	if len(page.Items) != 1 || page.Items[0].Status != "cancelled" || page.Items[0].CancelledAt == nil {
		t.Fatalf("the user's swept order: %+v", page.Items)
	}
	r := c.do("POST", "/api/v1/orders/"+page.Items[0].OrderNo+"/cancel", nil)
	if r.want(t, http.StatusOK, "") && orderKey(r.order(t)) != orderKey(page.Items[0]) {
		t.Errorf("cancel of a swept order changed it: %v", r)
	}
}

// TestBadInputChangesNothing: each bad request gets its documented status
// and code, and the database is unchanged afterwards.
func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	in := b.start(t, nil)
	admin, u1, u2, anon := in.admin(t), in.user(t, 1), in.user(t, 2), in.anon(t)
	p := admin.createProduct("plain", 100, 10)
	pid := id(p.ID)
	mine := u1.regular(p.ID, 1, "mine").order(t)
	expired := signToken(t, 1, time.Now().Add(-time.Minute), authSecret)
	forged := signToken(t, 1, time.Now().Add(time.Hour), "another-secret-0123456789")
	big := `{"product_id": ` + pid + `, "quantity": 1, "pad": "` + strings.Repeat("x", 65536) + `"}`
	admin.createProduct("second", 1, 1)
	var listed wire.Page[wire.Product]
	admin.do("GET", "/api/v1/products?limit=1", nil).json(t, &listed)
	if listed.NextCursor == nil {
		t.Fatal("no next_cursor on the first of two pages")
	}
	productCursor := *listed.NextCursor
	tampered := productCursor[:len(productCursor)-2] + "AA"
	if tampered == productCursor {
		tampered = productCursor[:len(productCursor)-2] + "BB"
	}

	snapshot := func() string {
		return fmt.Sprint(
			b.count(t, "SELECT COUNT(*) FROM products"), b.count(t, "SELECT SUM(stock) FROM products"),
			b.count(t, "SELECT COUNT(*) FROM orders"), b.count(t, "SELECT COUNT(*) FROM stock_ledger"),
			b.count(t, "SELECT COUNT(*) FROM orders WHERE status = 'cancelled'"))
	}
	before := snapshot()

	key := hdr{"Idempotency-Key", "k1"}
	order := map[string]any{"product_id": p.ID, "quantity": 1}
	tests := []struct {
		name         string
		c            client
		method, path string
		body         any
		headers      []hdr
		status       int
		code, field  string
	}{
		{"unknown product", anon, "GET", "/api/v1/products/999999", nil, nil, 404, "not_found", ""},
		{"non-numeric product", anon, "GET", "/api/v1/products/abc", nil, nil, 404, "not_found", ""},
		{"zero product", anon, "GET", "/api/v1/products/0", nil, nil, 404, "not_found", ""},
		{"negative product", anon, "GET", "/api/v1/products/-1", nil, nil, 404, "not_found", ""},
		{"product id 2^53", anon, "GET", "/api/v1/products/9007199254740992", nil, nil, 404, "not_found", ""},
		{"seckill unknown product", u1, "POST", "/api/v1/seckill/999999/orders", nil, nil, 404, "not_found", ""},
		{"seckill non-numeric", u1, "POST", "/api/v1/seckill/abc/orders", nil, nil, 404, "not_found", ""},
		{"seckill zero", u1, "POST", "/api/v1/seckill/0/orders", nil, nil, 404, "not_found", ""},
		{"seckill negative", u1, "POST", "/api/v1/seckill/-5/orders", nil, nil, 404, "not_found", ""},
		{"seckill with a field", u1, "POST", "/api/v1/seckill/" + pid + "/orders", raw(`{"quantity": 1}`), nil, 400, "invalid_request", "quantity"},
		{"seckill malformed", u1, "POST", "/api/v1/seckill/" + pid + "/orders", raw(`{`), nil, 400, "invalid_json", ""},
		{"quantity 0", u1, "POST", "/api/v1/orders", raw(`{"product_id": ` + pid + `, "quantity": 0}`), []hdr{key}, 400, "invalid_request", "quantity"},
		{"quantity 101", u1, "POST", "/api/v1/orders", raw(`{"product_id": ` + pid + `, "quantity": 101}`), []hdr{key}, 400, "invalid_request", "quantity"},
		{"quantity -1", u1, "POST", "/api/v1/orders", raw(`{"product_id": ` + pid + `, "quantity": -1}`), []hdr{key}, 400, "invalid_request", "quantity"},
		{"quantity string", u1, "POST", "/api/v1/orders", raw(`{"product_id": ` + pid + `, "quantity": "x"}`), []hdr{key}, 400, "invalid_request", "quantity"},
		{"quantity fraction", u1, "POST", "/api/v1/orders", raw(`{"product_id": ` + pid + `, "quantity": 1.5}`), []hdr{key}, 400, "invalid_request", "quantity"},
		{"quantity missing", u1, "POST", "/api/v1/orders", raw(`{"product_id": ` + pid + `}`), []hdr{key}, 400, "invalid_request", "quantity"},
		{"product_id missing", u1, "POST", "/api/v1/orders", raw(`{"quantity": 1}`), []hdr{key}, 400, "invalid_request", "product_id"},
		{"product_id zero", u1, "POST", "/api/v1/orders", raw(`{"product_id": 0, "quantity": 1}`), []hdr{key}, 400, "invalid_request", "product_id"},
		{"product_id negative", u1, "POST", "/api/v1/orders", raw(`{"product_id": -3, "quantity": 1}`), []hdr{key}, 400, "invalid_request", "product_id"},
		{"unknown field", u1, "POST", "/api/v1/orders", raw(`{"product_id": ` + pid + `, "quantity": 1, "coupon": "x"}`), []hdr{key}, 400, "invalid_request", "coupon"},
		{"empty body", u1, "POST", "/api/v1/orders", raw(``), []hdr{key}, 400, "invalid_request", "body"},
		{"array body", u1, "POST", "/api/v1/orders", raw(`[]`), []hdr{key}, 400, "invalid_request", "body"},
		{"text/plain", u1, "POST", "/api/v1/orders", raw(`{"product_id": ` + pid + `, "quantity": 1}`), []hdr{key, {"Content-Type", "text/plain"}}, 400, "invalid_request", "Content-Type"},
		{"form encoded", u1, "POST", "/api/v1/orders", raw(`product_id=1&quantity=1`), []hdr{key, {"Content-Type", "application/x-www-form-urlencoded"}}, 400, "invalid_request", "Content-Type"},
		{"malformed JSON", u1, "POST", "/api/v1/orders", raw(`{"product_id": 1,`), []hdr{key}, 400, "invalid_json", ""},
		{"two JSON values", u1, "POST", "/api/v1/orders", raw(`{"product_id": 1, "quantity": 1} {}`), []hdr{key}, 400, "invalid_json", ""},
		{"body over 64 KiB", u1, "POST", "/api/v1/orders", raw(big), []hdr{key}, 413, "body_too_large", ""},
		{"chunked body over 64 KiB", u1, "POST", "/api/v1/orders", strings.NewReader(big), []hdr{key}, 413, "body_too_large", ""},
		{"413 before 401", anon, "POST", "/api/v1/orders", raw(big), nil, 413, "body_too_large", ""},
		{"key missing", u1, "POST", "/api/v1/orders", order, nil, 400, "idempotency_key_missing", ""},
		{"key malformed", u1, "POST", "/api/v1/orders", order, []hdr{{"Idempotency-Key", "no spaces!"}}, 400, "idempotency_key_missing", ""},
		{"key too long", u1, "POST", "/api/v1/orders", order, []hdr{{"Idempotency-Key", strings.Repeat("k", 256)}}, 400, "idempotency_key_missing", ""},
		{"key quoted empty", u1, "POST", "/api/v1/orders", order, []hdr{{"Idempotency-Key", `""`}}, 400, "idempotency_key_missing", ""},
		{"key checked before body", u1, "POST", "/api/v1/orders", raw(`{"quantity": 0}`), nil, 400, "idempotency_key_missing", ""},
		{"key and form token", u1, "POST", "/api/v1/orders", order, []hdr{key, {"X-Form-Token", "ABC"}}, 400, "invalid_request", "Idempotency-Key"},
		{"no token", anon, "POST", "/api/v1/orders", order, []hdr{key}, 401, "unauthenticated", ""},
		{"401 before key check", anon, "POST", "/api/v1/orders", order, nil, 401, "unauthenticated", ""},
		{"malformed token", client{t, in.base, "not.a.jwt"}, "GET", "/api/v1/orders", nil, nil, 401, "unauthenticated", ""},
		{"expired token", client{t, in.base, expired}, "GET", "/api/v1/orders", nil, nil, 401, "unauthenticated", ""},
		{"badly signed token", client{t, in.base, forged}, "GET", "/api/v1/orders", nil, nil, 401, "unauthenticated", ""},
		{"basic auth", anon, "GET", "/api/v1/orders", nil, []hdr{{"Authorization", "Basic dTpw"}}, 401, "unauthenticated", ""},
		{"user on create product", u1, "POST", "/api/v1/admin/products", map[string]any{"name": "x", "price_cents": 1, "stock": 1}, nil, 403, "forbidden", ""},
		{"user on restock", u1, "POST", "/api/v1/admin/products/" + pid + "/restock", map[string]int{"quantity": 1}, []hdr{key}, 403, "forbidden", ""},
		{"user on audit", u1, "GET", "/api/v1/admin/audit", nil, nil, 403, "forbidden", ""},
		{"admin on regular order", admin, "POST", "/api/v1/orders", order, []hdr{key}, 403, "forbidden", ""},
		{"admin on seckill", admin, "POST", "/api/v1/seckill/" + pid + "/orders", nil, nil, 403, "forbidden", ""},
		{"admin on list orders", admin, "GET", "/api/v1/orders", nil, nil, 403, "forbidden", ""},
		{"admin on form tokens", admin, "POST", "/api/v1/form-tokens", nil, nil, 403, "forbidden", ""},
		{"admin on cancel", admin, "POST", "/api/v1/orders/" + mine.OrderNo + "/cancel", nil, nil, 403, "forbidden", ""},
		{"another user's order", u2, "GET", "/api/v1/orders/" + mine.OrderNo, nil, nil, 404, "not_found", ""},
		{"another user's cancel", u2, "POST", "/api/v1/orders/" + mine.OrderNo + "/cancel", nil, nil, 404, "not_found", ""},
		{"unknown order", u1, "GET", "/api/v1/orders/SNOPE", nil, nil, 404, "not_found", ""},
		{"cancel with a field", u1, "POST", "/api/v1/orders/" + mine.OrderNo + "/cancel", raw(`{"reason": "x"}`), nil, 400, "invalid_request", "reason"},
		{"form token with a field", u1, "POST", "/api/v1/form-tokens", raw(`{"a": 1}`), nil, 400, "invalid_request", "a"},
		{"orders limit 0", u1, "GET", "/api/v1/orders?limit=0", nil, nil, 400, "invalid_request", "limit"},
		{"orders limit 201", u1, "GET", "/api/v1/orders?limit=201", nil, nil, 400, "invalid_request", "limit"},
		{"orders limit x", u1, "GET", "/api/v1/orders?limit=x", nil, nil, 400, "invalid_request", "limit"},
		{"orders forged cursor", u1, "GET", "/api/v1/orders?cursor=abc.def", nil, nil, 400, "invalid_request", "cursor"},
		{"orders with a product cursor", u1, "GET", "/api/v1/orders?cursor=" + productCursor, nil, nil, 400, "invalid_request", "cursor"},
		{"products limit 0", anon, "GET", "/api/v1/products?limit=0", nil, nil, 400, "invalid_request", "limit"},
		{"products limit 201", anon, "GET", "/api/v1/products?limit=201", nil, nil, 400, "invalid_request", "limit"},
		{"products forged cursor", anon, "GET", "/api/v1/products?cursor=" + tampered, nil, nil, 400, "invalid_request", "cursor"},
		{"product name empty", admin, "POST", "/api/v1/admin/products", map[string]any{"name": " ", "price_cents": 1, "stock": 1}, nil, 400, "invalid_request", "name"},
		{"product name too long", admin, "POST", "/api/v1/admin/products", map[string]any{"name": strings.Repeat("n", 201), "price_cents": 1, "stock": 1}, nil, 400, "invalid_request", "name"},
		{"product price negative", admin, "POST", "/api/v1/admin/products", map[string]any{"name": "x", "price_cents": -1, "stock": 1}, nil, 400, "invalid_request", "price_cents"},
		{"product price too high", admin, "POST", "/api/v1/admin/products", map[string]any{"name": "x", "price_cents": 100000001, "stock": 1}, nil, 400, "invalid_request", "price_cents"},
		{"product stock negative", admin, "POST", "/api/v1/admin/products", map[string]any{"name": "x", "price_cents": 1, "stock": -1}, nil, 400, "invalid_request", "stock"},
		{"product stock missing", admin, "POST", "/api/v1/admin/products", map[string]any{"name": "x", "price_cents": 1}, nil, 400, "invalid_request", "stock"},
		{"product key malformed", admin, "POST", "/api/v1/admin/products", map[string]any{"name": "x", "price_cents": 1, "stock": 1}, []hdr{{"Idempotency-Key", "a b"}}, 400, "idempotency_key_missing", ""},
		{"restock key missing", admin, "POST", "/api/v1/admin/products/" + pid + "/restock", map[string]int{"quantity": 1}, nil, 400, "idempotency_key_missing", ""},
		{"restock 0", admin, "POST", "/api/v1/admin/products/" + pid + "/restock", map[string]int{"quantity": 0}, []hdr{key}, 400, "invalid_request", "quantity"},
		{"restock 1000001", admin, "POST", "/api/v1/admin/products/" + pid + "/restock", map[string]int{"quantity": 1000001}, []hdr{key}, 400, "invalid_request", "quantity"},
		{"restock non-numeric id", admin, "POST", "/api/v1/admin/products/abc/restock", map[string]int{"quantity": 1}, []hdr{key}, 404, "not_found", ""},
		{"restock unknown product", admin, "POST", "/api/v1/admin/products/999999/restock", map[string]int{"quantity": 1}, []hdr{key}, 404, "not_found", ""},
		{"audit bad product_id", admin, "GET", "/api/v1/admin/audit?product_id=x", nil, nil, 400, "invalid_request", "product_id"},
		{"audit unknown product", admin, "GET", "/api/v1/admin/audit?product_id=999999", nil, nil, 404, "not_found", ""},
		{"token user_id 0", anon, "POST", "/api/v1/auth/token", map[string]int{"user_id": 0}, nil, 400, "invalid_request", "user_id"},
		{"token user_id 2^53", anon, "POST", "/api/v1/auth/token", raw(`{"user_id": 9007199254740992}`), nil, 400, "invalid_request", "user_id"},
		{"token user_id missing", anon, "POST", "/api/v1/auth/token", raw(`{}`), nil, 400, "invalid_request", "user_id"},
		{"token user_id string", anon, "POST", "/api/v1/auth/token", raw(`{"user_id": "42"}`), nil, 400, "invalid_request", "user_id"},
		{"unknown route", anon, "GET", "/api/v1/nope", nil, nil, 404, "not_found", ""},
		{"unknown top-level route", anon, "GET", "/nope", nil, nil, 404, "not_found", ""},
		{"wrong method on orders", u1, "DELETE", "/api/v1/orders", nil, nil, 405, "method_not_allowed", ""},
		{"wrong method on seckill", u1, "GET", "/api/v1/seckill/" + pid + "/orders", nil, nil, 405, "method_not_allowed", ""},
		{"wrong method on product", admin, "PUT", "/api/v1/products/" + pid, order, nil, 405, "method_not_allowed", ""},
	}
	for _, tc := range tests {
		r := tc.c.do(tc.method, tc.path, tc.body, tc.headers...)
		if !r.want(t, tc.status, tc.code) {
			t.Errorf("  (case %q)", tc.name)
			continue
		}
		if tc.field != "" {
			if _, ok := r.problem().Errors[tc.field]; !ok {
				t.Errorf("%s: %v; want errors[%q]", tc.name, r, tc.field)
			}
		}
	}
	if after := snapshot(); after != before {
		t.Errorf("bad requests changed the database: %s -> %s", before, after)
	}
	// The refused requests left their keys free: the same key now works.
	u1.regular(p.ID, 1, "k1").want(t, http.StatusCreated, "")
	if r := u1.do("GET", "/api/v1/orders/"+mine.OrderNo, nil); r.want(t, http.StatusOK, "") && orderKey(r.order(t)) != orderKey(mine) {
		t.Errorf("GET order: %v, want %+v", r, mine)
	}
}

// TestHealthAuthAndBusy covers the public routes, the demo login, and 503
// busy (a product lock held elsewhere) with what busy must leave behind: no
// stored idempotency record, the form token back, nothing changed.
func TestHealthAuthAndBusy(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	in := b.start(t, map[string]string{"SHOP_LOCK_WAIT": "500ms"})
	anon, admin := in.anon(t), in.admin(t)

	var health map[string]any
	anon.do("GET", "/healthz", nil).json(t, &health)
	anon.do("GET", "/readyz", nil).want(t, http.StatusOK, "")
	if r := anon.do("GET", "/metrics", nil); !r.want(t, http.StatusOK, "") || !bytes.Contains(r.body, []byte("shop_http_requests_total")) {
		t.Errorf("/metrics: %.200s", r.body)
	}
	doc, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if r := anon.do("GET", "/openapi.json", nil); !r.want(t, http.StatusOK, "") || !bytes.Equal(r.body, doc) {
		t.Error("/openapi.json does not serve openapi.json")
	}

	// Demo login: a token that works on the user routes, of any instance.
	r := anon.do("POST", "/api/v1/auth/token", map[string]int{"user_id": 42})
	var tok wire.Login
	r.json(t, &tok)
	exp, _ := time.Parse(time.RFC3339Nano, tok.ExpiresAt)
	if tok.UserID != 42 || tok.Token == "" || time.Until(exp) < 23*time.Hour || time.Until(exp) > 25*time.Hour {
		t.Errorf("token: %v", r)
	}
	u42 := client{t, in.base, tok.Token}
	var page wire.Page[wire.Order]
	u42.do("GET", "/api/v1/orders", nil).json(t, &page)
	if len(page.Items) != 0 || page.NextCursor != nil {
		t.Errorf("new user's orders: %+v", page)
	}

	// Busy: hold the product lock as another instance would.
	u := in.user(t, 7)
	p := admin.createProduct("busy", 100, 10)
	pending := u.regular(p.ID, 1, "before").order(t)
	formTok := u.do("POST", "/api/v1/form-tokens", nil)
	var ft wire.FormToken
	formTok.json(t, &ft)
	locks := lockx.New(b.rdb, lockx.Options{Prefix: b.prefix + "lock:"})
	defer locks.Close()
	ctx := context.Background()
	held, err := locks.Acquire(ctx, "product:"+id(p.ID), lockx.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	before := fmt.Sprint(b.stock(t, p.ID), b.count(t, "SELECT COUNT(*) FROM orders"), b.count(t, "SELECT COUNT(*) FROM stock_ledger"))
	restockBody := map[string]int{"quantity": 5}
	u.seckill(p.ID).want(t, http.StatusServiceUnavailable, "busy")
	u.regular(p.ID, 2, "during").want(t, http.StatusServiceUnavailable, "busy")
	u.do("POST", "/api/v1/orders", map[string]int64{"product_id": p.ID, "quantity": 1}, hdr{"X-Form-Token", ft.Token}).want(t, http.StatusServiceUnavailable, "busy")
	admin.do("POST", "/api/v1/admin/products/"+id(p.ID)+"/restock", restockBody, hdr{"Idempotency-Key", "rs"}).want(t, http.StatusServiceUnavailable, "busy")
	u.do("POST", "/api/v1/orders/"+pending.OrderNo+"/cancel", nil).want(t, http.StatusServiceUnavailable, "busy")

	// A request still in flight (waiting for the lock) holds its key: the
	// same request again is 409 idempotency_key_in_use.
	inFlight := make(chan reply, 1)
	go func() { inFlight <- u.regular(p.ID, 1, "in-flight") }()
	claimed := false
	for end := time.Now().Add(5 * time.Second); !claimed && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		keys, _ := b.rdb.Keys(ctx, b.prefix+"idem:*").Result()
		for _, k := range keys {
			claimed = claimed || b.rdb.HGet(ctx, k, "state").Val() == "run"
		}
	}
	if !claimed {
		t.Error("the in-flight request never claimed its key")
	}
	u.regular(p.ID, 1, "in-flight").want(t, http.StatusConflict, "idempotency_key_in_use")
	(<-inFlight).want(t, http.StatusServiceUnavailable, "busy")

	if after := fmt.Sprint(b.stock(t, p.ID), b.count(t, "SELECT COUNT(*) FROM orders"), b.count(t, "SELECT COUNT(*) FROM stock_ledger")); after != before {
		t.Errorf("503 busy changed the database: %s -> %s", before, after)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Nothing was stored for the keys and the form token is back.
	if r := u.regular(p.ID, 2, "during"); r.want(t, http.StatusCreated, "") && r.replayed() {
		t.Errorf("retry after busy was replayed: %v", r)
	}
	u.do("POST", "/api/v1/orders", map[string]int64{"product_id": p.ID, "quantity": 1}, hdr{"X-Form-Token", ft.Token}).want(t, http.StatusCreated, "")
	admin.do("POST", "/api/v1/admin/products/"+id(p.ID)+"/restock", restockBody, hdr{"Idempotency-Key", "rs"}).want(t, http.StatusOK, "")
	u.do("POST", "/api/v1/orders/"+pending.OrderNo+"/cancel", nil).want(t, http.StatusOK, "")
	u.seckill(p.ID).want(t, http.StatusCreated, "")
	if s := b.stock(t, p.ID); s != 10-1+5-2-1+1-1 {
		t.Errorf("stock %d, want 11", s)
	}

	// The lab routes (served by default) answer as documented.
	admin.do("GET", "/api/v1/admin/lab/info", nil).want(t, http.StatusOK, "")
	admin.do("GET", "/api/v1/admin/lab/races/nope", nil).want(t, http.StatusNotFound, "not_found")
	admin.do("POST", "/api/v1/admin/lab/races", map[string]int{"buyers": 0}).want(t, http.StatusBadRequest, "invalid_request")
	started := admin.do("POST", "/api/v1/admin/lab/races", map[string]int{"stock": 2, "buyers": 5})
	if !started.want(t, http.StatusAccepted, "") {
		return
	}
	var race struct {
		Done    bool  `json:"done"`
		Created int64 `json:"created"`
		Audit   *struct {
			OK bool `json:"ok"`
		} `json:"audit"`
	}
	for end := time.Now().Add(20 * time.Second); !race.Done; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("lab race not done in 20s")
		}
		admin.do("GET", started.header.Get("Location"), nil).json(t, &race)
	}
	if race.Created != 2 || race.Audit == nil || !race.Audit.OK {
		t.Errorf("lab race: %+v", race)
	}
}

// TestDemoLoginOffAndNotReady: with SHOP_DEMO_LOGIN=false the login route
// is 404 (tokens signed with the secret still work); /readyz is 503 while
// Redis is down.
func TestDemoLoginOffAndNotReady(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	rs := testenv.StartRedisServer(t)
	in := b.start(t, map[string]string{"SHOP_DEMO_LOGIN": "false", "SHOP_REDIS_URL": rs.URL()})
	in.anon(t).do("POST", "/api/v1/auth/token", map[string]int{"user_id": 1}).want(t, http.StatusNotFound, "not_found")
	in.user(t, 1).do("GET", "/api/v1/orders", nil).want(t, http.StatusOK, "")
	in.anon(t).do("GET", "/readyz", nil).want(t, http.StatusOK, "")
	rs.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := in.anon(t).do("GET", "/readyz", nil)
		if r.status == http.StatusServiceUnavailable {
			r.want(t, http.StatusServiceUnavailable, "not_ready")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz with Redis down: %v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	in.anon(t).do("GET", "/healthz", nil).want(t, http.StatusOK, "")
	rs.Start()
	for deadline = time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if in.anon(t).do("GET", "/readyz", nil).status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz not 200 again after Redis came back")
		}
	}
}

// TestIdempotencyKeys covers the Idempotency-Key rules of regular orders,
// product creation and restock, including a Redis that lost its records.
func TestIdempotencyKeys(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	in := b.start(t, nil)
	admin, u1, u2 := in.admin(t), in.user(t, 1), in.user(t, 2)
	p := admin.createProduct("keys", 150, 100)
	pid := id(p.ID)

	t.Run("replay byte for byte", func(t *testing.T) {
		first := u1.do("POST", "/api/v1/orders", raw(`{"product_id":`+pid+`,"quantity":2}`), hdr{"Idempotency-Key", "k-1"})
		first.want(t, http.StatusCreated, "")
		o := first.order(t)
		if first.replayed() || first.header.Get("Location") != "/api/v1/orders/"+o.OrderNo || o.AmountCents != 300 || o.Kind != "regular" {
			t.Errorf("first: %v %v", first, first.header)
		}
		for _, retry := range []struct {
			body raw
			key  string
		}{
			{raw(`{"product_id":` + pid + `,"quantity":2}`), "k-1"},
			{raw("{ \"quantity\" : 2 ,\n\t\"product_id\": " + pid + " }"), "k-1"}, // order and whitespace
			{raw(`{"product_id":` + pid + `,"quantity":2}`), `"k-1"`},             // RFC 8941 quoted form
		} {
			r := u1.do("POST", "/api/v1/orders", retry.body, hdr{"Idempotency-Key", retry.key})
			if r.status != first.status || !bytes.Equal(r.body, first.body) || !r.replayed() ||
				r.header.Get("Location") != first.header.Get("Location") {
				t.Errorf("retry %q: %v (replayed %v), want the first answer replayed", retry.body, r, r.replayed())
			}
		}
		u1.do("POST", "/api/v1/orders", raw(`{"product_id":`+pid+`,"quantity":3}`), hdr{"Idempotency-Key", "k-1"}).want(t, http.StatusUnprocessableEntity, "idempotency_key_reused")
		// Another user's key is another key.
		if r := u2.regular(p.ID, 2, "k-1"); r.want(t, http.StatusCreated, "") && (r.replayed() || r.order(t).OrderNo == o.OrderNo) {
			t.Errorf("user 2 with user 1's key: %v", r)
		}
		if n := b.count(t, "SELECT COUNT(*) FROM orders WHERE user_id = 1"); n != 1 {
			t.Errorf("user 1 has %d orders, want 1", n)
		}
	})

	t.Run("concurrent retries", func(t *testing.T) {
		u3 := in.user(t, 3)
		answers := make([]reply, 10)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range answers {
			wg.Go(func() {
				<-start
				answers[i] = u3.regular(p.ID, 1, "race-1")
			})
		}
		close(start)
		wg.Wait()
		var first *reply
		for i, r := range answers {
			if r.status == http.StatusCreated && !r.replayed() {
				if first != nil {
					t.Errorf("two first answers: %v and %v", first, r)
				}
				first = &answers[i]
			}
		}
		if first == nil {
			t.Fatalf("no 201: %v", answers)
		}
		for _, r := range answers {
			switch {
			case r.status == http.StatusConflict && r.problem().Code == "idempotency_key_in_use":
			case (r.status == http.StatusCreated || r.status == http.StatusOK) && bytes.Equal(r.body, first.body):
			default:
				t.Errorf("concurrent retry: %v", r)
			}
		}
		if n := b.count(t, "SELECT COUNT(*) FROM orders WHERE user_id = 3"); n != 1 {
			t.Errorf("%d orders from ten concurrent retries, want 1", n)
		}
	})

	t.Run("stored business outcomes", func(t *testing.T) {
		u4 := in.user(t, 4)
		scarce := admin.createProduct("scarce", 10, 1)
		first := u4.regular(scarce.ID, 5, "big")
		first.want(t, http.StatusConflict, "insufficient_stock")
		admin.do("POST", "/api/v1/admin/products/"+id(scarce.ID)+"/restock", map[string]int{"quantity": 100}, hdr{"Idempotency-Key", "more"}).want(t, http.StatusOK, "")
		if r := u4.regular(scarce.ID, 5, "big"); r.status != http.StatusConflict || !bytes.Equal(r.body, first.body) || !r.replayed() {
			t.Errorf("retry of a stored 409: %v (replayed %v)", r, r.replayed())
		}
		u4.regular(scarce.ID, 5, "big-2").want(t, http.StatusCreated, "")
		nf := u4.regular(999999, 1, "nf")
		nf.want(t, http.StatusNotFound, "not_found")
		if r := u4.regular(999999, 1, "nf"); !r.replayed() || !bytes.Equal(r.body, nf.body) {
			t.Errorf("retry of a stored 404: %v", r)
		}
		// Zero stock: regular orders say insufficient_stock, seckill sold_out.
		empty := admin.createProduct("empty", 10, 0)
		u4.regular(empty.ID, 1, "zero").want(t, http.StatusConflict, "insufficient_stock")
		u4.seckill(empty.ID).want(t, http.StatusConflict, "sold_out")
	})

	t.Run("lost Redis record", func(t *testing.T) {
		u5 := in.user(t, 5)
		first := u5.regular(p.ID, 1, "lost-1")
		first.want(t, http.StatusCreated, "")
		o := first.order(t)
		b.forgetRedis(t)
		r := u5.regular(p.ID, 1, "lost-1")
		if r.want(t, http.StatusOK, "") && (!r.replayed() || orderKey(r.order(t)) != orderKey(o) || r.header.Get("Location") != first.header.Get("Location")) {
			t.Errorf("retry after Redis forgot: %v (replayed %v), want order %s", r, r.replayed(), o.OrderNo)
		}
		b.forgetRedis(t)
		u5.regular(p.ID, 2, "lost-1").want(t, http.StatusUnprocessableEntity, "idempotency_key_reused")
		if n := b.count(t, "SELECT COUNT(*) FROM orders WHERE user_id = 5"); n != 1 {
			t.Errorf("user 5 has %d orders, want 1", n)
		}
		if out, err := b.verify(t); err != nil {
			t.Errorf("verify: %v\n%s", err, out)
		}
	})

	t.Run("product create and restock", func(t *testing.T) {
		products := b.count(t, "SELECT COUNT(*) FROM products")
		body := map[string]any{"name": "once", "price_cents": 5, "stock": 7}
		first := admin.do("POST", "/api/v1/admin/products", body, hdr{"Idempotency-Key", "pc-1"})
		first.want(t, http.StatusCreated, "")
		made := first.product(t)
		if first.header.Get("Location") != "/api/v1/products/"+id(made.ID) {
			t.Errorf("create: Location %q", first.header.Get("Location"))
		}
		if r := admin.do("POST", "/api/v1/admin/products", body, hdr{"Idempotency-Key", "pc-1"}); !r.replayed() || !bytes.Equal(r.body, first.body) || r.status != http.StatusCreated {
			t.Errorf("retried create: %v", r)
		}
		b.forgetRedis(t)
		if r := admin.do("POST", "/api/v1/admin/products", body, hdr{"Idempotency-Key", "pc-1"}); r.want(t, http.StatusOK, "") && (!r.replayed() || r.product(t) != made) {
			t.Errorf("create retried after Redis forgot: %v", r)
		}
		b.forgetRedis(t)
		body["stock"] = 8
		admin.do("POST", "/api/v1/admin/products", body, hdr{"Idempotency-Key", "pc-1"}).want(t, http.StatusUnprocessableEntity, "idempotency_key_reused")
		if n := b.count(t, "SELECT COUNT(*) FROM products"); n != products+1 {
			t.Errorf("%d products made by one key, want 1", n-products)
		}

		path := "/api/v1/admin/products/" + id(made.ID) + "/restock"
		first = admin.do("POST", path, map[string]int{"quantity": 5}, hdr{"Idempotency-Key", "rs-1"})
		if first.want(t, http.StatusOK, "") && first.product(t).Stock != 12 {
			t.Errorf("restock: %v", first)
		}
		admin.do("POST", path, map[string]int{"quantity": 6}, hdr{"Idempotency-Key", "rs-1"}).want(t, http.StatusUnprocessableEntity, "idempotency_key_reused")
		b.forgetRedis(t)
		if r := admin.do("POST", path, map[string]int{"quantity": 5}, hdr{"Idempotency-Key", "rs-1"}); r.want(t, http.StatusOK, "") && r.product(t).Stock != 12 {
			t.Errorf("restock retried after Redis forgot added again: %v", r)
		}
		if s := b.stock(t, made.ID); s != 12 {
			t.Errorf("stock %d, want 12", s)
		}
	})
}

// TestOrders covers form tokens, cancellation, a user racing itself on the
// seckill route, and pagination.
func TestOrders(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	in := b.start(t, nil)
	admin, u1, u2 := in.admin(t), in.user(t, 1), in.user(t, 2)
	p := admin.createProduct("orders", 200, 20)

	t.Run("form tokens", func(t *testing.T) {
		issue := func(c client) string {
			r := c.do("POST", "/api/v1/form-tokens", nil)
			var ft wire.FormToken
			r.json(t, &ft)
			exp, _ := time.Parse(time.RFC3339Nano, ft.ExpiresAt)
			if r.status != http.StatusCreated || ft.Token == "" || time.Until(exp) < 4*time.Minute || time.Until(exp) > 6*time.Minute {
				t.Errorf("issue: %v", r)
			}
			return ft.Token
		}
		use := func(c client, tok string) reply {
			return c.do("POST", "/api/v1/orders", map[string]int64{"product_id": p.ID, "quantity": 1}, hdr{"X-Form-Token", tok})
		}
		tok := issue(u1)
		first := use(u1, tok)
		first.want(t, http.StatusCreated, "")
		use(u1, tok).want(t, http.StatusConflict, "form_token_invalid")
		use(u1, "UNKNOWNTOKEN").want(t, http.StatusConflict, "form_token_invalid")
		tok2 := issue(u1)
		use(u2, tok2).want(t, http.StatusConflict, "form_token_invalid") // not user 2's
		if r := use(u1, tok2); r.want(t, http.StatusCreated, "") && r.order(t).OrderNo == first.order(t).OrderNo {
			t.Error("two form tokens made one order number")
		}
		u1.do("POST", "/api/v1/orders", map[string]int64{"product_id": p.ID, "quantity": 1},
			hdr{"X-Form-Token", issue(u1)}, hdr{"Idempotency-Key", "both"}).want(t, http.StatusBadRequest, "invalid_request")
		if n := b.count(t, "SELECT COUNT(*) FROM orders WHERE user_id = 1"); n != 2 {
			t.Errorf("user 1 has %d orders, want 2", n)
		}
	})

	t.Run("cancel", func(t *testing.T) {
		u3 := in.user(t, 3)
		stock := b.stock(t, p.ID)
		o := u3.regular(p.ID, 4, "to-cancel").order(t)
		first := u3.do("POST", "/api/v1/orders/"+o.OrderNo+"/cancel", nil)
		c := first.order(t)
		if first.status != http.StatusOK || c.Status != "cancelled" || c.CancelledAt == nil || c.OrderNo != o.OrderNo {
			t.Fatalf("cancel: %v", first)
		}
		again := u3.do("POST", "/api/v1/orders/"+o.OrderNo+"/cancel", raw(`{}`))
		if again.status != http.StatusOK || orderKey(again.order(t)) != orderKey(c) {
			t.Errorf("cancel again: %v, want %s", again, first.body)
		}
		if s := b.stock(t, p.ID); s != stock {
			t.Errorf("stock %d after two cancels, want %d", s, stock)
		}
		if n := b.count(t, "SELECT COUNT(*) FROM stock_ledger WHERE order_no = ? AND reason = 'cancel'", o.OrderNo); n != 1 {
			t.Errorf("%d cancel ledger rows, want 1", n)
		}
		u2.do("POST", "/api/v1/orders/"+o.OrderNo+"/cancel", nil).want(t, http.StatusNotFound, "not_found")

		paid := u3.regular(p.ID, 1, "paid").order(t)
		if _, err := b.db.Exec("UPDATE orders SET status = 'paid', paid_at = UTC_TIMESTAMP(6), version = version + 1 WHERE order_no = ?", paid.OrderNo); err != nil {
			t.Fatal(err)
		}
		u3.do("POST", "/api/v1/orders/"+paid.OrderNo+"/cancel", nil).want(t, http.StatusConflict, "invalid_state")

		// A cancelled seckill order is still the user's one order for the product.
		sk := u3.seckill(p.ID).order(t)
		u3.do("POST", "/api/v1/orders/"+sk.OrderNo+"/cancel", nil).want(t, http.StatusOK, "")
		if r := u3.seckill(p.ID); r.want(t, http.StatusOK, "") && (!r.replayed() || r.order(t).Status != "cancelled") {
			t.Errorf("seckill after its cancellation: %v", r)
		}
		if out, err := b.verify(t, "--product", id(p.ID)); err != nil {
			t.Errorf("verify: %v\n%s", err, out)
		}
	})

	t.Run("user races itself", func(t *testing.T) {
		u4 := in.user(t, 4)
		answers := make([]reply, 20)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range answers {
			wg.Go(func() {
				<-start
				answers[i] = u4.seckill(p.ID)
			})
		}
		close(start)
		wg.Wait()
		created, named := 0, map[string]bool{}
		for _, r := range answers {
			switch {
			case r.status == http.StatusCreated && !r.replayed():
				created++
				named[r.order(t).OrderNo] = true
			case r.status == http.StatusOK && r.replayed() && r.header.Get("Location") != "":
				named[r.order(t).OrderNo] = true
			case r.status == http.StatusServiceUnavailable && r.problem().Code == "busy":
			default:
				t.Errorf("user racing itself: %v", r)
			}
		}
		if created != 1 || len(named) != 1 {
			t.Errorf("%d created, %d order numbers named; want 1 and 1", created, len(named))
		}
		if n := b.count(t, "SELECT COUNT(*) FROM orders WHERE user_id = 4"); n != 1 {
			t.Errorf("%d orders, want 1", n)
		}
	})

	t.Run("pagination", func(t *testing.T) {
		u9 := in.user(t, 9)
		var want []string
		for i := range 5 {
			want = append(want, u9.regular(p.ID, 1, "page-"+id(int64(i))).order(t).OrderNo)
		}
		u2.regular(p.ID, 1, "not-mine").want(t, http.StatusCreated, "")
		var got []wire.Order
		path := "/api/v1/orders?limit=2"
		for pages := 0; ; pages++ {
			if pages == 5 {
				t.Fatal("more pages than orders")
			}
			var pg wire.Page[wire.Order]
			u9.do("GET", path, nil).json(t, &pg)
			got = append(got, pg.Items...)
			if pg.NextCursor == nil {
				if pages != 2 || len(pg.Items) != 1 {
					t.Errorf("last page: %d items on page %d", len(pg.Items), pages)
				}
				break
			}
			path = "/api/v1/orders?limit=2&cursor=" + *pg.NextCursor
		}
		var nos []string
		for i, o := range got {
			nos = append(nos, o.OrderNo)
			if o.UserID != 9 {
				t.Errorf("another user's order listed: %+v", o)
			}
			if i > 0 && (o.CreatedAt > got[i-1].CreatedAt || o.CreatedAt == got[i-1].CreatedAt && o.OrderNo > got[i-1].OrderNo) {
				t.Errorf("not newest first: %+v after %+v", o, got[i-1])
			}
		}
		slices.Sort(nos)
		slices.Sort(want)
		if !slices.Equal(nos, want) {
			t.Errorf("pages listed %v, want %v", nos, want)
		}
		var all wire.Page[wire.Order]
		u9.do("GET", "/api/v1/orders?limit=5", nil).json(t, &all)
		if len(all.Items) != 5 || all.NextCursor != nil {
			t.Errorf("limit 5 of 5: %d items, next %v", len(all.Items), all.NextCursor)
		}

		for range 3 {
			admin.createProduct("more", 1, 1)
		}
		var ids []int64
		path = "/api/v1/products?limit=2"
		for pages := 0; path != ""; pages++ {
			if pages == 50 {
				t.Fatal("too many product pages")
			}
			var pg wire.Page[wire.Product]
			in.anon(t).do("GET", path, nil).json(t, &pg)
			for _, x := range pg.Items {
				ids = append(ids, x.ID)
			}
			path = ""
			if pg.NextCursor != nil {
				path = "/api/v1/products?limit=2&cursor=" + *pg.NextCursor
			}
		}
		if int64(len(ids)) != b.count(t, "SELECT COUNT(*) FROM products") || !slices.IsSorted(ids) {
			t.Errorf("product pages: %v", ids)
		}
		var dflt wire.Page[wire.Product]
		in.anon(t).do("GET", "/api/v1/products", nil).json(t, &dflt)
		if len(dflt.Items) != len(ids) || dflt.NextCursor != nil {
			t.Errorf("default page: %d items, next %v", len(dflt.Items), dflt.NextCursor)
		}
		if r := in.anon(t).do("GET", "/api/v1/products/"+id(p.ID), nil); r.want(t, http.StatusOK, "") && r.product(t).ID != p.ID {
			t.Errorf("GET product: %v", r)
		}
	})
}
