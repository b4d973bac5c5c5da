package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/lockx"
)

// rawRequest sends text on a fresh connection and returns the status line
// of the answer.
func rawRequest(t *testing.T, base, text string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, text); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	return strings.TrimSpace(line)
}

// TestStrictInput: exact-case field names, no duplicate keys, the
// fingerprint over the decoded request, canonical path ids, a null seckill
// body, clear number messages, nosniff, and no Content-Length beside
// Transfer-Encoding (issue 11 items 5, 6, 8).
func TestStrictInput(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	in := b.start(t, nil)
	admin, u1 := in.admin(t), in.user(t, 1)
	p := admin.createProduct("strict", 100, 50)
	pid := id(p.ID)
	orders := func() int64 { return b.count(t, "SELECT COALESCE(SUM(quantity), 0) FROM orders") }

	for _, body := range []string{
		`{"product_id": ` + pid + `, "quantity": 1, "QUANTITY": 5}`,
		`{"product_id": ` + pid + `, "quantity": 1, "quantity": 5}`,
		`{"Product_id": ` + pid + `, "quantity": 1}`,
		`{"product_id": ` + pid + `, "quantity": 1e3}`,
		`{"product_id": 99999999999999999999, "quantity": 1}`,
	} {
		r := u1.do("POST", "/api/v1/orders", raw(body), hdr{"Idempotency-Key", "case"})
		r.want(t, http.StatusBadRequest, "invalid_request")
		if strings.Contains(body, "e3") || strings.Contains(body, "9999") {
			if msg := fmt.Sprint(r.problem().Errors); !strings.Contains(msg, "integer") {
				t.Errorf("%s: errors %s do not say an integer is wanted", body, msg)
			}
		}
	}
	if n := orders(); n != 0 {
		t.Fatalf("refused bodies made orders of %d units", n)
	}
	// Equivalent bodies share a fingerprint; a different one is 422.
	u1.do("POST", "/api/v1/orders", raw(`{"product_id":`+pid+`,"quantity":2}`), hdr{"Idempotency-Key", "fp"}).want(t, http.StatusCreated, "")
	r := u1.do("POST", "/api/v1/orders", raw(` { "quantity" : 2 , "product_id" : `+pid+` } `), hdr{"Idempotency-Key", "fp"})
	if r.want(t, http.StatusCreated, "") && !r.replayed() {
		t.Errorf("an equivalent body was not replayed: %v", r)
	}
	u1.do("POST", "/api/v1/orders", raw(`{"product_id":`+pid+`,"quantity":3}`), hdr{"Idempotency-Key", "fp"}).want(t, http.StatusUnprocessableEntity, "idempotency_key_reused")

	// Canonical ids only.
	in.anon(t).do("GET", "/api/v1/products/"+pid, nil).want(t, http.StatusOK, "")
	for _, path := range []string{"/api/v1/products/0" + pid, "/api/v1/products/%2B" + pid, "/api/v1/products/+" + pid, "/api/v1/products/" + pid + ".0"} {
		in.anon(t).do("GET", path, nil).want(t, http.StatusNotFound, "not_found")
	}
	stock := b.stock(t, p.ID)
	admin.do("POST", "/api/v1/admin/products/0"+pid+"/restock", map[string]int{"quantity": 5}, hdr{"Idempotency-Key", "rk"}).want(t, http.StatusNotFound, "not_found")
	u1.do("POST", "/api/v1/seckill/0"+pid+"/orders", nil).want(t, http.StatusNotFound, "not_found")
	if got := b.stock(t, p.ID); got != stock {
		t.Errorf("stock %d after refused requests, want %d", got, stock)
	}

	// A seckill body of null is neither empty nor {}.
	u1.do("POST", "/api/v1/seckill/"+pid+"/orders", raw("null")).want(t, http.StatusBadRequest, "invalid_request")

	// nosniff on answers of every kind.
	for _, r := range []reply{in.anon(t).do("GET", "/api/v1/products/"+pid, nil), in.anon(t).do("GET", "/api/v1/products/x", nil)} {
		if r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%v: no X-Content-Type-Options: nosniff", r)
		}
	}

	// Content-Length together with chunked Transfer-Encoding is refused.
	line := rawRequest(t, in.base, "POST /api/v1/auth/token HTTP/1.1\r\nHost: shop\r\nContent-Type: application/json\r\n"+
		"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\nd\r\n{\"user_id\":1}\r\n0\r\n\r\n")
	if !strings.HasPrefix(line, "HTTP/1.1 400") {
		t.Errorf("Content-Length with Transfer-Encoding: %q, want 400", line)
	}
	line = rawRequest(t, in.base, "POST /api/v1/auth/token HTTP/1.1\r\nHost: shop\r\nContent-Type: application/json\r\n"+
		"Transfer-Encoding: chunked\r\n\r\nd\r\n{\"user_id\":1}\r\n0\r\n\r\n")
	if !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Errorf("chunked alone: %q, want 200", line)
	}
}

