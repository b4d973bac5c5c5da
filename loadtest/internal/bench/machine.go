package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/loadtest/internal/benchreport"
	"github.com/seckill-lab/shop/loadtest/internal/harness"
	"github.com/seckill-lab/shop/loadtest/internal/procstat"
	"github.com/seckill-lab/shop/loadtest/internal/shops"
)

// benchRawCeiling runs workers transactions of one conditional stock
// UPDATE + one order INSERT + COMMIT on a product of its own, for d.
func benchRawCeiling(ctx context.Context, db *sql.DB, workers int, d time.Duration) (benchreport.Raw, error) {
	out := benchreport.Raw{Workers: workers}
	now := time.Now().UTC()
	res, err := db.ExecContext(ctx, "INSERT INTO products (name, price_cents, stock, fence, version, created_at, updated_at) VALUES (?, ?, ?, 0, 0, ?, ?)",
		"bench raw ceiling", 100, 1_000_000_000, now, now)
	if err != nil {
		return out, err
	}
	product, err := res.LastInsertId()
	if err != nil {
		return out, err
	}
	var commits, errs atomic.Int64
	var firstErr atomic.Value
	run := "raw" + loadgen.RandomID(6)
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for n := 0; time.Now().Before(end) && ctx.Err() == nil; n++ {
				if err := rawTx(ctx, db, product, fmt.Sprintf("%s-%d-%d", run, w, n), int64(w)*10_000_000+int64(n)+1); err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				commits.Add(1)
			}
		})
	}
	wg.Wait()
	out.Seconds = time.Since(start).Seconds()
	out.Commits, out.Errors = commits.Load(), errs.Load()
	out.TxPerSec = float64(out.Commits) / out.Seconds
	out.Parts = []float64{out.TxPerSec}
	if out.Commits == 0 {
		if err, _ := firstErr.Load().(error); err != nil {
			return out, err
		}
		return out, errors.New("no transaction committed")
	}
	return out, ctx.Err()
}

func rawTx(ctx context.Context, db *sql.DB, product int64, orderNo string, user int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	res, err := tx.ExecContext(ctx, "UPDATE products SET stock = stock - 1 WHERE id = ? AND stock >= 1", product)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("stock update changed %d rows (%v)", n, err)
	}
	now := time.Now().UTC()
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (order_no, user_id, product_id, quantity, amount_cents, kind, status, created_at, updated_at) VALUES (?, ?, ?, 1, 100, 'seckill', 'pending', ?, ?)",
		orderNo, user, product, now, now); err != nil {
		return err
	}
	return tx.Commit()
}

// benchMemoryPhase runs o.rssClients keep-alive clients on the sold-out
// path of instance 1 for o.rssDuration and reads its peak RSS: VmHWM, reset
// at the start (clear_refs 5), and VmRSS sampled every 100 ms.
func benchMemoryPhase(ctx context.Context, c *shops.Cluster, l benchLoad, o harness.BenchOptions) (benchreport.Memory, error) {
	out := benchreport.Memory{Clients: o.RssClients, Seconds: o.RssDuration.Seconds(), MaxConns: "SHOP_MAX_CONNS default"}
	for _, kv := range c.Instances[0].Env {
		if v, ok := strings.CutPrefix(kv, "SHOP_MAX_CONNS="); ok {
			out.MaxConns = v
		}
	}
	pid := c.Instances[0].PID()
	st, err := procstat.Status(pid)
	if err != nil {
		return out, err
	}
	out.StartRSSMB = st["VmRSS"]
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) // reset VmHWM; without it, VmHWM counts from the start
	stop := make(chan struct{})
	sampled := make(chan float64)
	go func() {
		peak := 0.0
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if st, err := procstat.Status(pid); err == nil {
				peak = max(peak, st["VmRSS"])
			}
			select {
			case <-stop:
				sampled <- peak
				return
			case <-t.C:
			}
		}
	}()
	// Clients beyond the shop's connection cap are answered 503
	// overloaded at once; one that waits 5 s for an answer counts as "no
	// answer". The crowd connects over the first second, as a crowd
	// arriving does: ten thousand connects in the same millisecond
	// overflow a default Linux listen queue (somaxconn 4096) before any
	// server can accept them, and the kernel drops them (counted below).
	// (A phase shorter than 4 s ramps in over its first quarter, so the
	// last client still has time for an answer.)
	l.Timeout = 5 * time.Second
	l.RampIn = min(time.Second, o.RssDuration/4)
	overflows := procstat.ListenOverflows()
	out.SoMaxConn = procstat.SoMaxConn()
	out.Load, err = l.Run(ctx, c.Urls()[:1], o.RssClients, 0, o.RssDuration)
	if after := procstat.ListenOverflows(); overflows >= 0 && after >= 0 {
		out.ListenOverflows = after - overflows
	} else {
		out.ListenOverflows = -1
	}
	close(stop)
	out.MaxRSSMB = <-sampled
	if st, e := procstat.Status(pid); e == nil {
		out.PeakRSSMB = st["VmHWM"]
	}
	return out, err
}

// raiseFDLimit lifts this process's open-file limit to the hard limit; the
// shops started after it inherit it (and Go raises their own soft limit to
// the hard one anyway). Thousands of keep-alive clients need it.
func raiseFDLimit() {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}
