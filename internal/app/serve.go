package app

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seckill-lab/shop/internal/httpapi"
	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/platform"
)

func randomSecret() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func serve(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c, rest, err := platform.LoadConfig("shop serve", args, getenv, stderr)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("serve: unexpected arguments %q", rest)
	}
	log := newLogger(c, stderr)
	if getenv("GOMEMLIMIT") == "" && c.MemoryLimit > 0 {
		// Stacks and buffers of thousands of idle keep-alive clients count
		// too: the GC works harder near the limit instead of letting the
		// heap grow with the client count.
		debug.SetMemoryLimit(c.MemoryLimit << 20)
	}
	if getenv("GOGC") == "" {
		// The live heap is a few MB: at Go's 100 % the GC ran about 15
		// times a second under a crowd. At 200 an instance served 1.19x
		// the sold-out refusals (A/B in one run); the memory limit still
		// bounds the heap when thousands of clients connect.
		debug.SetGCPercent(int(c.GCPercent))
	}
	if getenv("GOMAXPROCS") == "" && c.MaxProcs > 0 {
		// A request hands off to a batch leader and to the shared Redis
		// trips and back; with one P those wake-ups stay on one thread
		// (the readied goroutine runs next), with two each may wake an
		// idle thread in the kernel, which then finds little to do.
		runtime.GOMAXPROCS(int(c.MaxProcs))
	}
	tokenGenerated := c.AdminToken == ""
	if tokenGenerated {
		c.AdminToken = randomSecret()
		log.Warn("SHOP_ADMIN_TOKEN unset: generated an admin token, printed once the shop is ready; with several instances, give all the same SHOP_ADMIN_TOKEN")
	}
	if c.AuthSecret == "" {
		c.AuthSecret = randomSecret()
		log.Warn("SHOP_AUTH_SECRET unset: generated a random one; user tokens only work on this instance until restart")
	}
	if lab := c.Lab(); len(lab) > 0 {
		log.Warn("!!! LAB MODE: UNSAFE SWITCHES ARE ON; this instance demonstrates failures, never run it for real !!!", "switches", lab)
	}
	if c.PprofAddr != "" {
		stop, err := startProfiler(c.PprofAddr, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	tr, err := platform.OpenTracing(ctx, c, Version)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tr.Shutdown(sctx); err != nil {
			log.Warn("tracing: spans still buffered were not sent", "err", err)
		}
	}()
	db, rdb, err := backends(ctx, c, log, tr)
	if err != nil {
		return err
	}
	defer db.Close()
	defer rdb.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	svc := newServices(c, db, rdb, reg, log)
	defer svc.close()
	if c.DemoCatalogOn() {
		if err := seedDemoCatalog(ctx, svc, log); err != nil {
			return err
		}
	}
	// Background work stops, and is waited for, before the backends close
	// (deferred calls run last-in first-out).
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var background sync.WaitGroup
	defer func() { stopBG(); background.Wait() }()
	background.Go(func() { svc.products.Follow(bg) })
	background.Go(func() { svc.orders.RunSweeper(bg, c.SweepInterval, c.PaymentTimeout) })
	background.Go(func() { svc.products.RunGateReaper(bg, c.SweepInterval) })
	var queued *order.Queued
	if svc.queue != nil {
		queued = svc.queue.queued
		if svc.queue.consume != nil {
			background.Go(func() { svc.queue.consume(bg) })
		}
	}

	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("SHOP_ADDR: listen on %s: %w", c.Addr, err)
	}
	self := httpapi.SelfURL(ln.Addr())
	handler := httpapi.New(httpapi.Deps{
		Log:      log,
		Registry: reg,
		Version:  Version,
		Ready: map[string]httpapi.Pinger{
			"database": db,
			"redis":    httpapi.PingFunc(func(ctx context.Context) error { return rdb.Ping(ctx).Err() }),
		},
		AdminToken: c.AdminToken, AuthSecret: c.AuthSecret, TokenTTL: c.TokenTTL, DemoLogin: c.DemoLogin,
		Products: svc.products, Orders: svc.orders, Queued: queued, Payments: svc.payments, Idem: svc.idem, Tokens: svc.tokens,
		Audit:         svc.audit,
		NoIdempotency: c.LabNoIdempotency,
		LabRoutes:     c.LabRoutes, LabSwitches: c.Lab(), Background: bg,
		SelfURL: func() string { return self },
		Limits:  limitsOf(c, rdb),
		Tracing: tracingOf(tr),
	})

	srv := newServer(c, handler)
	log.Info("listening", "addr", ln.Addr().String(), "version", Version, "stock_strategy", c.StockStrategy)

	errc := make(chan error, 1)
	hl := httpapi.Listener(ln, c.MaxConns, reg)
	go func() { errc <- srv.Serve(hl) }()
	writeStartInfo(stdout, startInfoOf(c, ln.Addr(), tokenGenerated, rdb))
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", "wait", c.ShutdownWait)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.ShutdownWait)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		// Requests still running after the wait (or connections a client
		// opened and never used) are cut. Their transactions either
		// committed or roll back, and idempotency makes the client's
		// retry safe, so this is a warning, not a failed run.
		log.Warn("shutdown wait over: closing the remaining connections", "err", err)
		_ = srv.Close()
	}
	// Connections refused at the cap are the listener's, not the
	// server's: each gets its 503 and its drain before the process ends.
	// (Serve has returned once the listener's accept loop has: no
	// refusal starts after that.)
	select {
	case <-errc:
	case <-sctx.Done():
	}
	if err := httpapi.WaitRefused(sctx, hl); err != nil {
		log.Warn("shutdown wait over: closing connections refused at the cap before their 503 was drained", "err", err)
	}
	log.Info("stopped")
	return nil
}

// tracingOf is the HTTP layer's view of tr; nil when tracing is off.
func tracingOf(tr *platform.Tracing) *httpapi.Tracing {
	if tr == nil {
		return nil
	}
	return &httpapi.Tracing{Provider: tr.Provider, Propagator: tr.Propagator}
}
