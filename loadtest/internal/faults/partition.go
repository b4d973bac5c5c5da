package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/internal/topo"
	"github.com/seckill-lab/shop/loadtest/internal/harness"
	"github.com/seckill-lab/shop/loadtest/internal/render"
	"github.com/seckill-lab/shop/loadtest/internal/report"
	"github.com/seckill-lab/shop/loadtest/internal/verify"
)

// lockLost counts holds lost before release (the watchdog's or found at
// release), every lock of the shop.
const lockLost = "shop_lock_lost_total"

// The partition scenario's shop settings: a request is answered within
// its timeout + 1 s whatever the network does (A1), and a holder cut from
// Redis loses its lease after the TTL.
const (
	partTTL        = time.Second
	partWait       = time.Second
	partReqTimeout = 2 * time.Second
)

// netFault is one fault of the seeded schedule: what the network does,
// to whose links, when and for how long.
type netFault struct {
	Fault    topo.Fault   // a toxiproxy fault, or
	Cut      topo.CutMode // a kernel cut (namespaces only)
	Dep      string       // "Redis", "MySQL" or "Redis and MySQL"
	Instance int          // -1: every instance
	At       time.Duration
	Lasted   time.Duration
	// SlowDB also delays what the instance sends to MySQL (the requests,
	// not the replies), from slowLead before the cut: its holds under way
	// last past the lock TTL while Redis is cut, and a statement sent
	// before its lease ran out reaches the database after (as a COMMIT
	// stuck in a congested link would).
	SlowDB time.Duration
}

// span is how long the fault takes from its start to its heal.
func (f netFault) span() time.Duration {
	if f.SlowDB > 0 {
		return slowLead + f.Lasted
	}
	return f.Lasted
}

func (f netFault) Kind() string {
	if f.Cut != "" {
		return "kernel " + string(f.Cut)
	}
	return f.Fault.String()
}

func (f netFault) Target() string {
	who := "every instance"
	if f.Instance >= 0 {
		who = fmt.Sprintf("instance %d", f.Instance+1)
	}
	if f.SlowDB > 0 {
		return fmt.Sprintf("%s -> %s (its requests to MySQL %s late from %s before)", who, f.Dep, f.SlowDB, slowLead)
	}
	return who + " -> " + f.Dep
}

func (f netFault) String() string {
	return fmt.Sprintf("%.1fs +%.1fs %s, %s", f.At.Seconds(), f.Lasted.Seconds(), f.Kind(), f.Target())
}

// partitionSchedule draws the faults of a load of the given duration from
// seed, Jepsen style: random faults of random length with healing between.
// The first always cuts one instance from Redis past the lock TTL, the
// case fencing tokens exist for. Without a MySQL link (SQLite) only Redis
// links are faulted; without namespaces, no kernel cuts.
func partitionSchedule(seed int64, duration time.Duration, instances int, mysql, kernel bool) []netFault {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	ms := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	first := netFault{Fault: topo.Fault{Kind: topo.BlackHole}, Dep: "Redis", Instance: rng.IntN(instances),
		At: ms(duration * 15 / 100), Lasted: ms(partTTL + between(1500*time.Millisecond, 2500*time.Millisecond))}
	if kernel && rng.IntN(2) == 0 {
		first.Fault, first.Cut = topo.Fault{}, topo.Drop
	}
	if mysql {
		first.SlowDB = 700 * time.Millisecond
	}
	plan := []netFault{first}
	t := first.At + first.span() + ms(between(1200*time.Millisecond, 2500*time.Millisecond))
	deps := []string{"Redis"}
	if mysql {
		deps = append(deps, "MySQL", "Redis and MySQL")
	}
	for {
		f := netFault{At: t, Lasted: ms(between(800*time.Millisecond, 3*time.Second)), Dep: deps[rng.IntN(len(deps))], Instance: rng.IntN(instances)}
		if rng.IntN(10) < 3 {
			f.Instance = -1 // the whole dependency
		}
		if f.At+f.Lasted > duration*85/100 {
			break
		}
		kinds := 6
		if kernel {
			kinds = 8
		}
		switch rng.IntN(kinds) {
		case 0:
			d := between(200*time.Millisecond, 1500*time.Millisecond)
			f.Fault = topo.Fault{Kind: topo.Latency, Delay: ms(d), Jitter: ms(d / 4), Dir: []topo.Dir{topo.Both, topo.Up, topo.Back}[rng.IntN(3)]}
		case 1:
			f.Fault = topo.Fault{Kind: topo.BlackHole}
		case 2:
			f.Fault = topo.Fault{Kind: topo.TimedClose, After: ms(between(300*time.Millisecond, time.Second))}
		case 3:
			f.Fault = topo.Fault{Kind: topo.Reset}
		case 4:
			f.Fault = topo.Fault{Kind: topo.Bandwidth, RateKB: 5 + rng.Int64N(45)}
		case 5:
			f.Fault = topo.Fault{Kind: topo.Down}
		case 6:
			f.Cut = topo.Drop
		case 7:
			f.Cut = topo.Reject
		}
		plan = append(plan, f)
		t = f.At + f.Lasted + ms(between(1200*time.Millisecond, 2500*time.Millisecond))
	}
	return plan
}

