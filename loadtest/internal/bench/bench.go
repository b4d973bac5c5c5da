// Package bench is the bench scenario, the project's own benchmark of a hot product, in
// one run: the raw database ceiling (the same schema, N workers each running
// a conditional stock UPDATE + an order INSERT + COMMIT, no HTTP, no lock),
// the shop's committed orders/s on one product through HTTP with 1 and with
// 3 instances, sold-out refusals/s against /healthz of the same server with
// the same client, and the peak RSS of one instance while thousands of
// keep-alive clients hit the sold-out path. It judges nothing: the figures
// and their ratios are the result (the targets are printed beside them).
//
// The load generator runs in this process on the same cores as the shops,
// so it is kept lean: one pre-parsed URL and one reused header per client,
// pre-minted user tokens, answers read into a per-client buffer, latencies
// kept as microseconds.
//
// Its load generator (load.go, wire.go) is its own: wire-level keep-alive
// clients, not internal/loadgen, whose records the other scenarios verify.
package bench

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/internal/platform"
	"github.com/seckill-lab/shop/loadtest/internal/benchreport"
	"github.com/seckill-lab/shop/loadtest/internal/procstat"
	"github.com/seckill-lab/shop/loadtest/internal/report"
	"github.com/seckill-lab/shop/loadtest/internal/shops"
)

// benchRoute is how a hot-product phase's clients reach the instances.
type benchRoute struct {
	Products int           // hot products, load spread evenly; 0: one
	Routing  string        // one of the routing names below
	Urls     []string      // the instances (or nginx) the clients send to
	Shops    int           // instances behind them
	Affine   bool          // the harness hashes the product to one instance
	Window   time.Duration // measured window; 0: --bench-phase
	Warmup   time.Duration // load before it, not counted; 0: --bench-warmup
	// EachInstance samples each instance's orders every second
	// (min_instance_orders_per_s); Restock restocks the hot product once
	// in the middle of the window and times it (restock_ms).
	EachInstance, Restock bool
}

func (h runner) Bench(ctx context.Context) report.Scenario {
	o := h.O.Bench
	r := report.Scenario{
		Title: fmt.Sprintf("hot-product benchmark: raw database ceiling, orders/s with 1, 2 and 3 instances (product-affine, round robin, nginx, stock buckets), sold-out vs /healthz, RSS at %d connections", o.RssClients),
		Params: map[string]any{"phase": o.Phase.String(), "warmup": o.Warmup.String(), "clients": o.Clients, "raw_workers": o.RawWorkers,
			"rss_clients": o.RssClients, "rss_duration": o.RssDuration.String(), "instance_cpu": o.InstanceCPU},
	}
	if len(h.O.Targets) > 0 {
		r.Error = "bench starts its own shops and counts orders in their database: --target is not supported"
		return r
	}
	raiseFDLimit()
	h.Seq++
	id := fmt.Sprintf("%02d-bench", h.Seq)
	b, err := shops.NewBackend(ctx, shops.BackendOptions{MysqlDSN: h.O.MysqlDSN, RedisURL: h.O.RedisURL, Workdir: h.Workdir, Keep: h.O.Keep, ScenarioID: id}, h.Log)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer b.Close()
	br := &benchreport.Report{Phase: o.Phase}
	r.Bench = br
	r.Strategy = h.O.Strategy
	common := []string{"SHOP_STOCK_STRATEGY=" + h.O.Strategy}
	if h.O.BatchMax > 0 {
		common = append(common, "SHOP_BATCH_MAX="+strconv.Itoa(h.O.BatchMax))
	}
	if o.MaxProcs > 0 {
		common = append(common, "SHOP_MAXPROCS="+strconv.Itoa(o.MaxProcs))
	}
	shown := common
	if h.O.StockBuckets > 1 {
		shown = append(slices.Clone(common), "SHOP_STOCK_BUCKETS="+strconv.Itoa(h.O.StockBuckets), "SHOP_HOME_BUCKET=<instance index>")
	}
	r.Setup = fmt.Sprintf("%s; %s; load generator in this process", b.Describe(), strings.Join(shown, " "))
	sqlDB, err := b.Db.DB.DB()
	if err != nil {
		r.Error = err.Error()
		return r
	}
	if b.Db.Dialect == platform.DialectMySQL { // (SQLite keeps its one connection)
		sqlDB.SetMaxOpenConns(max(o.RawWorkers+4, 20))
		sqlDB.SetMaxIdleConns(max(o.RawWorkers+4, 20))
	}
	users := &benchUsers{}
	if err := h.BenchRun(ctx, b, sqlDB, common, users, br); err != nil {
		r.Error = err.Error()
	}
	one := 0.0
	for _, o := range br.Orders {
		if o.Instances == 1 && o.Coalescing && o.Routing == benchreport.RouteDirect && !o.Baseline && one == 0 {
			one = o.OrdersPerSec
		}
	}
	for i, o := range br.Orders {
		if br.Raw.TxPerSec > 0 {
			br.Orders[i].OfRaw = o.OrdersPerSec / br.Raw.TxPerSec
		}
		if one > 0 {
			br.Orders[i].OfOne = o.OrdersPerSec / one
		}
	}
	br.Targets = benchreport.Targets(br)
	br.Capped = benchreport.CappedRuns(br)
	if len(br.Orders) > 0 { // the summary line shows the one-instance hot product
		l := br.Orders[0].Load
		r.Summary = loadgen.Summary{Requests: l.Requests, Duration: time.Duration(l.Seconds * float64(time.Second)), P50: l.P50, P90: l.P90, P99: l.P99, Max: l.Max,
			Throughput: float64(l.Requests) / l.Seconds, ByOutcome: l.Answers}
	}
	r.Pass = r.Error == ""
	return r
}

