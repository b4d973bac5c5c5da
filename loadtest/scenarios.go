package main

import (
	"context"
	"fmt"
	"github.com/seckill-lab/shop/loadtest/internal/verify"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/loadgen"
)

// scenarioReport is everything one scenario run reports.
type scenarioReport struct {
	Name      string             `json:"name"`
	Title     string             `json:"title"`
	Setup     string             `json:"setup"`
	Strategy  string             `json:"strategy"`
	Params    map[string]any     `json:"params"`
	Started   time.Time          `json:"started"`
	Elapsed   time.Duration      `json:"elapsed_ns"`
	Summary   loadgen.Summary    `json:"summary"`
	Series    []loadgen.Point    `json:"series"`
	Verdict   *verify.Verdict    `json:"verdict,omitempty"`
	Metrics   map[string]float64 `json:"metrics,omitempty"`
	Faults    []fault            `json:"faults,omitempty"`
	Compare   []compareRow       `json:"compare,omitempty"`
	Bench     *benchReport       `json:"bench,omitempty"`
	Failover  []failoverRow      `json:"failover,omitempty"`
	Notes     []string           `json:"notes,omitempty"`
	Pass      bool               `json:"pass"`
	Error     string             `json:"error,omitempty"`
	Unsettled int                `json:"unsettled,omitempty"`
	// Linearizable: were the clients' histories linearizable (every
	// compare row's, for compare)? nil: unknown or not checked.
	Linearizable *bool `json:"linearizable"`
	// ViaAPI: the shops were --targets, judged through the audit route
	// (no verify.L2: the ledger's fences are not exposed).
	ViaAPI bool `json:"via_api,omitempty"`
}

func (h *harness) run(ctx context.Context, name string) scenarioReport {
	ctx, cancel := context.WithTimeout(ctx, h.o.maxDuration)
	defer cancel()
	start := time.Now()
	var r scenarioReport
	switch name {
	case "race":
		r = h.race(ctx)
	case "retry":
		r = h.retry(ctx)
	case "pay":
		r = h.pay(ctx)
	case "chaos":
		r = h.chaos(ctx)
	case "compare":
		r = h.compare(ctx)
	case "bench":
		r = h.bench(ctx)
	case failoverCluster, failoverSentinel:
		r = h.failover(ctx, name)
	}
	checkA1(&r, h.o.expect5xx)
	r.Name, r.Started, r.Elapsed = name, start, time.Since(start)
	r.ViaAPI = len(h.o.targets) > 0
	if r.Error != "" {
		r.Pass = false
	}
	return r
}

// fill puts a load result and its verdict into the report.
func (r *scenarioReport) fill(recs []loadgen.Record, v verify.Verdict, err error) {
	r.Summary = loadgen.Summarize(recs)
	r.Series = loadgen.Series(recs, 60)
	if err != nil {
		r.Error = err.Error()
		return
	}
	r.Verdict = &v
	r.Pass = v.OK()
	r.Linearizable = v.Linearizable
}

func (h *harness) raceConfig(e *env, name string) loadgen.Config {
	return loadgen.Config{Client: e.client, AdminToken: e.client.AdminToken, Users: h.o.users, Stock: int64(h.o.stock),
		Concurrency: h.o.concurrency, Timeout: h.o.timeout, Progress: h.progress(name)}
}

// race: U buyers, one seckill request each, S units, spread round-robin.
func (h *harness) race(ctx context.Context) scenarioReport {
	r := scenarioReport{Title: fmt.Sprintf("flash-sale race: %d buyers, one request each, %d units", h.o.users, h.o.stock),
		Params: map[string]any{"users": h.o.users, "stock": h.o.stock, "concurrency": h.o.concurrency}}
	e, err := h.setup(ctx, "race", setup{})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer e.close()
	r.Setup, r.Strategy = e.desc, e.strategy
	s := e.sample(ctx)
	res, err := loadgen.Race(ctx, h.raceConfig(e, "race"))
	h.endProgress()
	r.Metrics = pickMetrics(s.totals())
	if err != nil {
		r.fill(res.Records, verify.Verdict{}, fmt.Errorf("race: %w", err))
		return r
	}
	v, err := e.verify(ctx, verify.CheckInput{Records: res.Records, Products: res.InitialStock()}, res.Tokens())
	r.fill(res.Records, v, err)
	if err == nil && h.o.users >= h.o.stock && v.Counts.StockLeft > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d units left unsold although there were more buyers than units (answers other than 201/409: see outcomes)", v.Counts.StockLeft))
	}
	return r
}

