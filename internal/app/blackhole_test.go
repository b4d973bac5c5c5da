package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/internal/testenv"
	"github.com/seckill-lab/shop/internal/topo"
	"github.com/seckill-lab/shop/internal/wire"
)

// A dependency that swallows every byte and never closes (a black hole,
// as after a partition) must cost a request its deadline, not more: every
// request is answered within SHOP_REQUEST_TIMEOUT + 1 s, never with a 500,
// while Redis, MySQL or both are black-holed, on connections the pools
// already hold and on new ones; after healing, orders are created again.
func TestBlackHoledDependencies(t *testing.T) {
	if !topo.RedisInstalled() {
		t.Fatal("redis-server is not on PATH (Debian: apt-get install redis-server); this test needs it")
	}
	const reqTimeout = 2 * time.Second
	ctx := context.Background()
	r, err := topo.StartRedis(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	n, err := topo.StartNemesis(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	dsn := testenv.MySQL(t)
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	redisLink, err := n.Link("redis", "", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	mysqlLink, err := n.Link("mysql", "", cfg.Addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = mysqlLink.Addr()
	base := startServe(t, map[string]string{
		"SHOP_REDIS_URL":       "redis://" + redisLink.Addr() + "/0",
		"SHOP_MYSQL_DSN":       cfg.FormatDSN(),
		"SHOP_REQUEST_TIMEOUT": reqTimeout.String(),
		"SHOP_LOCK_TTL":        "1s",
		"SHOP_LOCK_WAIT":       "1s",
		"SHOP_LOG_LEVEL":       "warn",
		"SHOP_TRUSTED_PROXIES": "127.0.0.1",
	})
	c := loadgen.NewClient([]string{base}, "test-admin-token-0123456789", 64)
	c.Timeout = 30 * time.Second // the test judges the time; the client must not cut it short
	p, err := c.CreateProduct(ctx, "black hole", 100, 1000, "bh-product")
	if err != nil {
		t.Fatal(err)
	}
	user := int64(0)
	buyer := func() (int64, string) {
		user++
		tok, err := c.Token(ctx, 0, user)
		if err != nil {
			t.Fatal(err)
		}
		return user, tok
	}
	// A paid-for order to pay during the fault.
	order := func(tok, key string) loadgen.Answer {
		return c.Do(ctx, loadgen.Call{Method: http.MethodPost, Path: "/api/v1/orders", Token: tok, Key: key,
			Body: map[string]int64{"product_id": p.ID, "quantity": 1}})
	}
	blackHole := func(links ...*topo.Link) func(t *testing.T) {
		return func(t *testing.T) {
			for _, l := range links {
				if err := l.Inject(topo.Fault{Kind: topo.BlackHole}); err != nil {
					t.Error(err)
				}
			}
		}
	}
	for _, fault := range []struct {
		name  string
		links []*topo.Link
		// inject starts the fault while the requests are sent (nil:
		// blackHole(links...) before they are)
		inject func(t *testing.T)
	}{
		{"Redis black-holed", []*topo.Link{redisLink}, nil},
		{"MySQL black-holed", []*topo.Link{mysqlLink}, nil},
		{"Redis and MySQL black-holed", []*topo.Link{redisLink, mysqlLink}, nil},
		// Holds under way when Redis goes silent: the shop's requests to
		// MySQL are late, so its holds are long, then Redis is cut. The
		// release into the silent Redis must not hold the answer.
		{"Redis black-holed under slow holds", []*topo.Link{redisLink, mysqlLink}, func(t *testing.T) {
			if err := mysqlLink.Inject(topo.Fault{Kind: topo.Latency, Dir: topo.Up, Delay: 700 * time.Millisecond}); err != nil {
				t.Error(err)
			}
			time.Sleep(800 * time.Millisecond)
			blackHole(redisLink)(t)
		}},
	} {
		t.Run(fault.name, func(t *testing.T) {
			// Buyers logged in and an unpaid order each, before the fault.
			type prepared struct {
				id       int64
				tok, ord string
			}
			var ps []prepared
			for range 4 {
				id, tok := buyer()
				a := order(tok, "bh-pre-"+strconv.FormatInt(id, 10))
				var o wire.Order
				if err := json.Unmarshal(a.Body, &o); a.Status != http.StatusCreated || err != nil {
					t.Fatalf("order before the fault: %d %s", a.Status, a.Body)
				}
				credit := c.Do(ctx, loadgen.Call{Method: http.MethodPost, Path: "/api/v1/admin/wallets/" + strconv.FormatInt(id, 10) + "/credit",
					Token: c.AdminToken, Key: "bh-credit-" + strconv.FormatInt(id, 10), Body: map[string]int64{"amount_cents": 1000}})
				if credit.Status != http.StatusOK && credit.Status != http.StatusCreated {
					t.Fatalf("credit before the fault: %d %s", credit.Status, credit.Body)
				}
				ps = append(ps, prepared{id, tok, o.OrderNo})
			}
			if fault.inject == nil {
				blackHole(fault.links...)(t)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			answers := map[string]loadgen.Answer{}
			send := func(what string, call loadgen.Call) {
				wg.Go(func() {
					a := c.Do(ctx, call)
					mu.Lock()
					answers[what] = a
					mu.Unlock()
				})
			}
			for i, b := range ps {
				k := strconv.Itoa(i)
				send("seckill "+k, loadgen.Call{Method: http.MethodPost, Path: fmt.Sprintf("/api/v1/seckill/%d/orders", p.ID), Token: b.tok})
				send("order "+k, loadgen.Call{Method: http.MethodPost, Path: "/api/v1/orders", Token: b.tok, Key: "bh-during-" + k + "-" + strconv.Itoa(len(fault.links)) + strconv.Itoa(int(fault.links[0].Name[0])),
					Body: map[string]int64{"product_id": p.ID, "quantity": 1}})
				send("pay "+k, loadgen.Call{Method: http.MethodPost, Path: "/api/v1/orders/" + b.ord + "/pay", Token: b.tok, Key: "bh-pay-" + k})
				send("get order "+k, loadgen.Call{Method: http.MethodGet, Path: "/api/v1/orders/" + b.ord, Token: b.tok})
			}
			send("product", loadgen.Call{Method: http.MethodGet, Path: fmt.Sprintf("/api/v1/products/%d", p.ID)})
			send("login", loadgen.Call{Method: http.MethodPost, Path: "/api/v1/auth/token", Body: map[string]int64{"user_id": 9999}})
			if fault.inject != nil {
				fault.inject(t)
			}
			wg.Wait()
			for what, a := range answers {
				lat := a.End.Sub(a.Start)
				t.Logf("%-12s %3d %-22s %s", what, a.Status, a.Code, lat.Round(time.Millisecond))
				switch {
				case a.Status == 0:
					t.Errorf("%s: no answer after %s: %v", what, lat, a.Err)
				case a.Status >= 500 && a.Status != http.StatusServiceUnavailable:
					t.Errorf("%s: %d %s", what, a.Status, a.Body)
				case lat > reqTimeout+time.Second:
					t.Errorf("%s: answered %d after %s, past the request timeout %s + 1s", what, a.Status, lat, reqTimeout)
				}
			}
			for _, l := range fault.links {
				if err := l.Heal(); err != nil {
					t.Fatal(err)
				}
			}
			healed := time.Now()
			_, tok := buyer()
			for i := 0; ; i++ {
				a := c.Do(ctx, loadgen.Call{Method: http.MethodPost, Path: fmt.Sprintf("/api/v1/seckill/%d/orders", p.ID), Token: tok})
				if a.Status == http.StatusCreated {
					t.Logf("first order %s after healing", time.Since(healed).Round(time.Millisecond))
					break
				}
				if time.Since(healed) > 10*time.Second {
					t.Fatalf("no order within 10s of healing: last %d %s", a.Status, a.Body)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}
