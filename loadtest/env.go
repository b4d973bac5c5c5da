package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/seckill-lab/shop/loadtest/internal/verify"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/loadgen"
)

// harness runs scenarios.
type harness struct {
	o       options
	bin     string
	workdir string
	out     io.Writer
	tty     bool
	log     *slog.Logger
	seq     int
}

// setup says how a scenario wants its shops.
type setup struct {
	strategy string
	common   []string             // settings of every instance
	extra    func(i int) []string // settings of instance i
	private  bool                 // needs a Redis it may restart and flush
	redisURL string               // a Redis the scenario started (Cluster or Sentinel list) instead of --redis-url
}

// env is where a scenario runs: shops the harness started on a fresh
// backend, or the --target shops.
type env struct {
	h        *harness
	name     string
	backend  *backend
	cluster  *cluster
	client   *loadgen.Client
	strategy string
	desc     string
}

func (h *harness) setup(ctx context.Context, name string, s setup) (*env, error) {
	if s.strategy == "" {
		s.strategy = h.o.strategy
	}
	e := &env{h: h, name: name, strategy: s.strategy}
	if len(h.o.targets) > 0 {
		e.client = loadgen.NewClient(h.o.targets, h.o.adminToken, h.o.concurrency)
		e.desc = fmt.Sprintf("%d target(s) %s (started elsewhere; strategy as configured there)", len(h.o.targets), strings.Join(h.o.targets, ", "))
		e.strategy = "as configured"
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return e, e.client.Ready(rctx)
	}
	h.seq++
	b, err := newBackend(ctx, backendOptions{mysqlDSN: h.o.mysqlDSN, redisURL: cmp.Or(s.redisURL, h.o.redisURL), private: s.private,
		workdir: h.workdir, keep: h.o.keep, scenarioID: fmt.Sprintf("%02d-%s", h.seq, name)}, h.log)
	if err != nil {
		return nil, err
	}
	e.backend = b
	common := append([]string{"SHOP_STOCK_STRATEGY=" + s.strategy, "SHOP_SOLD_OUT_CACHE=" + h.o.linear.SoldOutCache.String()}, s.common...)
	if h.o.batchMax > 0 {
		common = append(common, "SHOP_BATCH_MAX="+strconv.Itoa(h.o.batchMax))
	}
	extra := s.extra
	if s.strategy == inventory.LockFence { // a shop refuses buckets under another strategy
		common, extra = withBuckets(h.o.stockBuckets, common, extra)
	}
	c, err := startCluster(ctx, h.bin, b, h.o.instances, fmt.Sprintf("%02d-%s", h.seq, name), h.workdir, common, extra)
	if err != nil {
		b.close()
		return nil, err
	}
	e.cluster, e.client = c, c.client
	e.desc = fmt.Sprintf("%d shop instances on %s; %s", len(c.instances), b.describe(), strings.Join(common, " "))
	return e, nil
}

func (e *env) close() {
	if e.cluster != nil {
		e.cluster.close()
	}
	if e.backend != nil {
		e.backend.close()
	}
}

// verify judges the run: from the database when the harness owns it, else
// through the audit route.
func (e *env) verify(ctx context.Context, in verify.CheckInput, tokens map[int64]string) (verify.Verdict, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer cancel()
	in.SoldOut = e.h.o.linear.SoldOutCache
	if !e.h.o.noLinear {
		in.Linear = &e.h.o.linear
	}
	if e.backend == nil {
		return verify.API(ctx, e.client, in, tokens)
	}
	if e.strategy == inventory.RedisGate {
		rdb, err := e.backend.redisClient()
		if err != nil {
			return verify.Verdict{}, err
		}
		defer rdb.Close()
		inv := inventory.New(e.backend.db.DB, nil, rdb, inventory.Config{Strategy: inventory.RedisGate, KeyPrefix: e.backend.prefix}, nil, nil)
		in.Mirror = inv.GateLevel
	}
	return verify.DB(ctx, e.backend.db.DB, in)
}

// progress returns a progress callback that redraws one terminal line, or
// nil when stdout is not a terminal.
func (h *harness) progress(name string) func(loadgen.Stats) {
	if !h.tty {
		return nil
	}
	return func(s loadgen.Stats) {
		planned := ""
		if s.Planned > 0 {
			planned = "/" + strconv.Itoa(s.Planned) + "+"
		}
		fmt.Fprintf(h.out, "\r  [%s] %6.1fs  %d%s requests  %5.0f req/s  errors %d   ", name, s.Elapsed.Seconds(), s.Done, planned, s.Rate, s.Errors)
	}
}

func (h *harness) endProgress() {
	if h.tty {
		fmt.Fprintln(h.out)
	}
}

// sampler scrapes the shops' metrics every second while a run goes on,
// keeping the last sample of each process incarnation, so counters of a
// process that was killed still count.
type sampler struct {
	mu   sync.Mutex
	last map[string]map[string]float64 // "instance/start" -> sample
	stop chan struct{}
	done chan struct{}
}

func (e *env) sample(ctx context.Context) *sampler {
	s := &sampler{last: map[string]map[string]float64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			e.scrape(ctx, s)
			select {
			case <-s.stop:
				e.scrape(ctx, s)
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (e *env) scrape(ctx context.Context, s *sampler) {
	n := len(e.client.BaseURLs)
	for i := range n {
		m, err := e.client.Metrics(ctx, i, "shop_")
		if err != nil {
			continue
		}
		key := strconv.Itoa(i)
		if e.cluster != nil {
			e.cluster.instances[i].mu.Lock()
			key += "/" + strconv.Itoa(e.cluster.instances[i].starts)
			e.cluster.instances[i].mu.Unlock()
		}
		s.mu.Lock()
		s.last[key] = m
		s.mu.Unlock()
	}
}

// totals stops the sampler and sums each metric over every incarnation.
func (s *sampler) totals() map[string]float64 {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]float64{}
	for _, m := range s.last {
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
}

func pickMetrics(all map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, k := range reportMetrics {
		if v, ok := all[k]; ok {
			out[k] = v
		}
	}
	return out
}

var errTargetMode = errors.New("needs shops the harness starts itself (not possible with --target)")