// benchRun runs the phases in order; the report keeps what finished. The
// raw ceiling runs in two halves around the one-instance hot-product phase
// (the shop idle meanwhile), so that load from elsewhere on a shared machine
// weighs on the ceiling and on the shop alike.
func (h runner) BenchRun(ctx context.Context, b *shops.Backend, db *sql.DB, common []string, users *benchUsers, br *benchreport.Report) error {
	o := h.O.Bench
	start := func(n int, name string, common []string) (*shops.Cluster, error) {
		common, extra := shops.WithBuckets(h.O.StockBuckets, common, nil) // --stock-buckets: every phase's shops
		return h.startShops(ctx, b, n, name, common, extra, br)
	}
	c1, err := start(1, "bench-1", common)
	if err != nil {
		return err
	}
	users.Secret = []byte(c1.Secret)
	err = h.BenchOneInstance(ctx, db, c1, users, br)
	c1.Close()
	if err != nil {
		return err
	}
	if err := h.benchProcs(ctx, b, db, common, users, br); err != nil {
		return err
	}
	// Each cluster is stopped before the next starts: idle instances
	// still take their share of the 2 cores (sweeper, pub/sub, GC).
	if err := h.BenchThree(ctx, db, start, common, users, br); err != nil {
		return err
	}
	if err := h.BenchBuckets(ctx, b, db, common, users, br); err != nil {
		return err
	}
	if h.O.Bench.InstanceCPU > 0 {
		if err := h.BenchCapped(ctx, db, start, common, users, br); err != nil {
			return err
		}
	}
	if slices.Contains(common, "SHOP_BATCH_MAX=1") {
		return nil
	}

	// The baseline: one order per lock hold (coalescing off).
	off, err := start(1, "bench-1-nobatch", append(slices.Clone(common), "SHOP_BATCH_MAX=1"))
	if err != nil {
		return err
	}
	defer off.Close()
	users.Secret = []byte(off.Secret)
	h.BenchSay("bench: hot product, 1 instance, coalescing off (SHOP_BATCH_MAX=1), %d clients", o.Clients)
	ord, err := h.BenchOrders(ctx, db, off, users, benchRoute{Routing: benchreport.RouteDirect, Urls: off.Urls(), Shops: 1})
	br.Orders = append(br.Orders, ord)
	return err
}