// links are the links a fault acts on.
func (f netFault) links(n *harness.Net) (links []*topo.Link, ns []*topo.Netns) {
	for i := range n.Redis {
		if f.Instance >= 0 && i != f.Instance {
			continue
		}
		if strings.Contains(f.Dep, "Redis") {
			links = append(links, n.Redis[i])
			ns = append(ns, nsOf(n, i))
		}
		if strings.Contains(f.Dep, "MySQL") && n.MySQL != nil {
			links = append(links, n.MySQL[i])
			ns = append(ns, nsOf(n, i))
		}
	}
	return links, ns
}

func nsOf(n *harness.Net, i int) *topo.Netns {
	if n.Ns == nil {
		return nil
	}
	return n.Ns[i]
}

// slowLead is how long a fault with SlowDB slows the database before it
// cuts Redis: long enough for the instance's holds under way to be slow
// ones, so the cut finds a holder mid-transaction.
const slowLead = 800 * time.Millisecond

// inject starts the fault on its links (with SlowDB, the database is
// slowed slowLead first).
func (f netFault) inject(ctx context.Context, n *harness.Net) error {
	links, nss := f.links(n)
	var errs []error
	if f.SlowDB > 0 && f.Instance >= 0 && n.MySQL != nil {
		errs = append(errs, n.MySQL[f.Instance].Inject(topo.Fault{Kind: topo.Latency, Dir: topo.Up, Delay: f.SlowDB}))
		harness.Sleep(ctx, slowLead)
	}
	for k, l := range links {
		if f.Cut != "" {
			if nss[k] == nil {
				errs = append(errs, errors.New("a kernel cut without namespaces"))
				continue
			}
			errs = append(errs, nss[k].Cut(ctx, l.Addr(), f.Cut))
			continue
		}
		errs = append(errs, l.Inject(f.Fault))
	}
	return errors.Join(errs...)
}

