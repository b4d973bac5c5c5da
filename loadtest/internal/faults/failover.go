package faults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/seckill-lab/shop/loadtest/internal/harness"
	"github.com/seckill-lab/shop/loadtest/internal/render"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/internal/topo"
	"github.com/seckill-lab/shop/loadtest/internal/report"
	"github.com/seckill-lab/shop/loadtest/internal/verify"
)

// The failover scenario runs in parts, one per topology, each with its
// own backend and shops: "failover" on the command line means all three.
const (
	FailoverCluster  = "failover-cluster"
	FailoverSentinel = "failover-sentinel"
	// FailoverDBSemiSync faults the database, not Redis: a MariaDB primary
	// with two semi-synchronous replicas behind haproxy.
	FailoverDBSemiSync = "failover-db-semisync"
	// FailoverDBGalera: a three-node Galera cluster, one writer chosen
	// through haproxy.
	FailoverDBGalera = "failover-db-galera"
	// FailoverDBAsync is the unsafe row: the primary/replica topology with
	// asynchronous replication, the most advanced replica promoted at once
	// as a careless operator would. It passes only when the loss is caught.
	FailoverDBAsync = "failover-db-async"
)

// shopUser is the database account of the shops of a database part: no
// SUPER, as in production, so that read_only applies to it; it may create
// the run's database (loadtest_<random>).
const shopUser, shopDatabases = "shop", `loadtest\_%`

// topology is the Redis (or database) a failover part runs on and the
// faults it injects.
type topology struct {
	Desc     string
	Url      string   // the Redis it started; "" --redis-url
	MysqlDSN string   // the database server it started; "" --mysql-dsn
	Env      []string // shop settings naming it
	Faults   []plannedFault
	Close    func()
	// LockWait is SHOP_LOCK_WAIT (0: 2 s); the request timeout is 0.2 s
	// more. It must outlast the tier's failure detection, which a commit
	// in flight at the fault may wait for.
	LockWait time.Duration
	// MinDuration: the sale lasts at least this long (--chaos-duration
	// if longer), so that every fault and the recovery after it fall in
	// it.
	MinDuration time.Duration
	// Unsafe: the part shows a loss; it passes only when the verdict
	// catches one, and Window says what the fault left to lose.
	Unsafe bool
	Window func() []string
}

// plannedFault is one fault at a share of the load's duration; run kills
// or fails over the master serving lockKey and returns it and the new one.
type plannedFault struct {
	Name string
	At   float64
	Run  func(ctx context.Context, lockKey string) (old string, waitPromoted func() error, err error)
	// Ready, if set, waits until the topology can take the fault (a node
	// killed before has rejoined); the fault is late by that much.
	Ready func(ctx context.Context) error
}