// TestMadeUpMethodsAndBogusOrderNumbers: 1,000 requests with made-up
// methods add at most one series to /metrics; a pay request for an order
// number that cannot be one is 404 and stores no idempotency record (items 2
// and 3).
func TestMadeUpMethodsAndBogusOrderNumbers(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	in := b.start(t, nil)
	series := func() (n int, other int) {
		resp, err := httpClient.Get(in.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, "shop_http_requests_total{") && !strings.Contains(l, `route="/metrics"`) {
				n++
				if strings.Contains(l, `method="OTHER"`) {
					other++
				}
			}
		}
		return n, other
	}
	before, _ := series()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 125 {
				m := fmt.Sprintf("XM%d%d", w, i)
				if i == 0 {
					m += strings.Repeat("Z", 20000)
				}
				req, _ := http.NewRequest(m, in.base+"/api/v1/products", nil)
				resp, err := httpClient.Do(req)
				if err != nil {
					t.Errorf("%s: %v", m[:8], err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusMethodNotAllowed {
					t.Errorf("%s: %d, want 405", m[:8], resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	after, other := series()
	if after-before > 1 || other != 1 {
		t.Errorf("made-up methods: %d series before, %d after (%d OTHER); want at most one more, labelled OTHER", before, after, other)
	}

	u := in.user(t, 1)
	for _, no := range []string{strings.Repeat("A", 30000), "not-an-order", "S" + strings.Repeat("A", 40)} {
		u.do("POST", "/api/v1/orders/"+no+"/pay", nil, hdr{"Idempotency-Key", "k"}).want(t, http.StatusNotFound, "not_found")
		u.do("GET", "/api/v1/orders/"+no, nil).want(t, http.StatusNotFound, "not_found")
		u.do("POST", "/api/v1/orders/"+no+"/cancel", nil).want(t, http.StatusNotFound, "not_found")
	}
	keys, err := b.rdb.Keys(context.Background(), b.prefix+"idem:*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("idempotency records after bogus order numbers: %d (%v), want none", len(keys), err)
	}
}

// TestSlowClientsAndConnectionCap: a body trickled one byte per half
// second is cut within SHOP_READ_TIMEOUT, and no more than SHOP_MAX_CONNS
// connections are served at once, one more answered 503 overloaded (item 4).
func TestSlowClientsAndConnectionCap(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	in := b.start(t, map[string]string{"SHOP_READ_TIMEOUT": "2s", "SHOP_MAX_CONNS": "4"})
	addr := strings.TrimPrefix(in.base, "http://")

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, _ = io.WriteString(conn, "POST /api/v1/auth/token HTTP/1.1\r\nHost: shop\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
	cut := make(chan time.Duration, 1)
	go func() { // the server closes the connection (after a 400 or without one)
		_, _ = io.Copy(io.Discard, conn)
		cut <- time.Since(start)
	}()
	var took time.Duration
trickle:
	for i := 0; ; i++ {
		select {
		case took = <-cut:
			break trickle
		case <-time.After(500 * time.Millisecond):
		}
		if time.Since(start) > 10*time.Second {
			conn.Close()
			t.Fatal("a trickled body held its connection for 10s; want it cut after SHOP_READ_TIMEOUT=2s")
		}
		_, _ = conn.Write([]byte{' '})
	}
	conn.Close()
	if took > 4*time.Second {
		t.Errorf("a trickled body was cut after %v, want about SHOP_READ_TIMEOUT=2s", took)
	}

	// Four open connections fill the cap; a fifth is answered 503
	// overloaded at once, and served once one of the four closes. The
	// trickled connection keeps its slot a little after the client sees it
	// closed (net/http half-closes, then waits before the full close), so a
	// connection refused meanwhile is dropped and dialled again.
	var open []net.Conn
	freed := time.Now().Add(5 * time.Second)
	for len(open) < 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		line := rawOn(t, c, "GET /healthz HTTP/1.1\r\nHost: shop\r\n\r\n")
		if strings.HasPrefix(line, "HTTP/1.1 503") && time.Now().Before(freed) {
			c.Close()
			time.Sleep(100 * time.Millisecond)
			continue
		}
		open = append(open, c)
		if !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("healthz on a kept-alive connection: %q", line)
		}
	}
	fresh := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := fresh.Get(in.base + "/healthz"); err != nil {
		t.Errorf("a fifth connection beside four open ones (SHOP_MAX_CONNS=4) got no answer: %v", err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("a fifth connection beside four open ones (SHOP_MAX_CONNS=4): %d Retry-After %q, want 503 overloaded", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	open[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := fresh.Get(in.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("after one of four connections closed, still not served: %v", err)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range open[1:] {
		c.Close()
	}
}

// rawOn sends text on an open connection and reads one answer's status
// line and headers (the body of /healthz is small and left unread).
func rawOn(t *testing.T, c net.Conn, text string) string {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, text); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

// TestRateLimitsAndUnpaidCap: with the default limits one user sending 300
// orders as fast as it can meets 429 with Retry-After and the RateLimit
// headers while a 20-request double click of another user and 40 distinct
// users never do; the unpaid-units cap refuses a new order but never a
// repeat; demo login is limited per client address, which X-Forwarded-For
// cannot choose (item 9).
func TestRateLimitsAndUnpaidCap(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	in := b.start(t, map[string]string{"SHOP_UNPAID_UNITS": "1000", "SHOP_RATE_LOGIN": "3/m:3"})
	admin := in.admin(t)
	p := admin.createProduct("limits", 1, 100_000)

	// One user, 300 orders, 10 at a time.
	u := in.user(t, 1)
	var mu sync.Mutex
	counts := map[int]int{}
	var limited reply
	var wg sync.WaitGroup
	next := make(chan int)
	go func() {
		for i := range 300 {
			next <- i
		}
		close(next)
	}()
	for range 10 {
		wg.Go(func() {
			for i := range next {
				r := u.regular(p.ID, 1, fmt.Sprintf("flood-%d", i))
				mu.Lock()
				counts[r.status]++
				if r.status == http.StatusTooManyRequests {
					limited = r
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if counts[http.StatusTooManyRequests] == 0 || counts[http.StatusCreated] == 0 || counts[http.StatusCreated]+counts[http.StatusTooManyRequests] != 300 {
		t.Fatalf("300 orders of one user: %v; want 201s and then 429s", counts)
	}
	limited.want(t, http.StatusTooManyRequests, "rate_limited")
	for _, h := range []string{"Retry-After", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
		if limited.header.Get(h) == "" {
			t.Errorf("429 without %s: %v", h, limited.header)
		}
	}
	if n := b.count(t, "SELECT COUNT(*) FROM orders WHERE user_id = 1"); n != int64(counts[http.StatusCreated]) {
		t.Errorf("%d orders for %d answers 201", n, counts[http.StatusCreated])
	}

	// A double-click storm: 20 at once, one order, no 429.
	storm := make([]reply, 20)
	u2 := in.user(t, 2)
	for i := range storm {
		wg.Go(func() { storm[i] = u2.seckill(p.ID) })
	}
	wg.Wait()
	for _, r := range storm {
		if r.status != http.StatusCreated && r.status != http.StatusOK && r.status != http.StatusServiceUnavailable {
			t.Errorf("double-click storm: %v", r)
		}
	}
	// Distinct users are never limited by one another.
	for i := range 40 {
		wg.Go(func() {
			if r := in.user(t, int64(100+i)).seckill(p.ID); r.status != http.StatusCreated {
				t.Errorf("distinct user %d: %v", 100+i, r)
			}
		})
	}
	wg.Wait()

	// Demo login: 3 a minute per address; a forged X-Forwarded-For is no
	// other address.
	anon := in.anon(t)
	for i := range 3 {
		anon.do("POST", "/api/v1/auth/token", map[string]int{"user_id": 7}, hdr{"X-Forwarded-For", fmt.Sprintf("10.0.0.%d", i)}).want(t, http.StatusOK, "")
	}
	anon.do("POST", "/api/v1/auth/token", map[string]int{"user_id": 7}, hdr{"X-Forwarded-For", "10.9.9.9"}).want(t, http.StatusTooManyRequests, "rate_limited")
}

// TestUnpaidUnitsCap: beyond SHOP_UNPAID_UNITS a new order is 409
// unpaid_limit; a repeat of an existing order is still answered, and paying
// or cancelling frees room.
func TestUnpaidUnitsCap(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	in := b.start(t, map[string]string{"SHOP_UNPAID_UNITS": "5"})
	p := in.admin(t).createProduct("cap", 1, 100)
	q := in.admin(t).createProduct("cap-seckill", 1, 100)
	u := in.user(t, 1)
	first := u.regular(p.ID, 3, "a").order(t)
	u.regular(p.ID, 2, "b").want(t, http.StatusCreated, "")
	u.regular(p.ID, 1, "c").want(t, http.StatusConflict, "unpaid_limit")
	u.seckill(q.ID).want(t, http.StatusConflict, "unpaid_limit")
	if r := u.regular(p.ID, 3, "a"); r.want(t, http.StatusCreated, "") && !r.replayed() { // a repeat: its order, not a refusal
		t.Errorf("a repeat beyond the cap: %v, want the first answer replayed", r)
	}
	b.forgetRedis(t) // the database answers the repeat
	u.regular(p.ID, 3, "a").want(t, http.StatusOK, "")
	u.do("POST", "/api/v1/orders/"+first.OrderNo+"/cancel", nil).want(t, http.StatusOK, "")
	u.regular(p.ID, 1, "c").want(t, http.StatusCreated, "")
	u.seckill(q.ID).want(t, http.StatusCreated, "")
	if n := b.count(t, "SELECT SUM(quantity) FROM orders WHERE user_id = 1 AND status = 'pending'"); n != 4 {
		t.Errorf("pending units %d, want 4", n)
	}
}

// TestRequestTimeout: a request ends by SHOP_REQUEST_TIMEOUT, whatever it
// waits for (here a product lock held elsewhere, with a longer lock wait):
// 503 with Retry-After, nothing changed (item 4).
func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	b := newBackend(t)
	in := b.start(t, map[string]string{"SHOP_REQUEST_TIMEOUT": "1s", "SHOP_LOCK_WAIT": "20s"})
	admin := in.admin(t)
	p := admin.createProduct("timeout", 1, 10)
	locks := lockx.New(b.rdb, lockx.Options{Prefix: b.prefix + "lock:"})
	t.Cleanup(func() { locks.Close() })
	held, err := locks.Acquire(context.Background(), "product:"+id(p.ID), lockx.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())
	start := time.Now()
	r := admin.do("POST", "/api/v1/admin/products/"+id(p.ID)+"/restock", map[string]int{"quantity": 5}, hdr{"Idempotency-Key", "slow"})
	took := time.Since(start)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Errorf("%v: want 503 with Retry-After", r)
	}
	if took > 5*time.Second {
		t.Errorf("the request took %v; want it ended by SHOP_REQUEST_TIMEOUT=1s", took)
	}
	if s := b.stock(t, p.ID); s != 10 {
		t.Errorf("stock %d after a timed-out restock, want 10", s)
	}
}
