package httpapi_test

import (
	"context"
	"net/http"
	"strings"
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
