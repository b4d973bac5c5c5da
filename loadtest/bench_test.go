package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill-lab/shop/internal/testenv"
)

// The bench mints tokens itself; the shop must accept them exactly as it
// accepts the demo login's (same checks as internal/httpapi's authn).
func TestBenchTokensVerifyLikeTheShops(t *testing.T) {
	u := &benchUsers{secret: []byte("bench-secret")}
	m := u.minter()
	for _, id := range []int64{1, 42, 9_999_999} {
		h := m.bearer(id)
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			t.Fatalf("header %q lacks the Bearer scheme", h)
		}
		var claims jwt.RegisteredClaims
		_, err := jwt.ParseWithClaims(tok, &claims, func(*jwt.Token) (any, error) { return u.secret, nil },
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
	hs := u.headers(5)
	seen := map[string]bool{}
	for _, h := range hs {
		if seen[h] {
			t.Fatal("headers() minted the same user twice")
		}
		seen[h] = true
	}
}

func TestBenchParsers(t *testing.T) {
	st := parseProcStatus(strings.NewReader("Name:\tshop\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t9\n"))
	if st["VmHWM"] != 200 || st["VmRSS"] != 100 || len(st) != 2 {
		t.Fatalf("parseProcStatus = %v, want VmHWM 200 MB, VmRSS 100 MB", st)
	}
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

// TestBenchEndToEnd runs the bench scenario once with tiny phases against
// MariaDB/MySQL and Redis: every phase must produce its figure.
func TestBenchEndToEnd(t *testing.T) {
	dsn := testenv.MySQL(t)
	redisURL, _ := testenv.Redis(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	code := run(ctx, []string{"--scenario", "bench", "--bench-phase", "500ms", "--bench-warmup", "200ms", "--bench-clients", "16",
		"--bench-raw-workers", "4", "--bench-rss-clients", "200", "--bench-rss-duration", "500ms",
		"--mysql-dsn", dsn, "--redis-url", redisURL, "--report", dir}, func(string) string { return "" }, &out, &out)
	if code != 0 {
		t.Fatalf("loadtest exited %d:\n%s", code, out.String())
	}
	for _, want := range []string{"raw db:   4 workers", "orders:   1 instance(s), 16 clients", "orders:   2 instance(s), product-affine, 16 clients",
		"orders:   3 instance(s), product-affine, 16 clients", "orders:   3 instance(s), round robin (lab), 16 clients",
		"orders:   3 instance(s), round robin, K=3 stock buckets, 16 clients",
		"sold-out refusals/s", "memory:   200 keep-alive clients", "requests without an answer, every phase", "bench    PASS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep fullReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	br := rep.Scenarios[0].Bench
	// 1 instance; 2 and 3 product-affine; 3 round robin; (3 behind nginx
	// when it is installed); 3 round robin on stock buckets; 1 with
	// coalescing off, last.
	if br == nil || br.Raw.TxPerSec <= 0 || len(br.Orders) < 5 || br.Orders[len(br.Orders)-1].Coalescing || br.Orders[0].OrdersPerSec <= 0 ||
		br.Orders[2].OrdersPerSec <= 0 || br.Orders[2].OfOne <= 0 || br.Orders[2].Routing != routeAffine ||
		br.SoldOut.PerSec <= 0 || br.Healthz.PerSec <= 0 || br.RefusalRatio <= 0 || br.Memory.PeakRSSMB <= 0 {
		t.Fatalf("report.json lacks a figure: %s", b)
	}
	if i := slices.IndexFunc(br.Orders, func(o benchOrders) bool { return o.Routing == routeBuckets }); i < 0 || br.Orders[i].OrdersPerSec <= 0 || br.Orders[i].Instances != 3 {
		t.Errorf("the stock-bucket phase lacks its figure: %+v", br.Orders)
	}
	if br.OneUnit.Orders != 1 || br.OneUnit.Buyers < 100 {
		t.Errorf("the 1-unit product: %d orders after %d buyers, want exactly 1 after hundreds", br.OneUnit.Orders, br.OneUnit.Buyers)
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(html, []byte("committed orders per second")) {
		t.Error("report.html lacks the orders/s chart")
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

// deploy/nginx.conf maps onto loopback with every upstream server and the
// affinity hash kept.
func TestNginxConfMapsTheShippedConfig(t *testing.T) {
	conf, err := os.ReadFile("../deploy/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	got, err := nginxConf(string(conf), 4321, []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"}, "/tmp/e.log")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"listen 127.0.0.1:4321;", "server 127.0.0.1:1 ", "server 127.0.0.1:3 ", "hash $shop_affinity consistent;", "access_log off;"} {
		if !strings.Contains(got, want) {
			t.Errorf("mapped nginx.conf lacks %q", want)
		}
	}
	one, err := nginxConf(string(conf), 4321, []string{"http://127.0.0.1:1"}, "/tmp/e.log")
	if err != nil || strings.Count(one, "server 127.0.0.1:1 ") != 3 {
		t.Errorf("one shop: every upstream server should be it (%v):\n%s", err, one)
	}
	if _, err := nginxConf(string(conf), 4321, []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, "/tmp/e.log"); err == nil {
		t.Error("three upstreams mapped onto two shops without an error")
	}
}

// The module root the harness builds the shop in and reads deploy/ from is
// this repository's.
func TestModuleRoot(t *testing.T) {
	root, err := moduleRoot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "deploy", "nginx.conf")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
}
