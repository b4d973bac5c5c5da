package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seckill-lab/shop/loadtest/internal/shops"
	"github.com/seckill-lab/shop/loadtest/internal/verify"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/loadgen"
)

// harness runs scenarios.
type Harness struct {
	O       Options
	Bin     string
	Workdir string
	Out     io.Writer
	Tty     bool
	Log     *slog.Logger
	Seq     int
}

// setup says how a scenario wants its shops.
type Setup struct {
	Strategy string
	Common   []string             // settings of every instance
	Extra    func(i int) []string // settings of instance i
	Private  bool                 // needs a Redis it may restart and flush
	RedisURL string               // a Redis the scenario started (Cluster or Sentinel list) instead of --redis-url
	MysqlDSN string               // a database server the scenario started (its haproxy address) instead of --mysql-dsn
	Net      bool                 // each instance reaches Redis and MySQL through nemesis links of its own (Env.Net)
	Netns    bool                 // and runs in a network namespace of its own, where root can make one
}

// env is where a scenario runs: shops the harness started on a fresh
// backend, or the --target shops.
type Env struct {
	H        *Harness
	Name     string
	Backend  *shops.Backend
	Cluster  *shops.Cluster
	Client   *loadgen.Client
	Strategy string
	Desc     string
	Net      *Net // with Setup.Net
}

func (h *Harness) Setup(ctx context.Context, name string, s Setup) (*Env, error) {
	if s.Strategy == "" {
		s.Strategy = h.O.Strategy
	}
	e := &Env{H: h, Name: name, Strategy: s.Strategy}
	if len(h.O.Targets) > 0 {
		e.Client = loadgen.NewClient(h.O.Targets, h.O.AdminToken, h.O.Concurrency)
		e.Desc = fmt.Sprintf("%d target(s) %s (started elsewhere; strategy as configured there)", len(h.O.Targets), strings.Join(h.O.Targets, ", "))
		e.Strategy = "as configured"
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return e, e.Client.Ready(rctx)
	}
	h.Seq++
	b, err := shops.NewBackend(ctx, shops.BackendOptions{MysqlDSN: cmp.Or(s.MysqlDSN, h.O.MysqlDSN), RedisURL: cmp.Or(s.RedisURL, h.O.RedisURL), Private: s.Private,
		Workdir: h.Workdir, Keep: h.O.Keep, ScenarioID: fmt.Sprintf("%02d-%s", h.Seq, name)}, h.Log)
	if err != nil {
		return nil, err
	}
	e.Backend = b
	common := append([]string{"SHOP_STOCK_STRATEGY=" + s.Strategy, "SHOP_SOLD_OUT_CACHE=" + h.O.Linear.SoldOutCache.String()}, s.Common...)
	if h.O.BatchMax > 0 {
		common = append(common, "SHOP_BATCH_MAX="+strconv.Itoa(h.O.BatchMax))
	}
	extra := s.Extra
	if s.Strategy == inventory.LockFence { // a shop refuses buckets under another strategy
		common, extra = shops.WithBuckets(h.O.StockBuckets, common, extra)
	}
	var place func(i int) shops.Placement
	if s.Net {
		var more func(i int) []string
		if e.Net, more, place, err = startNet(ctx, b, h.O.Instances, s.Netns); err != nil {
			b.Close()
			return nil, err
		}
		extra = joinSettings(extra, more)
	}
	c, err := shops.StartPlaced(ctx, h.Bin, b, h.O.Instances, fmt.Sprintf("%02d-%s", h.Seq, name), h.Workdir, common, extra, place)
	if err != nil {
		e.Close()
		return nil, err
	}
	e.Cluster, e.Client = c, c.Client
	e.Desc = fmt.Sprintf("%d shop instances on %s; %s", len(c.Instances), b.Describe(), strings.Join(common, " "))
	return e, nil
}

func (e *Env) Close() {
	if e.Cluster != nil {
		e.Cluster.Close()
	}
	if e.Net != nil {
		e.Net.Close()
	}
	if e.Backend != nil {
		e.Backend.Close()
	}
}

