package scenario

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"time"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/loadtest/internal/harness"
	"github.com/seckill-lab/shop/loadtest/internal/report"
	"github.com/seckill-lab/shop/loadtest/internal/verify"
)

// chaos: a paced race with regular orders and retries while the harness
// SIGKILLs and restarts an instance, restarts and flushes a private Redis,
// and SIGSTOPs an instance past the lock TTL; a third instance pauses some
// lock holders past their TTL on its own. Every invariant must still hold.
func (h runner) Chaos(ctx context.Context) report.Scenario {
	r := report.Scenario{Title: fmt.Sprintf("chaos: %d buyers over %s with SIGKILL, Redis restart and FLUSHALL, SIGSTOP past the lock TTL", h.O.Users, h.O.ChaosDuration),
		Params: map[string]any{"users": h.O.Users, "stock": h.O.Stock, "duration": h.O.ChaosDuration.String(), "lock_ttl": "1s", "lock_wait": "1s"}}
	if r.Error = h.Unfit("chaos", 2, ""); r.Error != "" {
		return r
	}
	const ttl, wait = time.Second, time.Second
	pauser := h.O.Instances - 1
	// Stock also comes back during the run, so the linearizability check
	// judges a counter that goes both ways: the sweeper cancels the orders
	// left unpaid for a third of the load (nobody pays here), and the hot
	// product is restocked halfway.
	unpaid := (h.O.ChaosDuration / 3).Round(time.Second)
	r.Params["payment_timeout"] = unpaid.String()
	e, err := h.Setup(ctx, "chaos", harness.Setup{Private: true,
		Common: []string{"SHOP_LOCK_TTL=" + ttl.String(), "SHOP_LOCK_WAIT=" + wait.String(),
			"SHOP_PAYMENT_TIMEOUT=" + unpaid.String(), "SHOP_SWEEP_INTERVAL=500ms"},
		Extra: func(i int) []string {
			if i == pauser && i != 0 && i != 1 {
				return []string{"SHOP_LAB_PAUSE_AFTER_LOCK=1500ms", "SHOP_LAB_PAUSE_PROBABILITY=0.01"}
			}
			return nil
		}})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer e.Close()
	r.Setup, r.Strategy = e.Desc, e.Strategy
	if e.Backend.RedisKind == "shared" {
		r.Notes = append(r.Notes, "Redis faults skipped: only a private Redis is restarted or flushed")
	}
	cfg := h.RaceConfig(e, "chaos")
	cfg.Attempts, cfg.RegularShare, cfg.Failover, cfg.MaxResends = 2, 0.5, true, 4
	// Regular buyers spread over 8 products (8 locks), about 20% more
	// demand than units, so the lock path stays busy most of the run.
	cfg.RegularProducts = 8
	cfg.RegularStock = max(1, int64(float64(h.O.Users)*0.8/8))
	cfg.Rate = float64(h.O.Users) / h.O.ChaosDuration.Seconds()
	cfg.Timeout = min(h.O.Timeout, 5*time.Second)

	p, err := e.Client.CreateProduct(ctx, "chaos", 990, int64(h.O.Stock), "lt-chaos-"+loadgen.RandomID(6))
	if err != nil {
		r.Error = "create the hot product: " + err.Error()
		return r
	}
	cfg.ProductID, cfg.Stock = p.ID, int64(h.O.Stock)

	s := e.Sample(ctx)
	loadStart, faultStart, restockStart := make(chan time.Time, 1), make(chan time.Time, 1), make(chan time.Time, 1)
	go func() {
		select {
		case t0 := <-loadStart:
			faultStart <- t0
			restockStart <- t0
		case <-ctx.Done():
		}
	}()
	injected := make(chan []report.Fault, 1)
	go func() { injected <- InjectFaults(ctx, e, chaosSchedule(ttl), h.O.ChaosDuration, faultStart) }()
	restocked := make(chan error, 1)
	go func() {
		select {
		case t0 := <-restockStart:
			harness.Sleep(ctx, time.Until(t0.Add(h.O.ChaosDuration/2)))
			restocked <- e.Client.Restock(ctx, p.ID, max(1, int64(h.O.Stock)/4), "lt-chaos-restock-"+loadgen.RandomID(6))
		case <-ctx.Done():
			restocked <- ctx.Err()
		}
	}()
	res, err := h.RaceClocked(ctx, cfg, loadStart)
	faults := <-injected
	restockErr := <-restocked
	_ = e.Cluster.Signal(0, syscall.SIGCONT) // in case the load ended first
	r.Metrics = harness.PickMetrics(s.Totals())
	if err != nil {
		r.Fill(res.Records, verify.Verdict{}, fmt.Errorf("chaos: %w", err))
		return r
	}
	v, err := e.Verify(ctx, verify.CheckInput{Records: res.Records, Products: res.InitialStock()}, res.Tokens())
	r.Fill(res.Records, v, err)
	r.Faults = describeFaults(faults, res, len(e.Cluster.Instances), ttl, wait)
	judgeFaults(&r, v, err, faults, res, ttl, wait)
	if restockErr != nil {
		r.Pass = false
		r.Notes = append(r.Notes, "FAIL: the halfway restock of the hot product failed: "+report.FirstLine(restockErr.Error()))
	}
	return r
}