// benchProcs measures what SHOP_MAXPROCS does: two instances of one
// cluster, the first at the bench's setting (--bench-maxprocs), the second
// at the other one (1 where the bench's shops run at Go's default, Go's
// default where they run at N), each warmed up with a hot product's load;
// then the second measured between two halves of the first, as three
// instances are against one (benchAround).
func (h runner) benchProcs(ctx context.Context, b *shops.Backend, db *sql.DB, common []string, users *benchUsers, br *benchreport.Report) error {
	o := h.O.Bench
	other, route := "SHOP_MAXPROCS=1", benchreport.RouteOneProc
	if o.MaxProcs > 0 {
		other, route = "SHOP_MAXPROCS=0", benchreport.RouteDefaultProcs
	}
	common, extra := shops.WithBuckets(h.O.StockBuckets, common, func(i int) []string {
		if i == 1 {
			return []string{other} // (the process's environment keeps the last value)
		}
		return nil
	})
	c, err := h.startShops(ctx, b, 2, "bench-procs", common, extra, br)
	if err != nil {
		return err
	}
	defer c.Close()
	users.Secret = []byte(c.Secret)
	if err := h.warmEach(ctx, c, users, "two"); err != nil {
		return err
	}
	ours := func(window time.Duration) (benchreport.Orders, error) {
		h.BenchSay("bench: hot product, 1 instance at the bench's SHOP_MAXPROCS (baseline, %s), %d clients", window, o.Clients)
		return h.BenchOrders(ctx, db, c, users, benchRoute{Routing: benchreport.RouteDirect, Urls: c.Urls()[:1], Shops: 1, Window: window})
	}
	theOther := func() (benchreport.Orders, error) {
		h.BenchSay("bench: hot product, 1 instance, %s, %d clients", route, o.Clients)
		return h.BenchOrders(ctx, db, c, users, benchRoute{Routing: route, Urls: c.Urls()[1:], Shops: 1})
	}
	return h.BenchAround(br, ours, theOther)
}

func (h runner) BenchOneInstance(ctx context.Context, db *sql.DB, c *shops.Cluster, users *benchUsers, br *benchreport.Report) error {
	o := h.O.Bench
	// A fresh database and a fresh instance take some seconds to reach
	// their steady rate: with the 1 s warm-up of the later phases, this
	// phase climbed from 2,185 to 3,471 orders/s over its window (flat
	// after 5 or 6 s of warm-up), and the raw ceiling's first half came out
	// below its second in three runs of four. Both warm up unmeasured
	// first, so that the ratio compares two steady rates.
	h.BenchSay("bench: raw database ceiling, %d workers, %s warm-up (not counted)", o.RawWorkers, o.Phase/5)
	if _, err := benchRawCeiling(ctx, db, o.RawWorkers, o.Phase/5); err != nil && ctx.Err() != nil {
		return ctx.Err() // (a warm-up that committed nothing fails no run: the halves are measured)
	}
	h.BenchSay("bench: raw database ceiling, %d workers, %s (first half)", o.RawWorkers, o.Phase/2)
	before, err := benchRawCeiling(ctx, db, o.RawWorkers, o.Phase/2)
	if err != nil {
		return fmt.Errorf("raw ceiling: %w", err)
	}
	first := benchRoute{Routing: benchreport.RouteDirect, Urls: c.Urls(), Shops: 1, Warmup: max(o.Warmup, o.Phase/2)}
	h.BenchSay("bench: hot product, 1 instance, %d clients, %s warm-up", o.Clients, first.Warmup)
	ord, err := h.BenchOrders(ctx, db, c, users, first)
	br.Orders = append(br.Orders, ord)
	if err != nil {
		return err
	}
	h.BenchSay("bench: raw database ceiling, %d workers, %s (second half)", o.RawWorkers, o.Phase-o.Phase/2)
	after, err := benchRawCeiling(ctx, db, o.RawWorkers, o.Phase-o.Phase/2)
	br.Raw = before.Plus(after)
	if err != nil {
		return fmt.Errorf("raw ceiling: %w", err)
	}

	// A product with one unit: the first buyers of the sold-out phase's
	// warm-up race for it, every later buyer is refused. At the end it must
	// have exactly one order.
	h.BenchSay("bench: sold-out refusals, %d clients", o.Clients)
	soldOut, p, rate, err := h.soldOutPhase(ctx, db, c, users, "bench sold out")
	br.SoldOut = rate
	if err != nil {
		return fmt.Errorf("sold-out phase: %w", err)
	}
	h.BenchSay("bench: GET /healthz, %d clients", o.Clients)
	health := benchLoad{method: http.MethodGet, path: "/healthz", Want: http.StatusOK}
	procs := procstat.Find(ctx, c, db)
	cpu0 := procs.Snap()
	br.Healthz, err = health.Run(ctx, c.Urls(), o.Clients, o.Warmup, o.Phase)
	if err != nil {
		return fmt.Errorf("healthz phase: %w", err)
	}
	br.Healthz.CPU = procs.PerUnit(cpu0, procs.Snap(), int64(br.Healthz.Sent), "request")
	if br.Healthz.PerSec > 0 {
		br.RefusalRatio = br.SoldOut.PerSec / br.Healthz.PerSec
	}

	h.BenchSay("bench: memory, %d keep-alive clients on the sold-out path for %s", o.RssClients, o.RssDuration)
	br.Memory, err = benchMemoryPhase(ctx, c, soldOut, o)
	if err != nil {
		return err
	}
	br.OneUnit.Buyers = br.SoldOut.Sent + br.Memory.Load.Sent
	br.OneUnit.Orders, err = countOrders(ctx, db, p)
	return err
}