// retry: every buyer sends R times, concurrently, in sequence, or after a
// client timeout shorter than the server's work; 40% place regular orders
// with an Idempotency-Key. One instance in three pauses a few lock holders
// (SHOP_LAB_PAUSE_AFTER_LOCK below the lock TTL) so timeouts bite.
func (h *harness) retry(ctx context.Context) scenarioReport {
	r := scenarioReport{Title: fmt.Sprintf("retry storm: %d buyers x %d sends (seckill and regular, same key), %d units each", h.o.users, h.o.retries, h.o.stock),
		Params: map[string]any{"users": h.o.users, "stock": h.o.stock, "retries": h.o.retries, "tiny_timeout": h.o.tinyTimeout.String(), "regular_share": 0.4}}
	e, err := h.setup(ctx, "retry", setup{common: []string{"SHOP_LAB_PAUSE_AFTER_LOCK=300ms", "SHOP_LAB_PAUSE_PROBABILITY=0.02"}})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer e.close()
	r.Setup, r.Strategy = e.desc, e.strategy
	cfg := h.raceConfig(e, "retry")
	cfg.Attempts, cfg.RegularShare, cfg.TinyTimeout, cfg.Failover = h.o.retries, 0.4, h.o.tinyTimeout, true
	s := e.sample(ctx)
	res, err := loadgen.Race(ctx, cfg)
	h.endProgress()
	r.Metrics = pickMetrics(s.totals())
	if err != nil {
		r.fill(res.Records, verify.Verdict{}, fmt.Errorf("retry: %w", err))
		return r
	}
	v, err := e.verify(ctx, verify.CheckInput{Records: res.Records, Products: res.InitialStock()}, res.Tokens())
	r.fill(res.Records, v, err)
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
func (h *harness) pay(ctx context.Context) scenarioReport {
	r := scenarioReport{Title: fmt.Sprintf("payments: %d orders, duplicate and retried pays racing a %s payment timeout", h.o.payBuyers, h.o.paymentTimeout),
		Params: map[string]any{"orders": h.o.payBuyers, "payment_timeout": h.o.paymentTimeout.String(), "sweep_interval": h.o.sweepInterval.String()}}
	e, err := h.setup(ctx, "pay", setup{common: []string{"SHOP_PAYMENT_TIMEOUT=" + h.o.paymentTimeout.String(), "SHOP_SWEEP_INTERVAL=" + h.o.sweepInterval.String()}})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer e.close()
	r.Setup, r.Strategy = e.desc, e.strategy
	res, err := loadgen.Pay(ctx, loadgen.PayConfig{Client: e.client, AdminToken: e.client.AdminToken, Buyers: h.o.payBuyers,
		Concurrency: min(h.o.concurrency, 64), PaymentTimeout: h.o.paymentTimeout, SweepInterval: h.o.sweepInterval,
		Timeout: h.o.timeout, Progress: h.progress("pay")})
	h.endProgress()
	if err != nil {
		r.fill(res.Records, verify.Verdict{}, fmt.Errorf("pay: %w", err))
		return r
	}
	r.Unsettled = res.Unsettled
	v, err := e.verify(ctx, verify.CheckInput{Records: res.Records, Products: res.InitialStock(), Settled: true, Wallets: res.Wallets}, res.Tokens())
	r.fill(res.Records, v, err)
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

// fault is one injected failure and what it did.
type fault struct {
	Name     string        `json:"name"`
	At       time.Duration `json:"at_ns"` // from the start of the load
	Lasted   time.Duration `json:"lasted_ns"`
	Target   string        `json:"target"`
	Effect   string        `json:"effect"`
	Err      string        `json:"error,omitempty"`
	Restarts int           `json:"restarts,omitempty"` // process starts it took to come back
	instance int
	start    time.Time
	end      time.Time
}

// chaos: a paced race with regular orders and retries while the harness
// SIGKILLs and restarts an instance, restarts and flushes a private Redis,
// and SIGSTOPs an instance past the lock TTL; a third instance pauses some
// lock holders past their TTL on its own. Every invariant must still hold.
func (h *harness) chaos(ctx context.Context) scenarioReport {
	r := scenarioReport{Title: fmt.Sprintf("chaos: %d buyers over %s with SIGKILL, Redis restart and FLUSHALL, SIGSTOP past the lock TTL", h.o.users, h.o.chaosDuration),
		Params: map[string]any{"users": h.o.users, "stock": h.o.stock, "duration": h.o.chaosDuration.String(), "lock_ttl": "1s", "lock_wait": "1s"}}
	if len(h.o.targets) > 0 {
		r.Error = "chaos " + errTargetMode.Error()
		return r
	}
	if h.o.instances < 2 {
		r.Error = "chaos needs --instances >= 2"
		return r
	}
	const ttl, wait = time.Second, time.Second
	pauser := h.o.instances - 1
	// Stock also comes back during the run, so the linearizability check
	// judges a counter that goes both ways: the sweeper cancels the orders
	// left unpaid for a third of the load (nobody pays here), and the hot
	// product is restocked halfway.
	unpaid := (h.o.chaosDuration / 3).Round(time.Second)
	r.Params["payment_timeout"] = unpaid.String()
	e, err := h.setup(ctx, "chaos", setup{private: true,
		common: []string{"SHOP_LOCK_TTL=" + ttl.String(), "SHOP_LOCK_WAIT=" + wait.String(),
			"SHOP_PAYMENT_TIMEOUT=" + unpaid.String(), "SHOP_SWEEP_INTERVAL=500ms"},
		extra: func(i int) []string {
			if i == pauser && i != 0 && i != 1 {
				return []string{"SHOP_LAB_PAUSE_AFTER_LOCK=1500ms", "SHOP_LAB_PAUSE_PROBABILITY=0.01"}
			}
			return nil
		}})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer e.close()
	r.Setup, r.Strategy = e.desc, e.strategy
	if e.backend.redisKind == "shared" {
		r.Notes = append(r.Notes, "Redis faults skipped: only a private Redis is restarted or flushed")
	}
	cfg := h.raceConfig(e, "chaos")
	cfg.Attempts, cfg.RegularShare, cfg.Failover, cfg.MaxResends = 2, 0.5, true, 4
	// Regular buyers spread over 8 products (8 locks), about 20% more
	// demand than units, so the lock path stays busy most of the run.
	cfg.RegularProducts = 8
	cfg.RegularStock = max(1, int64(float64(h.o.users)*0.8/8))
	cfg.Rate = float64(h.o.users) / h.o.chaosDuration.Seconds()
	cfg.Timeout = min(h.o.timeout, 5*time.Second)

	p, err := e.client.CreateProduct(ctx, "chaos", 990, int64(h.o.stock), "lt-chaos-"+loadgen.RandomID(6))
	if err != nil {
		r.Error = "create the hot product: " + err.Error()
		return r
	}
	cfg.ProductID, cfg.Stock = p.ID, int64(h.o.stock)

	s := e.sample(ctx)
	loadStart, faultStart, restockStart := make(chan time.Time, 1), make(chan time.Time, 1), make(chan time.Time, 1)
	go func() {
		select {
		case t0 := <-loadStart:
			faultStart <- t0
			restockStart <- t0
		case <-ctx.Done():
		}
	}()
	injected := make(chan []fault, 1)
	go func() { injected <- injectFaults(ctx, e, chaosSchedule(ttl), h.o.chaosDuration, faultStart) }()
	restocked := make(chan error, 1)
	go func() {
		select {
		case t0 := <-restockStart:
			sleep(ctx, time.Until(t0.Add(h.o.chaosDuration/2)))
			restocked <- e.client.Restock(ctx, p.ID, max(1, int64(h.o.stock)/4), "lt-chaos-restock-"+loadgen.RandomID(6))
		case <-ctx.Done():
			restocked <- ctx.Err()
		}
	}()
	res, err := h.raceClocked(ctx, cfg, loadStart)
	faults := <-injected
	restockErr := <-restocked
	_ = e.cluster.signal(0, syscall.SIGCONT) // in case the load ended first
	r.Metrics = pickMetrics(s.totals())
	if err != nil {
		r.fill(res.Records, verify.Verdict{}, fmt.Errorf("chaos: %w", err))
		return r
	}
	v, err := e.verify(ctx, verify.CheckInput{Records: res.Records, Products: res.InitialStock()}, res.Tokens())
	r.fill(res.Records, v, err)
	r.Faults = describeFaults(faults, res, len(e.cluster.instances), ttl, wait)
	judgeFaults(&r, v, err, faults, res, ttl, wait)
	if restockErr != nil {
		r.Pass = false
		r.Notes = append(r.Notes, "FAIL: the halfway restock of the hot product failed: "+firstLine(restockErr.Error()))
	}
	return r
}

// scheduledFault is one row of the chaos schedule: at a fraction of the
// load's duration, inject does the damage to the scenario's environment
// and notes in f what went wrong.
type scheduledFault struct {
	at     float64
	fault  fault // Name, Target and instance (-1: Redis)
	redis  bool  // a Redis fault: skipped on a shared Redis, Target names its kind
	inject func(ctx context.Context, e *env, f *fault)
}

// chaosSchedule is the chaos scenario's faults, in the order they happen.
func chaosSchedule(ttl time.Duration) []scheduledFault {
	note := func(f *fault, err error) {
		if err != nil {
			f.Err = err.Error()
		}
	}
	return []scheduledFault{
		{at: 0.2, fault: fault{Name: "SIGKILL + restart", instance: 1, Target: "instance 2"},
			inject: func(ctx context.Context, e *env, f *fault) {
				note(f, e.cluster.kill(1))
				sleep(ctx, time.Second)
				note(f, e.cluster.restart(ctx, 1))
				f.Restarts = e.cluster.instances[1].starts - 1
			}},
		{at: 0.4, fault: fault{Name: "Redis restart", instance: -1}, redis: true,
			inject: func(ctx context.Context, e *env, f *fault) { note(f, e.backend.restartRedis(ctx)) }},
		{at: 0.55, fault: fault{Name: "Redis FLUSHALL", instance: -1}, redis: true,
			inject: func(ctx context.Context, e *env, f *fault) { note(f, e.backend.flushRedis(ctx)) }},
		{at: 0.7, fault: fault{Name: "SIGSTOP past the lock TTL, then SIGCONT", instance: 0, Target: "instance 1"},
			inject: func(ctx context.Context, e *env, f *fault) {
				note(f, e.cluster.signal(0, syscall.SIGSTOP))
				sleep(context.WithoutCancel(ctx), ttl+time.Second)
				note(f, e.cluster.signal(0, syscall.SIGCONT))
			}},
	}
}

// injectFaults waits for the load to start (its time arrives on loadStart),
// then injects each scheduled fault at its time into a run of the given
// duration, and returns what it injected.
func injectFaults(ctx context.Context, e *env, schedule []scheduledFault, duration time.Duration, loadStart <-chan time.Time) []fault {
	var t0 time.Time
	select {
	case t0 = <-loadStart:
	case <-ctx.Done():
		return nil
	}
	var faults []fault
	for _, sf := range schedule {
		if sf.redis && e.backend.redisKind == "shared" {
			continue
		}
		sleep(ctx, time.Until(t0.Add(time.Duration(sf.at*float64(duration)))))
		if ctx.Err() != nil {
			break
		}
		f := sf.fault
		if sf.redis {
			f.Target = e.backend.redisKind + " Redis"
		}
		f.start = time.Now()
		sf.inject(ctx, e, &f)
		f.end = time.Now()
		faults = append(faults, f)
	}
	return faults
}

// raceClocked runs the race (reporting progress as cfg says) and sends on
// loadStart when its buyers start: Race creates products and logs buyers in
// first, and the faults' clock starts with the buyers.
func (h *harness) raceClocked(ctx context.Context, cfg loadgen.Config, loadStart chan<- time.Time) (loadgen.Result, error) {
	inner := cfg.Progress
	once := sync.Once{}
	cfg.Progress = func(st loadgen.Stats) {
		once.Do(func() { loadStart <- time.Now().Add(-st.Elapsed) })
		if inner != nil {
			inner(st)
		}
	}
	cfg.ProgressEvery = 100 * time.Millisecond
	res, err := loadgen.Race(ctx, cfg)
	h.endProgress()
	return res, err
}

// judgeFaults fails a chaos run whose faults were not all carried out, or
// none at all, and adds L3 (no two holders of a lock at once, judged from
// the faults' times) to its verdict.
func judgeFaults(r *scenarioReport, v verify.Verdict, err error, faults []fault, res loadgen.Result, ttl, wait time.Duration) {
	for _, f := range r.Faults {
		if f.Err != "" {
			r.Pass = false
			r.Notes = append(r.Notes, fmt.Sprintf("FAIL: the fault %q was not carried out as planned, so the run proves less than it should: %s", f.Name, firstLine(f.Err)))
		}
	}
	if len(r.Faults) == 0 {
		r.Pass = false
		r.Notes = append(r.Notes, "FAIL: the load ended before any fault was injected")
	}
	if err == nil {
		if l3 := checkL3(faults, res, ttl, wait); l3 != nil {
			v.Locks = append(v.Locks, *l3)
			v.Violations = append(v.Violations, *l3)
			r.Verdict = &v
			r.Pass = false
		}
	}
	if n := r.Metrics["shop_inventory_stale_fence_rejections_total"]; n > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%.0f stock writes refused for a stale fencing token (holders paused or stopped past the TTL, or a Redis that lost the fence counter); none counted (L2 from the ledger)", n))
	}
}

func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// describeFaults says what each fault did to the clients: answers in the
// window from the fault to a second after it ended.
func describeFaults(fs []fault, res loadgen.Result, n int, ttl, wait time.Duration) []fault {
	out := make([]fault, 0, len(fs))
	for _, f := range fs {
		f.At, f.Lasted = f.start.Sub(res.Started), f.end.Sub(f.start)
		var total, noAnswer, fivexx, busy, slow, onTarget, onTargetFailed int
		for _, r := range res.Records {
			if r.Start.Before(f.start) && r.End.Before(f.start) || r.Start.After(f.end.Add(time.Second)) {
				continue
			}
			total++
			switch {
			case r.Status == 0:
				noAnswer++
			case r.Code == "busy":
				busy++
			case r.Status >= 500:
				fivexx++
			}
			if r.Latency() > ttl {
				slow++
			}
			if f.instance >= 0 && r.Target == f.instance {
				onTarget++
				if r.Failed() {
					onTargetFailed++
				}
			}
		}
		f.Effect = fmt.Sprintf("%d requests overlapped it: %d no answer, %d 5xx, %d 503 busy (all resent with the same key), %d slower than the lock TTL",
			total, noAnswer, fivexx, busy, slow)
		if f.instance >= 0 {
			f.Effect += fmt.Sprintf("; on %s: %d requests, %d failed", f.Target, onTarget, onTargetFailed)
		}
		if f.Name == "SIGKILL + restart" {
			if d, ok := firstLockPathSuccess(res, f); ok {
				f.Effect += fmt.Sprintf("; first order through the product lock on another instance %s after the kill (L3 bound %s)",
					d.Round(time.Millisecond), (ttl + wait + 3*time.Second))
			}
		}
		out = append(out, f)
	}
	return out
}

// firstLockPathSuccess is how long after a kill another instance created
// an order (201: the deduction went through the product lock).
func firstLockPathSuccess(res loadgen.Result, f fault) (time.Duration, bool) {
	for _, r := range res.Records {
		if r.Status == http.StatusCreated && r.Target != f.instance && r.Start.After(f.start) {
			return r.End.Sub(f.start), true
		}
	}
	return 0, false
}

// checkL3: a SIGKILLed instance's lock is free within its TTL, so another
// instance creates an order within TTL + lock wait (+3s for a loaded
// machine) of the kill, as long as orders were still being asked for.
func checkL3(fs []fault, res loadgen.Result, ttl, wait time.Duration) *verify.Violation {
	for _, f := range fs {
		if f.Name != "SIGKILL + restart" {
			continue
		}
		bound := ttl + wait + 3*time.Second
		asked := false
		for _, r := range res.Records {
			if r.Start.After(f.start.Add(bound)) && r.OrderNo == "" && r.Code != "sold_out" && r.Code != "insufficient_stock" {
				asked = true
				break
			}
		}
		d, ok := firstLockPathSuccess(res, f)
		if (ok && d > bound) || (!ok && asked) {
			v := verify.NewViolation("L3", fmt.Sprintf("no order was created on another instance within %s of SIGKILL (first after %s): the killed holder's lock did not expire", bound, d),
				map[string]any{"killed": f.Target, "at": f.start.Format(time.RFC3339Nano)})
			return &v
		}
	}
	return nil
}

// compareRow is one strategy's line of the comparison table.
type compareRow struct {
	Row        string          `json:"row"`
	Strategy   string          `json:"strategy"`
	Settings   string          `json:"settings"`
	Safe       bool            `json:"expected_safe"`
	Orders     int64           `json:"orders"`
	Oversold   int64           `json:"oversold_units"`
	Duplicates int64           `json:"duplicate_orders"`
	LostAcks   int             `json:"lost_acks"`
	Undersold  int             `json:"undersold"`
	StaleFence int64           `json:"stale_fence_accepted"`
	Violated   []string        `json:"violated"`
	Summary    loadgen.Summary `json:"summary"`
	Error      string          `json:"error,omitempty"`
	Rejected   float64         `json:"stale_fence_rejections"`
	// Linearizable is the row's histories' verdict (nil: unknown).
	Linearizable *bool                 `json:"linearizable"`
	Linear       *loadgen.LinearReport `json:"linearizability,omitempty"`
	violations   []verify.Violation
}

// compare runs the same race + retry load against every strategy, and
// against lock-fence with idempotency off, each on a fresh backend.
func (h *harness) compare(ctx context.Context) scenarioReport {
	r := scenarioReport{Title: fmt.Sprintf("strategies compared: %d buyers x %d sends, %d units (same load per row)", h.o.users, h.o.retries, h.o.stock),
		Params: map[string]any{"users": h.o.users, "stock": h.o.stock, "retries": h.o.retries}}
	if len(h.o.targets) > 0 {
		r.Error = "compare " + errTargetMode.Error()
		return r
	}
	// The pause makes a lock holder outlive its lease: `lock` then oversells,
	// `lock-fence` must not. About ten pauses per run, whatever its size.
	p := math.Max(0.01, math.Min(0.2, 8/float64(h.o.stock)))
	pause := []string{"SHOP_LOCK_TTL=300ms", "SHOP_LAB_PAUSE_AFTER_LOCK=600ms", fmt.Sprintf("SHOP_LAB_PAUSE_PROBABILITY=%.3f", p)}
	rows := []struct {
		row, strategy string
		settings      []string
		safe          bool
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
	for _, row := range rows {
		if ctx.Err() != nil {
			break
		}
		cr := compareRow{Row: row.row, Strategy: row.strategy, Settings: strings.Join(row.settings, " "), Safe: row.safe}
		e, err := h.setup(ctx, "compare-"+row.strategy, setup{strategy: row.strategy, common: row.settings})
		if err != nil {
			cr.Error = err.Error()
			r.Compare = append(r.Compare, cr)
			continue
		}
		if r.Setup == "" {
			r.Setup = fmt.Sprintf("%d shop instances per row on a fresh %s each", len(e.cluster.instances), e.backend.describe())
		}
		cfg := h.raceConfig(e, "compare "+row.row)
		cfg.Attempts, cfg.RegularShare, cfg.TinyTimeout, cfg.Failover = h.o.retries, 0.3, h.o.tinyTimeout, true
		s := e.sample(ctx)
		res, err := loadgen.Race(ctx, cfg)
		h.endProgress()
		cr.Rejected = s.totals()["shop_inventory_stale_fence_rejections_total"]
		cr.Summary = loadgen.Summarize(res.Records)
		all = append(all, res.Records...)
		if err == nil {
			var v verify.Verdict
			v, err = e.verify(ctx, verify.CheckInput{Records: res.Records, Products: res.InitialStock()}, res.Tokens())
			if err == nil {
				cr.Orders, cr.Oversold, cr.Duplicates = v.Counts.Orders, v.Counts.Oversold, v.Counts.Duplicates
				cr.LostAcks, cr.Undersold, cr.StaleFence = v.Counts.LostAcks, v.Counts.Undersold, v.Counts.StaleFence
				cr.Violated = v.Invariants()
				cr.violations = v.Violations
				cr.Linearizable, cr.Linear = v.Linearizable, v.Linear
				if row.safe {
					safeClean = v.OK()
				} else if !v.OK() {
					unsafeCaught = true
				}
			}
		}
		if err != nil {
			cr.Error = err.Error()
		}
		e.close()
		r.Compare = append(r.Compare, cr)
	}
	r.Summary = loadgen.Summarize(all)
	r.Linearizable = allLinearizable(r.Compare)
	r.Pass = safeClean && unsafeCaught
	r.Strategy = "all"
	if !safeClean {
		r.Notes = append(r.Notes, "FAIL: the safe row (lock-fence) is not clean")
	}
	if !unsafeCaught {
		r.Notes = append(r.Notes, "FAIL: no unsafe row showed a violation: a checker that cannot fail is broken")
	}
	return r
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// allLinearizable is the verdict over several rows: false when one is not
// linearizable, else nil when one is unknown (or errored), else true.
func allLinearizable(rows []compareRow) *bool {
	out := true
	unknown := len(rows) == 0
	for _, c := range rows {
		switch {
		case c.Linearizable == nil:
			unknown = true
		case !*c.Linearizable:
			out = false
		}
	}
	if out && unknown {
		return nil
	}
	return &out
}
