package scenario

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/seckill-lab/shop/loadtest/internal/faults"
	"github.com/seckill-lab/shop/loadtest/internal/harness"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/loadtest/internal/report"
	"github.com/seckill-lab/shop/loadtest/internal/verify"
)

// race: U buyers, one seckill request each, S units, spread round-robin.
func (h runner) Race(ctx context.Context) report.Scenario {
	r := report.Scenario{Title: fmt.Sprintf("flash-sale race: %d buyers, one request each, %d units", h.O.Users, h.O.Stock),
		Params: map[string]any{"users": h.O.Users, "stock": h.O.Stock, "concurrency": h.O.Concurrency}}
	e, err := h.Setup(ctx, "race", harness.Setup{})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer e.Close()
	r.Setup, r.Strategy = e.Desc, e.Strategy
	s := e.Sample(ctx)
	res, err := loadgen.Race(ctx, h.RaceConfig(e, "race"))
	h.EndProgress()
	r.Metrics = harness.PickMetrics(s.Totals())
	if err != nil {
		r.Fill(res.Records, verify.Verdict{}, fmt.Errorf("race: %w", err))
		return r
	}
	v, err := e.Verify(ctx, verify.CheckInput{Records: res.Records, Products: res.InitialStock()}, res.Tokens())
	r.Fill(res.Records, v, err)
	if err == nil && h.O.Users >= h.O.Stock && v.Counts.StockLeft > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d units left unsold although there were more buyers than units (answers other than 201/409: see outcomes)", v.Counts.StockLeft))
	}
	return r
}