// failover: race + retry load on 3 instances over a real Redis Cluster (the
// master owning the hot product lock's slot is SIGKILLed mid-sale) or a
// Sentinel group (SENTINEL FAILOVER, later SIGKILL of the new master).
// Passes only when every invariant holds, every fault was carried out,
// orders flowed again within A2's bound, and no answer was a 500.
func (h runner) Failover(ctx context.Context, part string) report.Scenario {
	r := report.Scenario{Params: map[string]any{"users": h.O.Users, "stock": h.O.Stock, "retries": 2}}
	if len(h.O.Targets) > 0 {
		r.Error = part + " " + harness.ErrTargetMode.Error()
		return r
	}
	top, err := startTopology(ctx, part)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer top.Close()
	// A request is answered within its timeout + 1 s: its deadline is the
	// lock wait + 0.2 s, then at most one transaction and keeping its
	// idempotency record (0.5 s at most).
	const ttl = 2 * time.Second
	wait := cmp.Or(top.LockWait, 2*time.Second)
	reqTimeout := wait + 200*time.Millisecond
	r.Params["lock_ttl"], r.Params["lock_wait"], r.Params["request_timeout"] = ttl.String(), wait.String(), reqTimeout.String()
	dur := max(h.O.ChaosDuration, top.MinDuration)
	r.Params["duration"] = dur.String()
	r.Title = fmt.Sprintf("failover on %s: %d buyers over %s, race + retry, %s", top.Desc, h.O.Users, dur, faultNames(top.Faults))
	e, err := h.Setup(ctx, part, harness.Setup{RedisURL: top.Url, MysqlDSN: top.MysqlDSN,
		Common: append([]string{"SHOP_LOCK_TTL=" + ttl.String(), "SHOP_LOCK_WAIT=" + wait.String(), "SHOP_REQUEST_TIMEOUT=" + reqTimeout.String()}, top.Env...)})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer e.Close()
	r.Setup, r.Strategy = e.Desc, e.Strategy

	// The hot product starts with --stock units (at most 90% of the
	// seckill buyers' demand); a second into the load it is sized from the
	// rate it sold at, and topped up before each fault (see keepSelling),
	// so the sale is under way at every fault.
	const regularShare = 0.3
	stock := min(int64(h.O.Stock), max(1, int64(float64(h.O.Users)*(1-regularShare)*0.9)))
	r.Params["stock"] = stock
	p, err := e.Client.CreateProduct(ctx, "failover "+part, 990, stock, "lt-failover-"+loadgen.RandomID(6))
	if err != nil {
		r.Error = "create the hot product: " + err.Error()
		return r
	}
	lockKey := fmt.Sprintf("lock:{product:%d}", p.ID) // the slot is the hash tag's

	cfg := h.RaceConfig(e, part)
	cfg.ProductID, cfg.Stock = p.ID, stock
	cfg.Attempts, cfg.RegularShare, cfg.TinyTimeout, cfg.Failover = 2, regularShare, h.O.TinyTimeout, true
	cfg.RegularProducts, cfg.RegularStock = 4, max(1, int64(h.O.Users)/8)
	cfg.MaxResends = 20 // 100-300 ms apart: resends outlast a failover of a few seconds
	cfg.Rate = float64(h.O.Users) / dur.Seconds()
	// The client waits past the shop's own bound (its request timeout + 1
	// s), so an answer the shop owes is never counted as none.
	cfg.Timeout = min(h.O.Timeout, max(5*time.Second, reqTimeout+2*time.Second))

	s := e.Sample(ctx)
	var rows []report.FailoverRow
	loadStart := make(chan time.Time, 1)
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		rows = h.InjectFaults(ctx, e, top.Faults, lockKey, loadStart, ttl, &stocker{E: e, Id: p.ID, Initial: stock, Key: "lt-restock-" + loadgen.RandomID(6), Lasts: dur})
	}()
	res, err := h.RaceClocked(ctx, cfg, loadStart)
	<-faultsDone
	r.Metrics = harness.PickMetrics(s.Totals())
	if err != nil {
		r.Fill(res.Records, verify.Verdict{}, fmt.Errorf("%s: %w", part, err))
		return r
	}
	v, err := e.Verify(ctx, verify.CheckInput{Records: res.Records, Products: res.InitialStock()}, res.Tokens())
	r.Fill(res.Records, v, err)
	after := e.MetricsNow(ctx)
	for i := range rows {
		next, until := after, rows[i].Start.Add(rows[i].Bound)
		if i+1 < len(rows) {
			next = rows[i+1].Before
			if rows[i+1].Start.Before(until) {
				until = rows[i+1].Start
			}
		}
		describeFailover(&rows[i], res, p.ID, next, until, reqTimeout+time.Second)
	}
	r.Failover = rows
	for _, f := range rows {
		switch {
		case f.Err != "":
			r.Pass = false
			r.Notes = append(r.Notes, fmt.Sprintf("FAIL: fault %q not carried out: %s", f.Fault, report.FirstLine(f.Err)))
		case f.StockLeft <= 0:
			r.Pass = false
			r.Notes = append(r.Notes, fmt.Sprintf("FAIL: the hot product had no stock left at %q: the fault hit no sale under way", f.Fault))
		case f.Recovery == 0:
			r.Pass = false
			r.Notes = append(r.Notes, fmt.Sprintf("FAIL: no order of the hot product was created after %q (sold out before it, or the sale never recovered)", f.Fault))
		case f.Recovery > f.Bound:
			r.Pass = false
			r.Notes = append(r.Notes, fmt.Sprintf("FAIL (A2): orders flowed again %s after %q, beyond lock TTL + promotion + 3s = %s", render.Ms(f.Recovery), f.Fault, render.Ms(f.Bound)))
		}
		if f.NoAnswer > 0 || f.Slow > 0 {
			r.Pass = false
			r.Notes = append(r.Notes, fmt.Sprintf("FAIL: around %q %d requests got no answer and %d were answered later than the request timeout + 1s = %s", f.Fault, f.NoAnswer, f.Slow, render.Ms(reqTimeout+time.Second)))
		}
	}
	if len(rows) < len(top.Faults) {
		r.Pass = false
		r.Notes = append(r.Notes, fmt.Sprintf("FAIL: the load ended after %d of %d faults", len(rows), len(top.Faults)))
	}
	if n := r.Summary.NoAnswer; n > 0 {
		r.Pass = false
		r.Notes = append(r.Notes, fmt.Sprintf("FAIL: %d requests got no answer (the client gave up after %s or the connection failed): nobody may be left hanging", n, cfg.Timeout))
	}
	r.Notes = append(r.Notes, fmt.Sprintf("sale of the hot product (%d units at the start, %d restocked) ran %s", stock, restocked(rows), res.Ended.Sub(res.Started).Round(100*time.Millisecond)))
	if top.Unsafe {
		judgeUnsafe(&r, rows, top.Window())
	}
	return r
}