// Partition: the hot product's sale (race + retry, regular orders, resends,
// restocks) and payments on three instances, each reaching Redis and MySQL
// through links of its own, while a seeded schedule of network faults
// (latency, black holes, closes, resets, bandwidth, links down, and, as
// root, kernel DROP and REJECT in the instances' namespaces) hits one
// instance's links or every instance's, with healing between. Proven after:
// every invariant and linearizability verdict, no unexpected 500, every
// answer within the request timeout + 1 s, orders again within the lock TTL
// + 3 s of each heal, and the fence refusals counted.
func (h runner) Partition(ctx context.Context) report.Scenario {
	seed := h.O.Seed
	if seed == 0 {
		seed = rand.Int64N(1<<31) + 1
	}
	r := report.Scenario{Params: map[string]any{"seed": seed, "users": h.O.Users, "duration": h.O.ChaosDuration.String(),
		"lock_ttl": partTTL.String(), "lock_wait": partWait.String(), "request_timeout": partReqTimeout.String()}}
	r.Title = fmt.Sprintf("network faults, seed %d: %d buyers over %s, race + retry + payments", seed, h.O.Users, h.O.ChaosDuration)
	if r.Error = h.Unfit("partition", 2, " (one instance is cut while others sell)"); r.Error != "" {
		return r
	}
	payTimeout := max(2*time.Second, (h.O.ChaosDuration / 3).Round(time.Second))
	e, err := h.Setup(ctx, "partition", harness.Setup{Private: true, Net: true, Netns: true,
		Common: []string{"SHOP_LOCK_TTL=" + partTTL.String(), "SHOP_LOCK_WAIT=" + partWait.String(), "SHOP_REQUEST_TIMEOUT=" + partReqTimeout.String(),
			"SHOP_PAYMENT_TIMEOUT=" + payTimeout.String(), "SHOP_SWEEP_INTERVAL=500ms"}})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer e.Close()
	r.Setup, r.Strategy = e.Desc+"; "+e.Net.Describe(), e.Strategy
	plan := partitionSchedule(seed, h.O.ChaosDuration, len(e.Cluster.Instances), e.Net.MySQL != nil, e.Net.Ns != nil)
	sched := make([]string, len(plan))
	for i, f := range plan {
		sched[i] = f.String()
	}
	r.Params["schedule"] = sched
	if e.Net.MySQL == nil {
		r.Notes = append(r.Notes, "SQLite: no database link to fault (give --mysql-dsn for MySQL faults)")
	}
	if e.Net.NsErr != nil {
		r.Notes = append(r.Notes, "no kernel cuts: "+e.Net.NsErr.Error()+"; toxiproxy faults only")
	}

	const regularShare = 0.3
	stock := min(int64(h.O.Stock), max(1, int64(float64(h.O.Users)*(1-regularShare)*0.9)))
	r.Params["stock"] = stock
	p, err := e.Client.CreateProduct(ctx, "partition", 990, stock, "lt-partition-"+loadgen.RandomID(6))
	if err != nil {
		r.Error = "create the hot product: " + err.Error()
		return r
	}
	cfg := h.RaceConfig(e, "partition")
	cfg.ProductID, cfg.Stock = p.ID, stock
	cfg.Attempts, cfg.RegularShare, cfg.TinyTimeout, cfg.Failover = 2, regularShare, h.O.TinyTimeout, true
	cfg.RegularProducts, cfg.RegularStock = 4, max(1, int64(h.O.Users)/8)
	cfg.MaxResends = 20
	cfg.Rate = float64(h.O.Users) / h.O.ChaosDuration.Seconds()
	// Longer than any answer may take (timeout + 1 s), so a shop that
	// hangs shows as slow, not as a client that gave up.
	cfg.Timeout = partReqTimeout + 3*time.Second

	s := e.Sample(ctx)
	payDone := make(chan struct {
		res loadgen.PayResult
		err error
	}, 1)
	payBuyers := max(20, min(100, h.O.Users/20))
	r.Params["pay_orders"] = payBuyers
	r.Params["payment_timeout"] = payTimeout.String()
	go func() {
		res, err := loadgen.Pay(ctx, loadgen.PayConfig{Client: e.Client, AdminToken: e.Client.AdminToken, Buyers: payBuyers, Concurrency: 16,
			PaymentTimeout: payTimeout, SweepInterval: 500 * time.Millisecond, Timeout: cfg.Timeout})
		payDone <- struct {
			res loadgen.PayResult
			err error
		}{res, err}
	}()
	loadStart := make(chan time.Time, 1)
	faultsDone := make(chan []report.PartitionRow, 1)
	st := &stocker{E: e, Id: p.ID, Initial: stock, Key: "lt-restock-" + loadgen.RandomID(6), Lasts: h.O.ChaosDuration}
	go func() { faultsDone <- h.runPartitions(ctx, e, plan, loadStart, st) }()
	res, err := h.RaceClocked(ctx, cfg, loadStart)
	rows := <-faultsDone
	healErr := e.Net.Heal(context.WithoutCancel(ctx))
	pay := <-payDone
	totals := s.Totals()
	r.Metrics = harness.PickMetrics(totals)
	for _, k := range []string{lockLost, "shop_lock_renewal_failures_total"} {
		r.Metrics[k] = totals[k]
	}
	if err != nil {
		r.Fill(res.Records, verify.Verdict{}, fmt.Errorf("partition: %w", err))
		return r
	}
	recs := append(append([]loadgen.Record(nil), res.Records...), pay.res.Records...)
	products := res.InitialStock()
	for id, n := range pay.res.InitialStock() {
		products[id] = n
	}
	tokens := res.Tokens()
	for id, t := range pay.res.Tokens() {
		tokens[id] = t
	}
	v, err := e.Verify(ctx, verify.CheckInput{Records: recs, Products: products, Wallets: pay.res.Wallets}, tokens)
	r.Fill(recs, v, err)
	describePartitions(rows, res, p.ID, e.MetricsNow(ctx))
	r.Partition = rows
	judgePartitions(&r, rows, plan, recs, res)
	if pay.err != nil {
		r.Pass = false
		r.Notes = append(r.Notes, "FAIL: the payments could not run: "+report.FirstLine(pay.err.Error()))
	}
	if healErr != nil {
		r.Pass = false
		r.Notes = append(r.Notes, "FAIL: healing the network at the end: "+report.FirstLine(healErr.Error()))
	}
	refused, lost := r.Metrics["shop_inventory_stale_fence_rejections_total"], r.Metrics[lockLost]
	switch {
	case refused > 0:
		r.Notes = append(r.Notes, fmt.Sprintf("fence: %.0f stock writes refused for a stale fencing token (a holder cut from Redis past its TTL, or slowed past it, that still wrote); none counted (L2 from the ledger)", refused))
	default:
		r.Notes = append(r.Notes, fmt.Sprintf("fence: no stock write refused. %.0f holds were lost (%.0f found at release: a holder cut from Redis whose transaction, slowed, committed after its lease ran out; it stands, fenced, because no newer holder had written first), %.0f watchdog renewals failed (the watchdog stops a holder that has not begun its transaction; one past BEGIN runs on to its deadline + 200 ms, guarded by the fence). The fence refuses only a write that arrives after a newer holder's; compare's pause rows (watchdog off) show it refusing",
			lost, r.Metrics["shop_inventory_lock_lost_before_release_total"], r.Metrics["shop_lock_renewal_failures_total"]))
	}
	r.Notes = append(r.Notes, fmt.Sprintf("seed %d (replay: --seed %d); sale of the hot product (%d units at the start, %d restocked) ran %s; payments: %d orders",
		seed, seed, stock, st.Added, res.Ended.Sub(res.Started).Round(100*time.Millisecond), payBuyers))
	return r
}