// scheduledFault is one row of the chaos schedule: at a fraction of the
// load's duration, inject does the damage to the scenario's environment
// and notes in f what went wrong.
type scheduledFault struct {
	At     float64
	Fault  report.Fault // Name, Target and instance (-1: Redis)
	redis  bool         // a Redis fault: skipped on a shared Redis, Target names its kind
	Inject func(ctx context.Context, e *harness.Env, f *report.Fault)
}

// chaosSchedule is the chaos scenario's faults, in the order they happen.
func chaosSchedule(ttl time.Duration) []scheduledFault {
	note := func(f *report.Fault, err error) {
		if err != nil {
			f.Err = err.Error()
		}
	}
	return []scheduledFault{
		{At: 0.2, Fault: report.Fault{Name: "SIGKILL + restart", Instance: 1, Target: "instance 2"},
			Inject: func(ctx context.Context, e *harness.Env, f *report.Fault) {
				note(f, e.Cluster.Kill(1))
				harness.Sleep(ctx, time.Second)
				note(f, e.Cluster.Restart(ctx, 1))
				f.Restarts = e.Cluster.Instances[1].Starts - 1
			}},
		{At: 0.4, Fault: report.Fault{Name: "Redis restart", Instance: -1}, redis: true,
			Inject: func(ctx context.Context, e *harness.Env, f *report.Fault) { note(f, e.Backend.RestartRedis(ctx)) }},
		{At: 0.55, Fault: report.Fault{Name: "Redis FLUSHALL", Instance: -1}, redis: true,
			Inject: func(ctx context.Context, e *harness.Env, f *report.Fault) { note(f, e.Backend.FlushRedis(ctx)) }},
		{At: 0.7, Fault: report.Fault{Name: "SIGSTOP past the lock TTL, then SIGCONT", Instance: 0, Target: "instance 1"},
			Inject: func(ctx context.Context, e *harness.Env, f *report.Fault) {
				note(f, e.Cluster.Signal(0, syscall.SIGSTOP))
				harness.Sleep(context.WithoutCancel(ctx), ttl+time.Second)
				note(f, e.Cluster.Signal(0, syscall.SIGCONT))
			}},
	}
}