// judgeUnsafe turns the verdict of an unsafe part around: it passes when
// the loss was caught (an acknowledged order lost, or any other
// violation) and every fault was carried out; recovery bounds do not
// apply to a database that forgot.
func judgeUnsafe(r *report.Scenario, rows []report.FailoverRow, window []string) {
	r.Notes = append(r.Notes, window...)
	for _, f := range rows {
		if f.Err != "" {
			r.Pass = false
			return
		}
	}
	if r.Error != "" || r.Verdict == nil {
		return
	}
	if r.Verdict.OK() {
		r.Pass = false
		r.Notes = append(r.Notes, "FAIL: the unsafe row lost nothing that the verdict could see this run (the window above is what it could have lost)")
		return
	}
	r.Pass = true
	r.Notes = append(r.Notes, fmt.Sprintf("expected: the loss was caught (%d acknowledged orders lost; invariants violated: %s); the violations listed below are what it broke",
		r.Summary.AckedLost, strings.Join(r.Verdict.Invariants(), ", ")))
}

func faultNames(fs []plannedFault) string {
	n := make([]string, len(fs))
	for i, f := range fs {
		n[i] = fmt.Sprintf("%s at %.0f%%", f.Name, f.At*100)
	}
	return strings.Join(n, ", then ")
}

// injectFaults runs the planned faults once the load has started. A
// second into the load, and half a second before each fault, the stocker
// sizes the hot product for the rest of the load; each row notes the units
// left at its fault.
func (h runner) InjectFaults(ctx context.Context, e *harness.Env, plan []plannedFault, lockKey string, loadStart <-chan time.Time, ttl time.Duration, st *stocker) []report.FailoverRow {
	t0, sizeErr, ok := h.sizedStart(ctx, loadStart, st)
	if !ok {
		return nil
	}
	var rows []report.FailoverRow
	for _, pf := range plan {
		at := time.Duration(pf.At * float64(st.Lasts))
		sizeErr = errors.Join(sizeErr, h.sizeBefore(ctx, t0, at, st))
		var ready error
		if pf.Ready != nil {
			ready = pf.Ready(ctx)
		}
		if ctx.Err() != nil {
			break
		}
		left, err := st.Left(ctx)
		f := report.FailoverRow{Fault: pf.Name, Before: e.MetricsNow(ctx), Start: time.Now(), At: time.Since(t0), StockLeft: left, Restocked: st.Added}
		err = errors.Join(sizeErr, ready, err)
		sizeErr = nil
		var old string
		waitPromoted, ferr := func() error { return nil }, ready
		if ready == nil {
			old, waitPromoted, ferr = pf.Run(ctx, lockKey)
		}
		f.Target = old
		if ferr == nil {
			ferr = waitPromoted()
		}
		err = errors.Join(err, ferr)
		f.PromotedAt = time.Now()
		f.Promoted = f.PromotedAt.Sub(f.Start)
		f.Bound = ttl + f.Promoted + 3*time.Second
		if err != nil {
			f.Err = err.Error()
		}
		rows = append(rows, f)
	}
	return rows
}