// soldOutPhase makes a product with one unit and loads it with new buyers
// round robin over c's instances: the first buyers of the warm-up race for
// the unit, every later one is refused sold_out. It returns the load (for
// more phases), the product and the refusals' rate with their CPU cost.
func (h runner) soldOutPhase(ctx context.Context, db *sql.DB, c *shops.Cluster, users *benchUsers, name string) (benchLoad, int64, benchreport.Rate, error) {
	o := h.O.Bench
	p, err := c.Client.CreateProduct(ctx, name, 100, 1, "bench-soldout-"+loadgen.RandomID(8))
	if err != nil {
		return benchLoad{}, 0, benchreport.Rate{}, err
	}
	l := benchLoad{method: http.MethodPost, path: seckillPath(p.ID), Want: http.StatusConflict, WantCode: "sold_out", Users: users}
	procs := procstat.Find(ctx, c, db)
	cpu0 := procs.Snap()
	rate, err := l.Run(ctx, c.Urls(), o.Clients, o.Warmup, o.Phase)
	rate.CPU = procs.PerUnit(cpu0, procs.Snap(), int64(rate.Sent), "refusal")
	return l, p.ID, rate, err
}

// benchOrders loads one hot product (stock that does not run out) from
// o.clients distinct buyers at a time, each request a new buyer, sent as rt
// routes them, and counts the committed orders in the database over the
// measured window, sampling the count and the shops' batch sizes every
// second, and their turn metrics at the window's ends (and each
// instance's orders every second where rt asks).
func (h runner) BenchOrders(ctx context.Context, db *sql.DB, c *shops.Cluster, users *benchUsers, rt benchRoute) (benchreport.Orders, error) {
	o := h.O.Bench
	if rt.Window > 0 {
		o.Phase = rt.Window
	}
	if rt.Warmup > 0 {
		o.Warmup = rt.Warmup
	}
	out := benchreport.Orders{Instances: rt.Shops, Routing: rt.Routing, Clients: o.Clients, Coalescing: !slices.Contains(c.Common, "SHOP_BATCH_MAX=1"),
		GoMaxProcs: maxProcs(ctx, c, rt.Urls)}
	l, products, err := hotLoad(ctx, c, users, fmt.Sprintf("bench hot %d %s", rt.Shops, rt.Routing), max(1, rt.Products))
	if err != nil {
		return out, err
	}
	l.Affine = rt.Affine
	procs := procstat.Find(ctx, c, db)
	var (
		cpu0, cpu1      procstat.Snap
		series          []benchreport.Sample
		count0, count1  int64
		t0, t1          time.Time
		sum0, n0        float64
		held0, holds0   float64
		turn0, turn1    benchreport.TurnSnap
		sampleErr       error
		samplerFinished = make(chan struct{})
		restocked       = make(chan float64, 1)
	)
	start := time.Now()
	if rt.Restock {
		go func() { restocked <- h.restockAt(ctx, c, products[0], start.Add(o.Warmup+o.Phase/2)) }()
	}
	go func() {
		defer close(samplerFinished)
		// Wait out the warm-up, then sample once a second over the window.
		if !sleepUntil(ctx, start.Add(o.Warmup)) {
			return
		}
		t0, cpu0 = time.Now(), procs.Snap()
		if count0, sampleErr = countOrders(ctx, db, products...); sampleErr != nil {
			return
		}
		sum0, n0 = histTotals(ctx, c, benchreport.BatchMetric)
		held0, holds0 = histTotals(ctx, c, benchreport.HoldMetric)
		var prevEach []float64
		turn0, prevEach = readTurns(ctx, c)
		prevT, prevCount, prevSum, prevN := t0, count0, sum0, n0
		for next := t0.Add(time.Second); ; next = next.Add(time.Second) {
			last := !next.Before(t0.Add(o.Phase))
			if last {
				next = t0.Add(o.Phase)
			}
			if !sleepUntil(ctx, next) {
				return
			}
			now := time.Now()
			n, err := countOrders(ctx, db, products...)
			if err != nil {
				sampleErr = err
				return
			}
			s, k := histTotals(ctx, c, benchreport.BatchMetric)
			dt := now.Sub(prevT).Seconds()
			smp := benchreport.Sample{T: now.Sub(t0).Seconds(), Orders: float64(n-prevCount) / dt}
			if k > prevN {
				smp.BatchMean = (s - prevSum) / (k - prevN)
			}
			var turn benchreport.TurnSnap
			if rt.EachInstance || last {
				var each []float64
				turn, each = readTurns(ctx, c)
				if rt.EachInstance {
					smp.InstanceOrders, prevEach = perSecond(prevEach, each, dt), each
				}
			}
			series = append(series, smp)
			prevT, prevCount, prevSum, prevN = now, n, s, k
			if last {
				t1, count1, cpu1, turn1 = now, n, procs.Snap(), turn
				return
			}
		}
	}()
	rate, err := l.Run(ctx, rt.Urls, o.Clients, o.Warmup, o.Phase)
	<-samplerFinished
	if rt.Restock {
		out.RestockMs = <-restocked
	}
	out.Load, out.Answers, out.Series = rate, rate.Answers, series
	out.MinInstanceOrders = benchreport.MinInstanceOrders(series)
	if err != nil {
		return out, err
	}
	if sampleErr != nil {
		return out, fmt.Errorf("count orders: %w", sampleErr)
	}
	if t1.IsZero() {
		return out, ctx.Err()
	}
	out.Committed, out.Seconds = count1-count0, t1.Sub(t0).Seconds()
	out.OrdersPerSec = float64(out.Committed) / out.Seconds
	out.CPU = procs.PerUnit(cpu0, cpu1, out.Committed, "order")
	if s, k := histTotals(ctx, c, benchreport.BatchMetric); k > n0 {
		out.BatchMean = (s - sum0) / (k - n0)
	}
	if s, k := histTotals(ctx, c, benchreport.HoldMetric); k > holds0 {
		out.LockHoldMs = (s - held0) / (k - holds0) * 1000
		out.LocksHeld = (s - held0) / out.Seconds
	}
	out.Turn = benchreport.TurnBetween(turn0, turn1)
	return out, nil
}