// injectFaults waits for the load to start (its time arrives on loadStart),
// then injects each scheduled fault at its time into a run of the given
// duration, and returns what it injected.
func InjectFaults(ctx context.Context, e *harness.Env, schedule []scheduledFault, duration time.Duration, loadStart <-chan time.Time) []report.Fault {
	var t0 time.Time
	select {
	case t0 = <-loadStart:
	case <-ctx.Done():
		return nil
	}
	var Faults []report.Fault
	for _, sf := range schedule {
		if sf.redis && e.Backend.RedisKind == "shared" {
			continue
		}
		harness.Sleep(ctx, time.Until(t0.Add(time.Duration(sf.At*float64(duration)))))
		if ctx.Err() != nil {
			break
		}
		f := sf.Fault
		if sf.redis {
			f.Target = e.Backend.RedisKind + " Redis"
		}
		f.Start = time.Now()
		sf.Inject(ctx, e, &f)
		f.End = time.Now()
		Faults = append(Faults, f)
	}
	return Faults
}

// judgeFaults fails a chaos run whose faults were not all carried out, or
// none at all, and adds L3 (no two holders of a lock at once, judged from
// the faults' times) to its verdict.
func judgeFaults(r *report.Scenario, v verify.Verdict, err error, faults []report.Fault, res loadgen.Result, ttl, wait time.Duration) {
	for _, f := range r.Faults {
		if f.Err != "" {
			r.Pass = false
			r.Notes = append(r.Notes, fmt.Sprintf("FAIL: the fault %q was not carried out as planned, so the run proves less than it should: %s", f.Name, report.FirstLine(f.Err)))
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

// describeFaults says what each fault did to the clients: answers in the
// window from the fault to a second after it ended.
func describeFaults(fs []report.Fault, res loadgen.Result, n int, ttl, wait time.Duration) []report.Fault {
	out := make([]report.Fault, 0, len(fs))
	for _, f := range fs {
		f.At, f.Lasted = f.Start.Sub(res.Started), f.End.Sub(f.Start)
		var total, noAnswer, fivexx, busy, slow, onTarget, onTargetFailed int
		for _, r := range res.Records {
			if r.Start.Before(f.Start) && r.End.Before(f.Start) || r.Start.After(f.End.Add(time.Second)) {
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
			if f.Instance >= 0 && r.Target == f.Instance {
				onTarget++
				if r.Failed() {
					onTargetFailed++
				}
			}
		}
		f.Effect = fmt.Sprintf("%d requests overlapped it: %d no answer, %d 5xx, %d 503 busy (all resent with the same key), %d slower than the lock TTL",
			total, noAnswer, fivexx, busy, slow)
		if f.Instance >= 0 {
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
func firstLockPathSuccess(res loadgen.Result, f report.Fault) (time.Duration, bool) {
	for _, r := range res.Records {
		if r.Status == http.StatusCreated && r.Target != f.Instance && r.Start.After(f.Start) {
			return r.End.Sub(f.Start), true
		}
	}
	return 0, false
}

// checkL3: a SIGKILLed instance's lock is free within its TTL, so another
// instance creates an order within TTL + lock wait (+3s for a loaded
// machine) of the kill, as long as orders were still being asked for.
func checkL3(fs []report.Fault, res loadgen.Result, ttl, wait time.Duration) *verify.Violation {
	for _, f := range fs {
		if f.Name != "SIGKILL + restart" {
			continue
		}
		bound := ttl + wait + 3*time.Second
		asked := false
		for _, r := range res.Records {
			if r.Start.After(f.Start.Add(bound)) && r.OrderNo == "" && r.Code != "sold_out" && r.Code != "insufficient_stock" {
				asked = true
				break
			}
		}
		d, ok := firstLockPathSuccess(res, f)
		if (ok && d > bound) || (!ok && asked) {
			v := verify.NewViolation("L3", fmt.Sprintf("no order was created on another instance within %s of SIGKILL (first after %s): the killed holder's lock did not expire", bound, d),
				map[string]any{"killed": f.Target, "at": f.Start.Format(time.RFC3339Nano)})
			return &v
		}
	}
	return nil
}