// sizedStart waits for the load to start (t0; false when ctx ended
// first), and a second into it sizes the hot product.
func (h runner) sizedStart(ctx context.Context, loadStart <-chan time.Time, st *stocker) (t0 time.Time, sizeErr error, ok bool) {
	select {
	case t0 = <-loadStart:
	case <-ctx.Done():
		return t0, nil, false
	}
	harness.Sleep(ctx, time.Until(t0.Add(time.Second)))
	return t0, st.Size(ctx, t0, st.Lasts), true
}

// sizeBefore sizes the hot product half a second before a fault at `at`
// from t0, then waits for the fault's time.
func (h runner) sizeBefore(ctx context.Context, t0 time.Time, at time.Duration, st *stocker) error {
	harness.Sleep(ctx, time.Until(t0.Add(at-500*time.Millisecond)))
	err := st.Size(ctx, t0, st.Lasts)
	harness.Sleep(ctx, time.Until(t0.Add(at)))
	return err
}

// stocker keeps the hot product of a failover run selling: it is sized
// from the rate it sold at so far, so that at that rate (plus a quarter) it
// lasts until the load ends, by restocks through the admin API (the
// history's restocks are part of the linearizability check).
type stocker struct {
	E       *harness.Env
	Id      int64
	Initial int64
	Key     string
	Lasts   time.Duration // the load's length, from its start
	Added   int64         // units restocked so far
	N       int
}

// left is the hot product's stock in the database.
func (s *stocker) Left(ctx context.Context) (int64, error) {
	var left int64
	err := s.E.Backend.Db.WithContext(ctx).Raw("SELECT p.stock + COALESCE((SELECT SUM(b.stock) FROM stock_buckets b WHERE b.product_id = p.id), 0) FROM products p WHERE p.id = ?", s.Id).Scan(&left).Error
	return left, err
}

// size restocks what the rest of the load (until end from t0) needs at
// the rate sold so far.
func (s *stocker) Size(ctx context.Context, t0 time.Time, end time.Duration) error {
	left, err := s.Left(ctx)
	if err != nil {
		return err
	}
	elapsed := time.Since(t0)
	rate := float64(s.Initial+s.Added-left) / elapsed.Seconds()
	want := int64(math.Ceil(rate*max(0, (end-elapsed).Seconds())*1.25)) + 1
	if left >= want {
		return nil
	}
	s.N++
	if err := s.E.Client.Restock(ctx, s.Id, want-left, fmt.Sprintf("%s-%d", s.Key, s.N)); err != nil {
		return err
	}
	s.Added += want - left
	return nil
}

func restocked(rows []report.FailoverRow) int64 {
	if len(rows) == 0 {
		return 0
	}
	return rows[len(rows)-1].Restocked
}