// runPartitions runs the schedule once the load has started, keeping the
// hot product in stock (see stocker), and returns a row per fault.
func (h runner) runPartitions(ctx context.Context, e *harness.Env, plan []netFault, loadStart <-chan time.Time, st *stocker) []report.PartitionRow {
	t0, sizeErr, ok := h.sizedStart(ctx, loadStart, st)
	if !ok {
		return nil
	}
	var rows []report.PartitionRow
	for _, f := range plan {
		sizeErr = errors.Join(sizeErr, h.sizeBefore(ctx, t0, f.At, st))
		if ctx.Err() != nil {
			break
		}
		left, err := st.Left(ctx)
		row := report.PartitionRow{Fault: f.Kind(), Target: f.Target(), Instance: f.Instance, StockLeft: left,
			Before: e.MetricsNow(ctx), Start: time.Now(), At: time.Since(t0), Bound: partTTL + 3*time.Second}
		err = errors.Join(sizeErr, err, f.inject(ctx, e.Net))
		sizeErr = nil
		harness.Sleep(context.WithoutCancel(ctx), f.Lasted)
		err = errors.Join(err, e.Net.Heal(context.WithoutCancel(ctx)))
		row.Healed = time.Now()
		row.Lasted = row.Healed.Sub(row.Start)
		if err != nil {
			row.Err = err.Error()
		}
		rows = append(rows, row)
	}
	return rows
}

// describePartitions fills each row's figures from the client records and
// the metrics sampled at the next fault (after: at the end).
func describePartitions(rows []report.PartitionRow, res loadgen.Result, hot int64, after map[string]float64) {
	for i := range rows {
		f := &rows[i]
		next, until := after, res.Ended
		if i+1 < len(rows) {
			next, until = rows[i+1].Before, rows[i+1].Start
		}
		f.StaleFences = next["shop_inventory_stale_fence_rejections_total"] - f.Before["shop_inventory_stale_fence_rejections_total"]
		f.LocksLost = next[lockLost] - f.Before[lockLost]
		f.ByStatus = map[string]int{}
		for _, r := range res.Records {
			if r.End.Before(f.Start) || r.Start.After(f.Healed) {
				continue
			}
			f.ByStatus[loadgen.Outcome(r)]++
		}
		for _, r := range res.Records {
			if r.ProductID != hot || r.Status != http.StatusCreated || r.Start.Before(f.Healed) {
				continue
			}
			d := r.End.Sub(f.Healed)
			if f.Recovery == 0 || d < f.Recovery {
				f.Recovery = d
			}
			if r.Target == f.Instance && (f.OnTarget == 0 || d < f.OnTarget) {
				f.OnTarget = d
			}
		}
		for _, r := range res.Records {
			if r.End.Before(f.Start) || !r.Start.Before(until) {
				continue
			}
			if late, lost := lateOrLost(r); late {
				f.Slow++
			} else if lost {
				f.NoAnswer++
			}
		}
	}
}

