package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/loadtest/internal/shops"
)

// The bench mints tokens itself; the shop must accept them exactly as it
// accepts the demo login's (same checks as internal/httpapi's authn).
func TestBenchTokensVerifyLikeTheShops(t *testing.T) {
	u := &benchUsers{Secret: []byte("bench-secret")}
	m := u.Minter()
	for _, id := range []int64{1, 42, 9_999_999} {
		h := m.Bearer(id)
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			t.Fatalf("header %q lacks the Bearer scheme", h)
		}
		var claims jwt.RegisteredClaims
		_, err := jwt.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return u.Secret, nil },
			jwt.WithValidMethods([]string{"HS256"}), jwt.WithIssuer("shop"), jwt.WithExpirationRequired())
		if err != nil {
			t.Fatalf("user %d: the shop would refuse the token: %v", id, err)
		}
		if claims.Subject != strconv.FormatInt(id, 10) {
			t.Fatalf("subject %q, want %d", claims.Subject, id)
		}
		var wrong jwt.RegisteredClaims
		if _, err := jwt.ParseWithClaims(tok, &wrong, func(*jwt.Token) (any, error) { return []byte("other"), nil }); err == nil {
			t.Fatal("a token verified under another secret")
		}
	}
	hs := u.Headers(5)
	seen := map[string]bool{}
	for _, h := range hs {
		if seen[h] {
			t.Fatal("headers() minted the same user twice")
		}
		seen[h] = true
	}
}

func TestBenchParsers(t *testing.T) {
	for body, want := range map[string]string{
		`{"type":"about:blank","status":409,"code":"sold_out"}`: "sold_out",
		`{"code": "busy","status":503}`:                         "busy",
		`{"status":409}`:                                        "",
		`{"code":`:                                              "",
	} {
		if got := problemCode([]byte(body)); got != want {
			t.Errorf("problemCode(%s) = %q, want %q", body, got, want)
		}
	}
	if k := answerKey(409, "sold_out"); k != "409 sold_out" {
		t.Errorf("answerKey = %q", k)
	}
}

// The harness's balancer sends a product to one instance, and when that
// instance goes only its products move: the others keep theirs.
func TestRendezvousMovesOnlyTheLostInstancesProducts(t *testing.T) {
	var all []*url.URL
	for _, s := range []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"} {
		u, _ := url.Parse(s)
		all = append(all, u)
	}
	used := map[string]int{}
	for p := range 300 {
		key := seckillPath(int64(p + 1))
		ranked := rendezvous(all, key)
		used[ranked[0].Host]++
		if again := rendezvous(slices.Clone(all), key); again[0] != ranked[0] {
			t.Fatalf("%s: %s, then %s", key, ranked[0].Host, again[0].Host)
		}
		without := rendezvous(slices.DeleteFunc(slices.Clone(all), func(u *url.URL) bool { return u == all[0] }), key)
		want := ranked[0]
		if want == all[0] {
			want = ranked[1] // the lost instance's products go to their next
		}
		if without[0] != want {
			t.Errorf("%s: on %s with all three, on %s without %s; want %s", key, ranked[0].Host, without[0].Host, all[0].Host, want.Host)
		}
	}
	for _, u := range all {
		if used[u.Host] < 50 {
			t.Errorf("instance %s holds %d of 300 products: the hash does not spread them", u.Host, used[u.Host])
		}
	}
}

// readTurns against /metrics in the shape the shop's turn metrics take:
// the instances' classes summed, each instance's orders apart (0 for an
// instance with no turn yet), and no per-instance figures when no
// instance exposes them or one does not answer.
func TestReadTurns(t *testing.T) {
	serve := func(body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if body == "" {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	turns := `shop_order_turn_seconds_bucket{size="4-7",le="+Inf"} 10
shop_order_turn_seconds_sum{size="4-7"} 0.05
shop_order_turn_seconds_count{size="4-7"} 10
shop_order_turn_orders_total{size="4-7"} 50
shop_order_turn_db_round_trips_total{size="4-7"} 30
shop_order_turn_redis_round_trips_total{size="4-7"} 20
shop_order_turn_seconds_sum{size="1"} 0.01
shop_order_turn_seconds_count{size="1"} 5
shop_order_turn_orders_total{size="1"} 5
`
	cluster := func(urls ...string) *shops.Cluster {
		return &shops.Cluster{Client: loadgen.NewClient(urls, "", 4), Instances: make([]*shops.Instance, len(urls))}
	}
	idle := "shop_orders_batch_size_count 0\n"
	snap, each := readTurns(context.Background(), cluster(serve(turns), serve(idle), serve(turns)))
	if want := []float64{55, 0, 55}; !slices.Equal(each, want) {
		t.Errorf("each instance's orders %v, want %v", each, want)
	}
	if c := snap["4-7"]; c.Turns != 20 || c.Orders != 100 || c.Seconds != 0.1 || c.DB != 60 || c.Redis != 40 || snap["1"].Turns != 10 {
		t.Errorf("summed: %+v", snap)
	}
	if _, each := readTurns(context.Background(), cluster(serve(idle), serve(idle))); each != nil {
		t.Errorf("a shop without the metrics: each instance %v, want none", each)
	}
	if _, each := readTurns(context.Background(), cluster(serve(turns), serve(""))); each != nil {
		t.Errorf("an instance that did not answer: each instance %v, want none", each)
	}
	if got := perSecond([]float64{10, 0}, []float64{30, 0}, 2); !slices.Equal(got, []float64{10, 0}) || perSecond(nil, got, 1) != nil {
		t.Errorf("perSecond = %v", got)
	}
}