// readTurns reads the turn metrics of c's instances: summed over them by
// size class, and each one's orders (nil when an instance did not answer
// or none exposes them; one that exposes none of its own has had no turn).
func readTurns(ctx context.Context, c *shops.Cluster) (benchreport.TurnSnap, []float64) {
	sum, each := benchreport.TurnSnap{}, make([]float64, len(c.Instances))
	exposed, failed := false, false
	for i := range c.Instances {
		m, err := c.Client.MetricsBy(ctx, i, benchreport.TurnPrefix, benchreport.TurnLabel)
		if err != nil {
			failed = true
			continue
		}
		sum.AddInstance(m)
		orders, ok := m[benchreport.TurnOrdersMetric]
		exposed = exposed || ok
		for _, n := range orders {
			each[i] += n
		}
	}
	if failed || !exposed {
		return sum, nil
	}
	return sum, each
}

// perSecond is each instance's growth from a to b over dt seconds; nil
// when either is unknown.
func perSecond(a, b []float64, dt float64) []float64 {
	if a == nil || len(a) != len(b) || dt <= 0 {
		return nil
	}
	out := make([]float64, len(b))
	for i := range b {
		out[i] = (b[i] - a[i]) / dt
	}
	return out
}

// restockAt restocks product at t and returns how long it took in ms
// (the client's retries included); 0 when it failed, which it says.
func (h runner) restockAt(ctx context.Context, c *shops.Cluster, product int64, t time.Time) float64 {
	if !sleepUntil(ctx, t) {
		return 0
	}
	begin := time.Now()
	if err := c.Client.Restock(ctx, product, 1000, "bench-restock-"+loadgen.RandomID(8)); err != nil {
		h.BenchSay("bench: restock in mid-window: %v", err)
		return 0
	}
	return float64(time.Since(begin).Microseconds()) / 1000
}