// verify judges the run: from the database when the harness owns it, else
// through the audit route.
func (e *Env) Verify(ctx context.Context, in verify.CheckInput, tokens map[int64]string) (verify.Verdict, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	in.SoldOut = e.H.O.Linear.SoldOutCache
	if !e.H.O.NoLinear {
		in.Linear = &e.H.O.Linear
	}
	if e.Backend == nil {
		return verify.API(ctx, e.Client, in, tokens)
	}
	if e.Strategy == inventory.RedisGate {
		rdb, err := e.Backend.RedisClient()
		if err != nil {
			return verify.Verdict{}, err
		}
		defer rdb.Close()
		inv := inventory.New(e.Backend.Db.DB, nil, rdb, inventory.Config{Strategy: inventory.RedisGate, KeyPrefix: e.Backend.Prefix}, nil, nil)
		in.Mirror = inv.GateLevel
	}
	return verify.DB(ctx, e.Backend.Db.DB, in)
}

// progress returns a progress callback that redraws one terminal line, or
// nil when stdout is not a terminal.
func (h *Harness) Progress(name string) func(loadgen.Stats) {
	if !h.Tty {
		return nil
	}
	return func(s loadgen.Stats) {
		planned := ""
		if s.Planned > 0 {
			planned = "/" + strconv.Itoa(s.Planned) + "+"
		}
		fmt.Fprintf(h.Out, "\r  [%s] %6.1fs  %d%s requests  %5.0f req/s  errors %d   ", name, s.Elapsed.Seconds(), s.Done, planned, s.Rate, s.Errors)
	}
}

func (h *Harness) EndProgress() {
	if h.Tty {
		fmt.Fprintln(h.Out)
	}
}

// sampler scrapes the shops' metrics every second while a run goes on,
// keeping the last sample of each process incarnation, so counters of a
// process that was killed still count.
type sampler struct {
	mu   sync.Mutex
	Last map[string]map[string]float64 // "instance/start" -> sample
	Stop chan struct{}
	Done chan struct{}
}

func (e *Env) Sample(ctx context.Context) *sampler {
	s := &sampler{Last: map[string]map[string]float64{}, Stop: make(chan struct{}), Done: make(chan struct{})}
	go func() {
		defer close(s.Done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			e.Scrape(ctx, s)
			select {
			case <-s.Stop:
				e.Scrape(ctx, s)
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (e *Env) Scrape(ctx context.Context, s *sampler) {
	n := len(e.Client.BaseURLs)
	for i := range n {
		m, err := e.Client.Metrics(ctx, i, "shop_")
		if err != nil {
			continue
		}
		key := strconv.Itoa(i)
		if e.Cluster != nil {
			key += "/" + strconv.Itoa(e.Cluster.Instances[i].StartCount())
		}
		s.mu.Lock()
		s.Last[key] = m
		s.mu.Unlock()
	}
}

// totals stops the sampler and sums each metric over every incarnation.
func (s *sampler) Totals() map[string]float64 {
	close(s.Stop)
	<-s.Done
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]float64{}
	for _, m := range s.Last {
		for k, v := range m {
			out[k] += v
		}
	}
	return out
}

// interesting metrics for reports.
var reportMetrics = []string{
	"shop_inventory_stale_fence_rejections_total",
	"shop_inventory_lock_busy_total",
	"shop_inventory_lock_lost_before_release_total",
	"shop_inventory_lab_pauses_total",
	"shop_orders_sold_out_fast_path_total",
	"shop_orders_commits_in_doubt_total",
}

func PickMetrics(all map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, k := range reportMetrics {
		if v, ok := all[k]; ok {
			out[k] = v
		}
	}
	return out
}

var ErrTargetMode = errors.New("needs shops the harness starts itself (not possible with --target)")

// metricsNow sums the shops' metrics now (no instance restarts here).
func (e *Env) MetricsNow(ctx context.Context) map[string]float64 {
	out := map[string]float64{}
	for _, m := range e.Cluster.Metrics(ctx) {
		for k, v := range m {
			out[k] += v
		}
	}
	return out
}

// Drain waits until the orders and rejections stop changing (the queue is
// consumed), 90 s at most.
func (e *Env) Drain(ctx context.Context) error {
	db := e.Backend.Db.DB.WithContext(ctx)
	last, since := int64(-1), time.Now()
	for end := time.Now().Add(90 * time.Second); time.Now().Before(end) && ctx.Err() == nil; Sleep(ctx, 500*time.Millisecond) {
		var n int64
		if err := db.Raw("SELECT (SELECT COUNT(*) FROM orders) + (SELECT COUNT(*) FROM seckill_rejections)").Scan(&n).Error; err != nil {
			return err
		}
		if n != last {
			last, since = n, time.Now()
		} else if time.Since(since) > 5*time.Second {
			return nil
		}
	}
	return ctx.Err()
}
