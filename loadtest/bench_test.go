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
	RedisURL, _ := testenv.Redis(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	code := run(ctx, []string{"--scenario", "bench", "--bench-phase", "500ms", "--bench-warmup", "200ms", "--bench-clients", "16",
		"--bench-raw-workers", "4", "--bench-rss-clients", "200", "--bench-rss-duration", "500ms",
		"--mysql-dsn", dsn, "--redis-url", RedisURL, "--report", dir}, func(string) string { return "" }, &out, &out)
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
	// 1 instance; 2 product-affine; 3 product-affine after its baseline
	// (1 instance of the same cluster); 3 round robin; (3 behind nginx
	// after its baseline, when nginx is installed); 3 round robin on
	// stock buckets; 1 with coalescing off, last.
	if br == nil || br.Raw.TxPerSec <= 0 || len(br.Orders) < 6 || br.Orders[len(br.Orders)-1].Coalescing || br.Orders[0].OrdersPerSec <= 0 ||
		br.Orders[3].OrdersPerSec <= 0 || br.Orders[3].OfOne <= 0 || br.Orders[3].Routing != routeAffine || br.Orders[3].Instances != 3 ||
		br.SoldOut.PerSec <= 0 || br.Healthz.PerSec <= 0 || br.RefusalRatio <= 0 || br.Memory.PeakRSSMB <= 0 {
		t.Fatalf("report.json lacks a figure: %s", b)
	}
	for i, o := range br.Orders {
		if o.Instances == 3 && (o.Routing == routeAffine || o.Routing == routeNginx) {
			if base := br.Orders[i-1]; !base.Baseline || base.Instances != 1 || base.OrdersPerSec <= 0 || o.OfBaseline <= 0 || baselineHalves(br.Orders, i) == nil {
				t.Errorf("%s: no baseline measured around it: %+v then %+v", o.Label(), base, o)
			}
		}
	}
	if i := slices.IndexFunc(br.Orders, func(o BenchOrders) bool { return o.Routing == routeBuckets }); i < 0 || br.Orders[i].OrdersPerSec <= 0 || br.Orders[i].Instances != 3 {
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

// Two halves of a baseline add up to one phase: counts and seconds add,
// the rate is the whole's, a quantile is the larger half's, and the mean
// batch is weighted by the orders each half committed.
func TestBenchHalvesAddUp(t *testing.T) {
	a := BenchOrders{Committed: 3000, Seconds: 1, BatchMean: 30, Series: []benchSample{{T: 1, Orders: 3000}},
		Load: benchRate{Requests: 3000, Seconds: 1, PerSec: 3000, P50: 10 * time.Millisecond, P99: 40 * time.Millisecond, Answers: map[string]int{"201": 3000}}}
	b := BenchOrders{Committed: 1000, Seconds: 1, BatchMean: 10, Series: []benchSample{{T: 1, Orders: 1000}},
		Load: benchRate{Requests: 1000, Seconds: 1, PerSec: 1000, P50: 20 * time.Millisecond, P99: 30 * time.Millisecond, Answers: map[string]int{"201": 1000, "503 busy": 2}}}
	got := a.Plus(b)
	if got.Committed != 4000 || got.Seconds != 2 || got.OrdersPerSec != 2000 || got.BatchMean != 20 {
		t.Errorf("orders: %d in %.0fs = %.0f/s, batch %.1f; want 4000 in 2s = 2000/s, batch 20", got.Committed, got.Seconds, got.OrdersPerSec, got.BatchMean)
	}
	if l := got.Load; l.Requests != 4000 || l.PerSec != 2000 || l.P50 != 20*time.Millisecond || l.P99 != 40*time.Millisecond ||
		l.Answers["201"] != 4000 || l.Answers["503 busy"] != 2 || got.Answers["201"] != 4000 {
		t.Errorf("load: %+v", l)
	}
	if len(got.Series) != 2 || got.Series[1].T != 2 || len(a.Series) != 1 || a.Load.Answers["201"] != 3000 {
		t.Errorf("series %+v (the halves must be left as they were: %+v)", got.Series, a)
	}
}

// TestBenchTargetsShowTheSpread: three instances are judged against their
// baseline, and the baseline's halves, one thing measured twice, show how
// far apart the machine puts two measurements.
func TestBenchTargetsShowTheSpread(t *testing.T) {
	br := &benchReport{Raw: benchRaw{TxPerSec: 1000}, Orders: []BenchOrders{
		{Instances: 1, Routing: routeDirect, Coalescing: true, OrdersPerSec: 3000, OfRaw: 3, OfOne: 1},
		{Instances: 1, Routing: routeDirect, Coalescing: true, OrdersPerSec: 2700, OfOne: 0.9, Baseline: true, Halves: []float64{3000, 2400}},
		{Instances: 3, Routing: routeAffine, Coalescing: true, OrdersPerSec: 2430, OfOne: 0.81, OfBaseline: 0.9},
	}}
	var judged, spread *benchTarget
	targets := benchTargets(br)
	for i, tg := range targets {
		switch {
		case strings.Contains(tg.What, "3 instances, "+routeAffine) && tg.Want == ">= 1.0x":
			judged = &targets[i]
		case strings.Contains(tg.What, "halves, the higher ÷ the lower"):
			spread = &targets[i]
		}
	}
	if judged == nil || judged.Met || judged.Got != 0.9 {
		t.Errorf("3 instances against their baseline: %+v, want 0.9x, missed", judged)
	}
	if spread == nil || !spread.Met || spread.Got != 1.25 {
		t.Errorf("the baseline's spread: %+v, want 1.25x, no target", spread)
	}
	var out strings.Builder
	writeBench(&out, br)
	if !strings.Contains(out.String(), "halves before and after it: 3000 and 2400") {
		t.Errorf("the baseline's row does not give its halves:\n%s", out.String())
	}
}