// describeFailover fills a row's window figures from the client records.
// Orders flow again at the first order of the hot product created (201)
// after the last of its sends that failed in the fault's span (see
// faultFailure) that ended before until (A2's bound, or the next fault):
// a batch that held the lock before the kill may still finish.
func describeFailover(f *report.FailoverRow, res loadgen.Result, hot int64, next map[string]float64, until time.Time, answerBound time.Duration) {
	lastFail := f.Start
	for _, r := range res.Records {
		if r.ProductID == hot && faultFailure(r) && r.Start.After(f.Start) && r.End.Before(until) && r.End.After(lastFail) {
			lastFail = r.End
		}
	}
	for _, r := range res.Records {
		if r.ProductID == hot && r.Status == http.StatusCreated && r.Start.After(f.Start) && r.End.After(lastFail) {
			if d := r.End.Sub(f.Start); f.Recovery == 0 || d < f.Recovery {
				f.Recovery = d
			}
		}
	}
	end := f.PromotedAt.Add(time.Second)
	if f.Recovery > 0 {
		end = f.Start.Add(f.Recovery)
	}
	f.ByStatus = map[string]int{}
	for _, r := range res.Records {
		if r.End.Before(f.Start) || r.Start.After(end) {
			continue
		}
		f.ByStatus[loadgen.Outcome(r)]++
	}
	// Nobody hangs: from the fault to the next one (or the end), every
	// request the client did not give up on itself (--tiny-timeout) is
	// answered within the lock wait + 1 s.
	for _, r := range res.Records {
		if r.End.Before(f.Start) || !r.Start.Before(until) {
			continue
		}
		if r.Code == loadgen.CodeOutcomeUnknown {
			f.OutcomeUnknown++
		}
		switch {
		case r.Status == 0 && !r.GaveUp:
			f.NoAnswer++
		case r.Status != 0 && r.Latency() > answerBound:
			f.Slow++
		}
	}
	f.StaleFences = next["shop_inventory_stale_fence_rejections_total"] - f.Before["shop_inventory_stale_fence_rejections_total"]
	f.LocksLost = next["shop_inventory_lock_lost_before_release_total"] - f.Before["shop_inventory_lock_lost_before_release_total"]
	f.InDoubt = next["shop_orders_commits_in_doubt_total"] - f.Before["shop_orders_commits_in_doubt_total"]
}

// faultFailure: an answer the fault can explain, a 5xx (but busy) or a
// send given up after more than a second; the retry load's deliberate
// give-ups after --tiny-timeout are not failures.
func faultFailure(r loadgen.Record) bool {
	return r.Status >= 500 && r.Code != "busy" || r.Status == 0 && r.Latency() > time.Second
}

// startTopology starts the Redis of one failover part on free loopback ports.
func startTopology(ctx context.Context, part string) (*topology, error) {
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	switch part {
	case FailoverCluster:
		c, err := topo.StartCluster(sctx, topo.ClusterOptions{})
		if err != nil {
			return nil, err
		}
		return &topology{Desc: "a Redis Cluster (3 masters + 3 replicas, cluster-node-timeout 1s)", Url: c.URL(), Close: c.Close,
			Faults: []plannedFault{{Name: "SIGKILL of the master owning the hot lock's slot", At: 0.25, Run: func(ctx context.Context, key string) (string, func() error, error) {
				slot, err := c.KeySlot(ctx, key)
				if err != nil {
					return "", nil, err
				}
				m, err := c.MasterOf(ctx, slot)
				if err != nil {
					return "", nil, err
				}
				m.Kill()
				return fmt.Sprintf("%s (slot %d)", m.Addr(), slot), func() error {
					_, err := c.WaitPromoted(ctx, slot, m, 30*time.Second)
					return err
				}, nil
			}}}}, nil
	case FailoverSentinel:
		s, err := topo.StartSentinel(sctx, topo.SentinelOptions{})
		if err != nil {
			return nil, err
		}
		fault := func(kill bool) func(ctx context.Context, key string) (string, func() error, error) {
			return func(ctx context.Context, _ string) (string, func() error, error) {
				m, err := s.Master(ctx)
				if err != nil {
					return "", nil, err
				}
				if kill {
					m.Kill()
				} else if err := s.Failover(ctx); err != nil {
					return m.Addr(), nil, err
				}
				return m.Addr(), func() error {
					_, err := s.WaitNewMaster(ctx, m, 30*time.Second)
					return err
				}, nil
			}
		}
		return &topology{Desc: "a Sentinel group (1 master, 2 replicas, 3 sentinels, down-after 1s)", Url: s.URL(), Close: s.Close,
			Env: []string{"SHOP_REDIS_MASTER=" + s.Name},
			Faults: []plannedFault{
				{Name: "SENTINEL FAILOVER", At: 0.2, Run: fault(false)},
				{Name: "SIGKILL of the master", At: 0.6, Run: fault(true)},
			}}, nil
	case FailoverDBSemiSync, FailoverDBAsync:
		return semiSyncTopology(sctx, part == FailoverDBAsync)
	case FailoverDBGalera:
		return galeraTopology(sctx)
	}
	return nil, fmt.Errorf("unknown failover part %q", part)
}
