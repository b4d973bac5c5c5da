package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/topo"
)

// TestDatabaseReadOnlyAndKilled faults a private MariaDB under a running
// instance whose user has no SUPER, as in production. Turned read-only (a
// demoted primary, or a proxy still pointing at a replica during a
// failover: error 1290), every write answers 503 unavailable with
// Retry-After, never 500, and changes nothing; reads still answer. Killed,
// every request is answered 503 (or from what needs no database), and once
// it is back the pool's dead connections are dropped and orders flow. The
// audit is clean at the end.
func TestDatabaseReadOnlyAndKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, err := topo.StartMariaDB(ctx, topo.MariaDBOptions{})
	if err != nil {
		t.Fatalf("a private MariaDB for this test (needs mariadbd and mariadb-install-db): %v", err)
	}
	t.Cleanup(m.Close)
	if err := m.CreateUser(ctx, "shop", "shop"); err != nil {
		t.Fatal(err)
	}
	b := newBackendOn(t, m.DSN("shop", "shop")+"?parseTime=true")
	in := b.start(t, nil)
	admin, u1, u2, u3 := in.admin(t), in.user(t, 1), in.user(t, 2), in.user(t, 3)
	p := admin.createProduct("read-only", 100, 20)
	pid := id(p.ID)
	admin.do("POST", "/api/v1/admin/wallets/2/credit", map[string]int64{"amount_cents": 10_000}, hdr{"Idempotency-Key", "c1"}).want(t, http.StatusOK, "")
	sk := u1.seckill(p.ID)
	sk.want(t, http.StatusCreated, "")
	unpaid := u2.regular(p.ID, 1, "r1").order(t)

	unavailable := func(what string, r reply) {
		t.Helper()
		if r.want(t, http.StatusServiceUnavailable, "unavailable") && r.header.Get("Retry-After") == "" {
			t.Errorf("%s: %v: no Retry-After", what, r)
		}
	}
	writes := func(round string) {
		t.Helper()
		unavailable(round+": seckill", u3.seckill(p.ID))
		unavailable(round+": regular order", u3.regular(p.ID, 1, "new-"+round))
		unavailable(round+": payment", u2.do("POST", "/api/v1/orders/"+unpaid.OrderNo+"/pay", nil, hdr{"Idempotency-Key", "p-" + round}))
		unavailable(round+": restock", admin.do("POST", "/api/v1/admin/products/"+pid+"/restock", map[string]int64{"quantity": 5}, hdr{"Idempotency-Key", "rs-" + round}))
	}

	if err := m.SetReadOnly(ctx, true); err != nil {
		t.Fatal(err)
	}
	writes("read-only")
	u1.do("GET", "/api/v1/orders/"+sk.order(t).OrderNo, nil).want(t, http.StatusOK, "")
	if n := b.count(t, "SELECT COUNT(*) FROM orders"); n != 2 {
		t.Errorf("orders after the read-only round: %d, want 2 (nothing written)", n)
	}
	if err := m.SetReadOnly(ctx, false); err != nil {
		t.Fatal(err)
	}

	m.Kill()
	start := time.Now()
	writes("killed")
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("four requests against a killed database took %s: each should be answered at once", d)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The retries, now that the database is back: each placed once.
	u3.seckill(p.ID).want(t, http.StatusCreated, "")
	u3.regular(p.ID, 1, "new-read-only").want(t, http.StatusCreated, "")
	u2.do("POST", "/api/v1/orders/"+unpaid.OrderNo+"/pay", nil, hdr{"Idempotency-Key", "p-killed"}).want(t, http.StatusOK, "")
	if n := b.count(t, "SELECT COUNT(*) FROM orders"); n != 4 {
		t.Errorf("orders at the end: %d, want 4", n)
	}
	if out, err := b.verify(t); err != nil || !strings.Contains(out, "OK") {
		t.Errorf("shop verify after the faults: %v\n%s", err, out)
	}
}

// TestSemiSyncFailoverUnderSale runs a flash sale through haproxy on a
// semi-synchronous primary with two replicas, SIGKILLs the primary
// mid-sale and fails over: every order a buyer was told was placed (201)
// is on the new primary, no answer is a 500, orders flow again, and the
// audit on the new primary is clean.
func TestSemiSyncFailoverUnderSale(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := topo.StartSemiSync(ctx, topo.SemiSyncOptions{})
	if err != nil {
		t.Fatalf("a replicated MariaDB behind haproxy for this test (needs mariadbd, mariadb-install-db, haproxy): %v", err)
	}
	t.Cleanup(s.Close)
	if err := s.CreateUser(ctx, "shop", "shop"); err != nil {
		t.Fatal(err)
	}
	b := newBackendOn(t, s.DSN("shop", "shop")+"?parseTime=true")
	in := b.start(t, nil)
	p := in.admin(t).createProduct("failover", 100, 100_000)

	var mu sync.Mutex
	acked := map[string]bool{}
	statuses := map[int]int{}
	var next atomic.Int64
	buy := func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			default:
			}
			r := in.user(t, next.Add(1)).seckill(p.ID)
			mu.Lock()
			statuses[r.status]++
			if r.status == http.StatusCreated {
				acked[r.order(t).OrderNo] = true
			}
			mu.Unlock()
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { buy(stop) })
	}
	time.Sleep(1500 * time.Millisecond)
	s.KillPrimary()
	promoted, err := s.Failover(ctx, 10*time.Second)
	if err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("failover: %v", err)
	}
	mu.Lock()
	before := statuses[http.StatusCreated]
	mu.Unlock()
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()

	if statuses[http.StatusInternalServerError] > 0 || statuses[0] > 0 {
		t.Errorf("answers %v: a 500 or no answer across the failover", statuses)
	}
	if statuses[http.StatusCreated] <= before {
		t.Errorf("answers %v: no order placed after the failover", statuses)
	}
	direct := newBackendOn(t, promoted.DSN("root", "shop")+"?parseTime=true")
	lost := 0
	for no := range acked {
		if direct.count(t, "SELECT COUNT(*) FROM orders WHERE order_no = ?", no) != 1 {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged orders are not on the new primary", lost, len(acked))
	}
	t.Logf("answers %v; %d orders acknowledged, %d of them before the failover ended", statuses, len(acked), before)
	if out, err := direct.verify(t); err != nil || !strings.Contains(out, "OK") {
		t.Errorf("shop verify on the new primary: %v\n%s", err, out)
	}
}