// hotLoad makes k products whose stock does not run out and the load of
// new buyers ordering them, client i the product i mod k (round robin; the
// caller may make it affine).
func hotLoad(ctx context.Context, c *shops.Cluster, users *benchUsers, name string, k int) (benchLoad, []int64, error) {
	l := benchLoad{method: http.MethodPost, Want: http.StatusCreated, Users: users}
	var ids []int64
	for i := range k {
		p, err := c.Client.CreateProduct(ctx, fmt.Sprintf("%s %d", name, i+1), 100, 1_000_000, "bench-hot-"+loadgen.RandomID(8))
		if err != nil {
			return benchLoad{}, nil, err
		}
		ids = append(ids, p.ID)
		l.paths = append(l.paths, seckillPath(p.ID))
	}
	l.path = l.paths[0]
	return l, ids, nil
}

func seckillPath(id int64) string { return "/api/v1/seckill/" + strconv.FormatInt(id, 10) + "/orders" }

func countOrders(ctx context.Context, db *sql.DB, products ...int64) (int64, error) {
	var n int64
	q := "SELECT COUNT(*) FROM orders WHERE product_id IN (?" + strings.Repeat(", ?", len(products)-1) + ")"
	args := make([]any, len(products))
	for i, p := range products {
		args[i] = p
	}
	err := db.QueryRowContext(ctx, q, args...).Scan(&n)
	return n, err
}

// maxProcs is the highest GOMAXPROCS that c's instances at urls report
// (all of c's when none is at urls: a phase through nginx); 0: none does.
func maxProcs(ctx context.Context, c *shops.Cluster, urls []string) int {
	n := 0
	all := !slices.ContainsFunc(c.Urls(), func(u string) bool { return slices.Contains(urls, u) })
	for i, u := range c.Urls() {
		if !all && !slices.Contains(urls, u) {
			continue
		}
		if m, err := c.Client.Metrics(ctx, i, benchreport.ProcsMetric); err == nil {
			n = max(n, int(m[benchreport.ProcsMetric]))
		}
	}
	return n
}

// histTotals sums histogram name's _sum and _count over the instances;
// both are 0 when the shop exposes no such histogram.
func histTotals(ctx context.Context, c *shops.Cluster, name string) (sum, count float64) {
	for i := range c.Instances {
		m, err := c.Client.Metrics(ctx, i, name)
		if err != nil {
			continue
		}
		sum += m[name+"_sum"]
		count += m[name+"_count"]
	}
	return sum, count
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// benchSay prints one progress line of the bench.
func (h runner) BenchSay(format string, args ...any) {
	fmt.Fprintf(h.Out, "  "+format+"\n", args...)
}