// retry: every buyer sends R times, concurrently, in sequence, or after a
// client timeout shorter than the server's work; 40% place regular orders
// with an Idempotency-Key. One instance in three pauses a few lock holders
// (SHOP_LAB_PAUSE_AFTER_LOCK below the lock TTL) so timeouts bite.
func (h runner) Retry(ctx context.Context) report.Scenario {
	r := report.Scenario{Title: fmt.Sprintf("retry storm: %d buyers x %d sends (seckill and regular, same key), %d units each", h.O.Users, h.O.Retries, h.O.Stock),
		Params: map[string]any{"users": h.O.Users, "stock": h.O.Stock, "retries": h.O.Retries, "tiny_timeout": h.O.TinyTimeout.String(), "regular_share": 0.4}}
	e, err := h.Setup(ctx, "retry", harness.Setup{Common: []string{"SHOP_LAB_PAUSE_AFTER_LOCK=300ms", "SHOP_LAB_PAUSE_PROBABILITY=0.02"}})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer e.Close()
	r.Setup, r.Strategy = e.Desc, e.Strategy
	cfg := h.RaceConfig(e, "retry")
	cfg.Attempts, cfg.RegularShare, cfg.TinyTimeout, cfg.Failover = h.O.Retries, 0.4, h.O.TinyTimeout, true
	s := e.Sample(ctx)
	res, err := loadgen.Race(ctx, cfg)
	h.EndProgress()
	r.Metrics = harness.PickMetrics(s.Totals())
	if err != nil {
		r.Fill(res.Records, verify.Verdict{}, fmt.Errorf("retry: %w", err))
		return r
	}
	v, err := e.Verify(ctx, verify.CheckInput{Records: res.Records, Products: res.InitialStock()}, res.Tokens())
	r.Fill(res.Records, v, err)
	gaveUp := 0
	for _, x := range res.Records {
		if x.Status == 0 && strings.Contains(x.Err, "deadline") {
			gaveUp++
		}
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%d sends given up by the client (its timeout) and retried with the same key", gaveUp))
	return r
}

// pay: orders paid with concurrent duplicates, timeouts and retries (same
// key), new keys, insufficient funds, and late payments racing a 2s payment
// timeout and its sweeper.
func (h runner) Pay(ctx context.Context) report.Scenario {
	r := report.Scenario{Title: fmt.Sprintf("payments: %d orders, duplicate and retried pays racing a %s payment timeout", h.O.PayBuyers, h.O.PaymentTimeout),
		Params: map[string]any{"orders": h.O.PayBuyers, "payment_timeout": h.O.PaymentTimeout.String(), "sweep_interval": h.O.SweepInterval.String()}}
	e, err := h.Setup(ctx, "pay", harness.Setup{Common: []string{"SHOP_PAYMENT_TIMEOUT=" + h.O.PaymentTimeout.String(), "SHOP_SWEEP_INTERVAL=" + h.O.SweepInterval.String()}})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer e.Close()
	r.Setup, r.Strategy = e.Desc, e.Strategy
	res, err := loadgen.Pay(ctx, loadgen.PayConfig{Client: e.Client, AdminToken: e.Client.AdminToken, Buyers: h.O.PayBuyers,
		Concurrency: min(h.O.Concurrency, 64), PaymentTimeout: h.O.PaymentTimeout, SweepInterval: h.O.SweepInterval,
		Timeout: h.O.Timeout, Progress: h.Progress("pay")})
	h.EndProgress()
	if err != nil {
		r.Fill(res.Records, verify.Verdict{}, fmt.Errorf("pay: %w", err))
		return r
	}
	r.Unsettled = res.Unsettled
	v, err := e.Verify(ctx, verify.CheckInput{Records: res.Records, Products: res.InitialStock(), Settled: true, Wallets: res.Wallets}, res.Tokens())
	r.Fill(res.Records, v, err)
	groups := map[string]int{}
	for _, g := range res.Groups {
		groups[g]++
	}
	names := make([]string, 0, len(groups))
	for g, n := range groups {
		names = append(names, fmt.Sprintf("%s %d", g, n))
	}
	sort.Strings(names)
	r.Notes = append(r.Notes, "pay groups: "+strings.Join(names, ", "))
	if err == nil {
		r.Notes = append(r.Notes, fmt.Sprintf("orders paid %d, cancelled (swept or refused) %d, pending at the end %d", v.Counts.Paid, v.Counts.Cancelled, res.Unsettled))
	}
	return r
}

// compare runs the same race + retry load against every strategy, and
// against lock-fence with idempotency off, each on a fresh backend.
func (h runner) Compare(ctx context.Context) report.Scenario {
	r := report.Scenario{Title: fmt.Sprintf("strategies compared: %d buyers x %d sends, %d units (same load per row)", h.O.Users, h.O.Retries, h.O.Stock),
		Params: map[string]any{"users": h.O.Users, "stock": h.O.Stock, "retries": h.O.Retries}}
	if len(h.O.Targets) > 0 {
		r.Error = "compare " + harness.ErrTargetMode.Error()
		return r
	}
	// The pause makes a lock holder outlive its lease: `lock` then oversells,
	// `lock-fence` must not. About ten pauses per run, whatever its size.
	p := math.Max(0.01, math.Min(0.2, 8/float64(h.O.Stock)))
	pause := []string{"SHOP_LOCK_TTL=300ms", "SHOP_LAB_PAUSE_AFTER_LOCK=600ms", fmt.Sprintf("SHOP_LAB_PAUSE_PROBABILITY=%.3f", p)}
	rows := []struct {
		row, Strategy string
		Settings      []string
		Safe          bool
	}{
		{"naive", inventory.Naive, nil, false},
		{"lock (pause > TTL)", inventory.Lock, pause, false},
		// The two differences between lock and lock-fence one at a time:
		// the conditional decrement without the fence keeps the stock
		// exact, the paused holder's late write still counts (verify.L2).
		{"lock-conditional (pause > TTL)", inventory.LockConditional, pause, false},
		{"lock-fence (pause > TTL)", inventory.LockFence, pause, true},
		{"conditional", inventory.Conditional, nil, false},
		{"redis-gate", inventory.RedisGate, nil, false},
		{"lock-fence, idempotency off", inventory.LockFence, []string{"SHOP_LAB_NO_IDEMPOTENCY=true"}, false},
	}
	var all []loadgen.Record
	safeClean, unsafeCaught := false, false
	netSeed := h.O.Seed
	if h.O.CompareNet {
		if netSeed == 0 {
			netSeed = rand.Int64N(1<<31) + 1
		}
		r.Params["partition_seed"] = netSeed
	}
	for _, row := range rows {
		if ctx.Err() != nil {
			break
		}
		cr := report.CompareRow{Row: row.row, Strategy: row.Strategy, Settings: strings.Join(row.Settings, " "), Safe: row.Safe}
		e, err := h.Setup(ctx, "compare-"+row.Strategy, harness.Setup{Strategy: row.Strategy, Common: row.Settings})
		if err != nil {
			cr.Error = err.Error()
			r.Compare = append(r.Compare, cr)
			continue
		}
		if r.Setup == "" {
			r.Setup = fmt.Sprintf("%d shop instances per row on a fresh %s each", len(e.Cluster.Instances), e.Backend.Describe())
		}
		cfg := h.RaceConfig(e, "compare "+row.row)
		cfg.Attempts, cfg.RegularShare, cfg.TinyTimeout, cfg.Failover = h.O.Retries, 0.3, h.O.TinyTimeout, true
		s := e.Sample(ctx)
		res, err := loadgen.Race(ctx, cfg)
		h.EndProgress()
		cr.Rejected = s.Totals()["shop_inventory_stale_fence_rejections_total"]
		cr.Summary = loadgen.Summarize(res.Records)
		all = append(all, res.Records...)
		if err == nil {
			var v verify.Verdict
			v, err = e.Verify(ctx, verify.CheckInput{Records: res.Records, Products: res.InitialStock()}, res.Tokens())
			if err == nil {
				cr.Orders, cr.Oversold, cr.Duplicates = v.Counts.Orders, v.Counts.Oversold, v.Counts.Duplicates
				cr.LostAcks, cr.Undersold, cr.StaleFence = v.Counts.LostAcks, v.Counts.Undersold, v.Counts.StaleFence
				cr.Violated = v.Invariants()
				cr.Violations = v.Violations
				cr.Linearizable, cr.Linear = v.Linearizable, v.Linear
				if row.Safe {
					safeClean = v.OK()
				} else if !v.OK() {
					unsafeCaught = true
				}
			}
		}
		if err != nil {
			cr.Error = err.Error()
		}
		e.Close()
		if h.O.CompareNet && faults.PartitionRows[row.row] {
			cr.Partition = faults.ComparePartition(ctx, h.Harness, row.Strategy, netSeed)
		}
		r.Compare = append(r.Compare, cr)
	}
	if ctx.Err() == nil && h.O.CompareQueue {
		rows, recs, queueClean, queueCaught := h.queueColumn(ctx)
		r.Compare, all = append(r.Compare, rows...), append(all, recs...)
		if !queueClean || !queueCaught {
			r.Notes = append(r.Notes, fmt.Sprintf("FAIL: queue column: safe row clean %v, every shortcut caught %v", queueClean, queueCaught))
		}
		safeClean = safeClean && queueClean && queueCaught
	}
	r.Summary = loadgen.Summarize(all)
	r.Linearizable = report.AllLinearizable(r.Compare)
	r.Pass = safeClean && unsafeCaught
	r.Strategy = "all"
	if !safeClean {
		r.Notes = append(r.Notes, "FAIL: the safe row (lock-fence) is not clean")
	}
	if !unsafeCaught {
		r.Notes = append(r.Notes, "FAIL: no unsafe row showed a violation: a checker that cannot fail is broken")
	}
	faults.JudgeComparePartitions(&r)
	return r
}
