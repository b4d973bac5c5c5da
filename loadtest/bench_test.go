package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/testenv"
	"github.com/seckill-lab/shop/loadtest/internal/benchreport"
	"github.com/seckill-lab/shop/loadtest/internal/report"
)

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
	var rep report.Full
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	br := rep.Scenarios[0].Bench
	checkCPUShape(t, b)
	// 1 instance; 1 at SHOP_MAXPROCS=1 after its baseline (1 at the
	// shop's default); 2 product-affine; 3 product-affine after its
	// baseline (1 instance of the same cluster); 3 round robin; (3 behind
	// nginx after its baseline, when nginx is installed); 3 round robin on
	// stock buckets; 1 with coalescing off, last.
	if br == nil {
		t.Fatalf("report.json has no bench: %s", b)
	}
	three := slices.IndexFunc(br.Orders, func(o benchreport.Orders) bool { return o.Instances == 3 && o.Routing == benchreport.RouteAffine })
	if br.Raw.TxPerSec <= 0 || len(br.Orders) < 8 || br.Orders[len(br.Orders)-1].Coalescing || br.Orders[0].OrdersPerSec <= 0 ||
		three < 0 || br.Orders[three].OrdersPerSec <= 0 || br.Orders[three].OfOne <= 0 ||
		br.SoldOut.PerSec <= 0 || br.Healthz.PerSec <= 0 || br.RefusalRatio <= 0 || br.Memory.PeakRSSMB <= 0 {
		t.Fatalf("report.json lacks a figure: %s", b)
	}
	// One hot product's lock: one hold per batch, held at most all the
	// time, give or take the hold that spans the window's start (the
	// window is 500 ms here, a hold can be tens of ms on a busy machine).
	if o := br.Orders[0]; o.LockHoldMs <= 0 || o.LocksHeld <= 0 || o.LocksHeld > 1.5 {
		t.Errorf("1 instance: lock hold %.2f ms, locks held %.2f of the time; want a hold and at most 1 lock", o.LockHoldMs, o.LocksHeld)
	}
	if one, base := br.Orders[2], br.Orders[1]; one.Routing != benchreport.RouteOneProc || one.GoMaxProcs != 1 || one.OfBaseline <= 0 ||
		!base.Baseline || base.GoMaxProcs < 1 || benchreport.BaselineHalves(br.Orders, 2) == nil {
		t.Errorf("the GOMAXPROCS phase: %+v after %+v, want one at SHOP_MAXPROCS=1 (GOMAXPROCS 1 read back) after its baseline's halves", one, base)
	}
	for i, o := range br.Orders {
		if o.Instances == 3 && (o.Routing == benchreport.RouteAffine || o.Routing == benchreport.RouteNginx) {
			if base := br.Orders[i-1]; !base.Baseline || base.Instances != 1 || base.OrdersPerSec <= 0 || o.OfBaseline <= 0 || benchreport.BaselineHalves(br.Orders, i) == nil {
				t.Errorf("%s: no baseline measured around it: %+v then %+v", o.Label(), base, o)
			}
		}
	}
	if i := slices.IndexFunc(br.Orders, func(o benchreport.Orders) bool { return o.Routing == benchreport.RouteBuckets }); i < 0 || br.Orders[i].OrdersPerSec <= 0 || br.Orders[i].Instances != 3 {
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

// checkCPUShape: in report.json as written, the first hot-product phase,
// the sold-out phase and /healthz carry cpu_us_per_order with exactly
// shop, mariadbd and redis (issue 33); an uncapped run has no capped list.
func checkCPUShape(t *testing.T, b []byte) {
	t.Helper()
	var doc struct {
		Scenarios []struct {
			Bench map[string]json.RawMessage `json:"bench"`
		} `json:"scenarios"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Scenarios) == 0 {
		t.Fatalf("report.json: %v", err)
	}
	bench := doc.Scenarios[0].Bench
	var orders []map[string]json.RawMessage
	if err := json.Unmarshal(bench["orders"], &orders); err != nil || len(orders) == 0 {
		t.Fatalf("orders: %v", err)
	}
	phases := map[string]json.RawMessage{"orders[0]": orders[0]["cpu_us_per_order"]}
	for _, k := range []string{"sold_out", "healthz"} {
		var phase map[string]json.RawMessage
		if err := json.Unmarshal(bench[k], &phase); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		phases[k] = phase["cpu_us_per_order"]
	}
	for where, raw := range phases {
		var us map[string]float64
		if err := json.Unmarshal(raw, &us); err != nil || len(us) != 3 || us["shop"] <= 0 {
			t.Errorf("%s: cpu_us_per_order %s, want exactly shop (above 0), mariadbd and redis", where, raw)
			continue
		}
		for _, k := range []string{"shop", "mariadbd", "redis"} {
			if _, ok := us[k]; !ok {
				t.Errorf("%s: cpu_us_per_order %s lacks %s", where, raw, k)
			}
		}
	}
	if _, ok := bench["capped"]; ok {
		t.Errorf("an uncapped run has a capped list: %s", bench["capped"])
	}
}