// lateOrLost: an answer later than the request timeout + 1 s, or none at
// all: a transport error, or a client that waited past that bound. A send
// the client gave up on sooner, on purpose (the retry load's and the
// payments' tiny timeouts), is neither.
func lateOrLost(r loadgen.Record) (late, lost bool) {
	switch {
	case r.Status == 0 && !r.GaveUp && (r.Latency() > partReqTimeout+time.Second || !strings.Contains(r.Err, "deadline exceeded")):
		return false, true
	case r.Status != 0 && r.Latency() > partReqTimeout+time.Second:
		return true, false
	}
	return false, false
}

// judgePartitions fails the run on a fault not carried out, a sale that
// did not resume within A2's bound after a heal, and any client left
// without an answer or answered late, anywhere in the run.
func judgePartitions(r *report.Scenario, rows []report.PartitionRow, plan []netFault, recs []loadgen.Record, res loadgen.Result) {
	for _, f := range rows {
		switch {
		case f.Err != "":
			r.Pass = false
			r.Notes = append(r.Notes, fmt.Sprintf("FAIL: fault %q on %s not carried out: %s", f.Fault, f.Target, report.FirstLine(f.Err)))
		case f.StockLeft <= 0:
			r.Pass = false
			r.Notes = append(r.Notes, fmt.Sprintf("FAIL: the hot product had no stock left at %q on %s: the fault hit no sale under way", f.Fault, f.Target))
		case f.Recovery == 0 && f.Healed.Add(f.Bound).Before(res.Ended):
			r.Pass = false
			r.Notes = append(r.Notes, fmt.Sprintf("FAIL (A2): no order of the hot product after %q on %s healed", f.Fault, f.Target))
		case f.Recovery > f.Bound:
			r.Pass = false
			r.Notes = append(r.Notes, fmt.Sprintf("FAIL (A2): orders flowed again %s after %q on %s healed, beyond lock TTL + 3s = %s", render.Ms(f.Recovery), f.Fault, f.Target, render.Ms(f.Bound)))
		}
	}
	if len(rows) < len(plan) {
		r.Pass = false
		r.Notes = append(r.Notes, fmt.Sprintf("FAIL: the load ended after %d of %d faults", len(rows), len(plan)))
	}
	late, lost, cut := 0, 0, 0
	var examples []string
	for _, x := range recs {
		l, n := lateOrLost(x)
		if l {
			late++
		}
		if n {
			lost++
		}
		if x.Status == 0 && !x.GaveUp && !n {
			cut++ // ended by a deadline before an answer was owed (the load's end): not A1's
		}
		if (l || n) && len(examples) < 5 {
			examples = append(examples, fmt.Sprintf("%s to instance %d at %.1fs: %d after %s %s", x.Op, x.Target+1, x.Start.Sub(res.Started).Seconds(), x.Status, render.Ms(x.Latency()), report.FirstLine(x.Err)))
		}
	}
	// The answers line's "no answer" counts every send without an answer
	// the client did not give up on itself; A1's are those owed one (see
	// lateOrLost), the rest were cut by a deadline before it was owed.
	r.Params["no_answer_owed"], r.Params["no_answer_cut_before_owed"], r.Params["late_answers"] = lost, cut, late
	cutNote := ""
	if cut > 0 {
		cutNote = fmt.Sprintf("; the answers line's \"no answer\" also counts %d sends cut by a deadline before an answer was owed (the load's end), which A1 leaves out", cut)
	}
	if late > 0 || lost > 0 {
		r.Pass = false
		r.Notes = append(r.Notes, fmt.Sprintf("FAIL (A1): %d requests owed an answer got none and %d were answered later than the request timeout + 1s = %s, e.g. %s%s", lost, late, render.Ms(partReqTimeout+time.Second), strings.Join(examples, "; "), cutNote))
	} else {
		r.Notes = append(r.Notes, fmt.Sprintf("every request owed an answer was answered within the request timeout + 1s = %s (owed and unanswered: 0%s)", render.Ms(partReqTimeout+time.Second), cutNote))
	}
}
