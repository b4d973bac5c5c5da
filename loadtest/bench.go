package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/seckill-lab/shop/internal/loadgen"
)

// The bench scenario is the project's own benchmark of a hot product, in
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

// benchOptions are the bench scenario's flags.
type benchOptions struct {
	phase       time.Duration // measured window of each phase
	warmup      time.Duration // load before each window, not counted
	clients     int           // concurrent HTTP clients of the throughput phases
	rawWorkers  int           // workers of the raw database ceiling
	rssClients  int           // concurrent keep-alive clients of the memory phase
	rssDuration time.Duration // how long the memory phase runs
}

// benchReport is what the bench scenario measured.
type benchReport struct {
	Phase        time.Duration `json:"phase_ns"`
	Raw          benchRaw      `json:"raw"`
	Orders       []benchOrders `json:"orders"`
	SoldOut      benchRate     `json:"sold_out"`
	Healthz      benchRate     `json:"healthz"`
	RefusalRatio float64       `json:"refusals_per_healthz"`
	Memory       benchMemory   `json:"memory"`
	Targets      []benchTarget `json:"targets"`
}

// benchRaw is the raw database ceiling.
type benchRaw struct {
	Workers  int     `json:"workers"`
	Commits  int64   `json:"commits"`
	Seconds  float64 `json:"seconds"`
	TxPerSec float64 `json:"tx_per_s"`
	Errors   int64   `json:"errors"`
}

// benchOrders is one hot-product phase.
type benchOrders struct {
	Instances    int            `json:"instances"`
	Clients      int            `json:"clients"`
	Committed    int64          `json:"committed"` // order rows of the product that appeared in the window
	Seconds      float64        `json:"seconds"`
	OrdersPerSec float64        `json:"orders_per_s"`
	OfRaw        float64        `json:"of_raw_ceiling"` // OrdersPerSec / Raw.TxPerSec
	Load         benchRate      `json:"load"`
	BatchMean    float64        `json:"batch_mean,omitempty"` // mean batch size over the window; 0: not exposed
	Series       []benchSample  `json:"series"`
	Answers      map[string]int `json:"answers"`
}

// benchSample is one second of a hot-product phase.
type benchSample struct {
	T         float64 `json:"t_s"`
	Orders    float64 `json:"orders_per_s"`
	BatchMean float64 `json:"batch_mean,omitempty"`
}

// benchRate is a closed-loop load's answers.
type benchRate struct {
	Clients  int            `json:"clients"`
	Requests int            `json:"requests"`
	Seconds  float64        `json:"seconds"`
	PerSec   float64        `json:"per_s"` // answers with the expected status per second
	P50      time.Duration  `json:"p50_ns"`
	P90      time.Duration  `json:"p90_ns"`
	P99      time.Duration  `json:"p99_ns"`
	Max      time.Duration  `json:"max_ns"`
	Answers  map[string]int `json:"answers"`
}

// benchMemory is the memory phase.
type benchMemory struct {
	Clients    int       `json:"clients"`
	Seconds    float64   `json:"seconds"`
	Load       benchRate `json:"load"`
	PeakRSSMB  float64   `json:"peak_rss_mb"`  // VmHWM, reset when the phase starts
	MaxRSSMB   float64   `json:"max_rss_mb"`   // highest VmRSS sampled every 100 ms
	StartRSSMB float64   `json:"start_rss_mb"` // VmRSS before the phase
	MaxConns   string    `json:"max_conns"`    // the shop's connection cap, as configured
}

// benchTarget is one target of issue 14 next to this run's figure.
type benchTarget struct {
	What   string  `json:"what"`
	Want   string  `json:"want"`
	Got    float64 `json:"got"`
	Unit   string  `json:"unit"`
	Met    bool    `json:"met"`
	Missed string  `json:"missed,omitempty"`
}

const benchBatchMetric = "shop_orders_batch_size"

func (o benchOptions) validate() error {
	switch {
	case o.phase <= 0 || o.warmup < 0 || o.rssDuration <= 0:
		return errors.New("--bench-phase and --bench-rss-duration must be positive, --bench-warmup not negative")
	case o.clients < 1 || o.rawWorkers < 1 || o.rssClients < 1:
		return errors.New("--bench-clients, --bench-raw-workers and --bench-rss-clients must be at least 1")
	case o.clients > 4096 || o.rawWorkers > 256 || o.rssClients > 20_000:
		return errors.New("bench sizes out of bounds (clients <= 4096, raw workers <= 256, rss clients <= 20000)")
	}
	return nil
}

func (h *harness) bench(ctx context.Context) scenarioReport {
	o := h.o.bench
	r := scenarioReport{
		Title: fmt.Sprintf("hot-product benchmark: raw database ceiling, orders/s with 1 and 3 instances, sold-out vs /healthz, RSS at %d connections", o.rssClients),
		Params: map[string]any{"phase": o.phase.String(), "warmup": o.warmup.String(), "clients": o.clients, "raw_workers": o.rawWorkers,
			"rss_clients": o.rssClients, "rss_duration": o.rssDuration.String()},
	}
	if len(h.o.targets) > 0 {
		r.Error = "bench starts its own shops and counts orders in their database: --target is not supported"
		return r
	}
	raiseFDLimit()
	h.seq++
	id := fmt.Sprintf("%02d-bench", h.seq)
	b, err := newBackend(ctx, backendOptions{mysqlDSN: h.o.mysqlDSN, redisURL: h.o.redisURL, workdir: h.workdir, keep: h.o.keep, scenarioID: id}, h.log)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer b.close()
	br := &benchReport{Phase: o.phase}
	r.Bench = br
	r.Strategy = h.o.strategy
	common := []string{"SHOP_STOCK_STRATEGY=" + h.o.strategy}
	r.Setup = fmt.Sprintf("%s; %s; load generator in this process", b.describe(), strings.Join(common, " "))
	sqlDB, err := b.db.DB.DB()
	if err != nil {
		r.Error = err.Error()
		return r
	}
	users := &benchUsers{}
	if err := h.benchRun(ctx, b, sqlDB, common, users, br); err != nil {
		r.Error = err.Error()
	}
	br.Targets = benchTargets(br)
	if len(br.Orders) > 0 { // the summary line shows the one-instance hot product
		l := br.Orders[0].Load
		r.Summary = loadgen.Summary{Requests: l.Requests, Duration: time.Duration(l.Seconds * float64(time.Second)), P50: l.P50, P90: l.P90, P99: l.P99, Max: l.Max,
			Throughput: float64(l.Requests) / l.Seconds, ByOutcome: l.Answers}
	}
	r.Pass = r.Error == ""
	return r
}

// benchRun runs the phases in order; the report keeps what finished.
func (h *harness) benchRun(ctx context.Context, b *backend, db *sql.DB, common []string, users *benchUsers, br *benchReport) error {
	o := h.o.bench
	h.benchSay("bench: raw database ceiling, %d workers, %s", o.rawWorkers, o.phase)
	raw, err := benchRawCeiling(ctx, db, o.rawWorkers, o.phase)
	br.Raw = raw
	if err != nil {
		return fmt.Errorf("raw ceiling: %w", err)
	}

	c1, err := startCluster(ctx, h.bin, b, 1, fmt.Sprintf("%02d-bench-1", h.seq), h.workdir, common, nil)
	if err != nil {
		return err
	}
	users.secret = []byte(c1.secret)
	err = h.benchOneInstance(ctx, db, c1, users, br)
	c1.close()
	if err != nil {
		return err
	}

	c3, err := startCluster(ctx, h.bin, b, 3, fmt.Sprintf("%02d-bench-3", h.seq), h.workdir, common, nil)
	if err != nil {
		return err
	}
	defer c3.close()
	users.secret = []byte(c3.secret)
	h.benchSay("bench: hot product, 3 instances, %d clients", o.clients)
	ord, err := h.benchOrders(ctx, db, c3, users, br.Raw.TxPerSec)
	br.Orders = append(br.Orders, ord)
	return err
}

func (h *harness) benchOneInstance(ctx context.Context, db *sql.DB, c *cluster, users *benchUsers, br *benchReport) error {
	o := h.o.bench
	h.benchSay("bench: hot product, 1 instance, %d clients", o.clients)
	ord, err := h.benchOrders(ctx, db, c, users, br.Raw.TxPerSec)
	br.Orders = append(br.Orders, ord)
	if err != nil {
		return err
	}

	// A product with one unit, bought once: every other buyer is refused.
	p, err := c.client.CreateProduct(ctx, "bench sold out", 100, 1, "bench-soldout-"+loadgen.RandomID(8))
	if err != nil {
		return err
	}
	buyer := users.minter().bearer(users.take(1))
	a := c.client.Do(ctx, loadgen.Call{Method: http.MethodPost, Path: seckillPath(p.ID), Token: strings.TrimPrefix(buyer, "Bearer ")})
	if err := a.Error(http.StatusCreated); err != nil {
		return fmt.Errorf("buy the one unit of the sold-out product: %w", err)
	}
	soldOut := benchLoad{method: http.MethodPost, path: seckillPath(p.ID), want: http.StatusConflict, wantCode: "sold_out", users: users}

	h.benchSay("bench: sold-out refusals, %d clients", o.clients)
	br.SoldOut, err = soldOut.run(ctx, c.urls(), o.clients, o.warmup, o.phase)
	if err != nil {
		return fmt.Errorf("sold-out phase: %w", err)
	}
	h.benchSay("bench: GET /healthz, %d clients", o.clients)
	health := benchLoad{method: http.MethodGet, path: "/healthz", want: http.StatusOK}
	br.Healthz, err = health.run(ctx, c.urls(), o.clients, o.warmup, o.phase)
	if err != nil {
		return fmt.Errorf("healthz phase: %w", err)
	}
	if br.Healthz.PerSec > 0 {
		br.RefusalRatio = br.SoldOut.PerSec / br.Healthz.PerSec
	}

	h.benchSay("bench: memory, %d keep-alive clients on the sold-out path for %s", o.rssClients, o.rssDuration)
	br.Memory, err = benchMemoryPhase(ctx, c, soldOut, o)
	return err
}

// benchOrders loads one hot product (stock that does not run out) from
// o.clients distinct buyers at a time, each request a new buyer, and counts
// the committed orders in the database over the measured window, sampling
// the count and the shops' batch sizes every second.
func (h *harness) benchOrders(ctx context.Context, db *sql.DB, c *cluster, users *benchUsers, raw float64) (benchOrders, error) {
	o := h.o.bench
	out := benchOrders{Instances: len(c.instances), Clients: o.clients}
	p, err := c.client.CreateProduct(ctx, fmt.Sprintf("bench hot %d", len(c.instances)), 100, 1_000_000, "bench-hot-"+loadgen.RandomID(8))
	if err != nil {
		return out, err
	}
	l := benchLoad{method: http.MethodPost, path: seckillPath(p.ID), want: http.StatusCreated, users: users}
	var (
		series          []benchSample
		count0, count1  int64
		t0, t1          time.Time
		sum0, n0        float64
		sampleErr       error
		samplerFinished = make(chan struct{})
	)
	start := time.Now()
	go func() {
		defer close(samplerFinished)
		// Wait out the warm-up, then sample once a second over the window.
		if !sleepUntil(ctx, start.Add(o.warmup)) {
			return
		}
		t0 = time.Now()
		if count0, sampleErr = countOrders(ctx, db, p.ID); sampleErr != nil {
			return
		}
		sum0, n0 = batchTotals(ctx, c)
		prevT, prevCount, prevSum, prevN := t0, count0, sum0, n0
		for next := t0.Add(time.Second); ; next = next.Add(time.Second) {
			last := !next.Before(t0.Add(o.phase))
			if last {
				next = t0.Add(o.phase)
			}
			if !sleepUntil(ctx, next) {
				return
			}
			now := time.Now()
			n, err := countOrders(ctx, db, p.ID)
			if err != nil {
				sampleErr = err
				return
			}
			s, k := batchTotals(ctx, c)
			dt := now.Sub(prevT).Seconds()
			smp := benchSample{T: now.Sub(t0).Seconds(), Orders: float64(n-prevCount) / dt}
			if k > prevN {
				smp.BatchMean = (s - prevSum) / (k - prevN)
			}
			series = append(series, smp)
			prevT, prevCount, prevSum, prevN = now, n, s, k
			if last {
				t1, count1 = now, n
				return
			}
		}
	}()
	rate, err := l.run(ctx, c.urls(), o.clients, o.warmup, o.phase)
	<-samplerFinished
	out.Load, out.Answers, out.Series = rate, rate.Answers, series
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
	if raw > 0 {
		out.OfRaw = out.OrdersPerSec / raw
	}
	if s, k := batchTotals(ctx, c); k > n0 {
		out.BatchMean = (s - sum0) / (k - n0)
	}
	return out, nil
}

func seckillPath(id int64) string { return "/api/v1/seckill/" + strconv.FormatInt(id, 10) + "/orders" }

func countOrders(ctx context.Context, db *sql.DB, product int64) (int64, error) {
	var n int64
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders WHERE product_id = ?", product).Scan(&n)
	return n, err
}

// batchTotals sums the batch-size histogram's _sum and _count over the
// instances; both are 0 when the shop exposes no such histogram.
func batchTotals(ctx context.Context, c *cluster) (sum, count float64) {
	for i := range c.instances {
		m, err := c.client.Metrics(ctx, i, benchBatchMetric)
		if err != nil {
			continue
		}
		sum += m[benchBatchMetric+"_sum"]
		count += m[benchBatchMetric+"_count"]
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

// benchRawCeiling runs workers transactions of one conditional stock
// UPDATE + one order INSERT + COMMIT on a product of its own, for d.
func benchRawCeiling(ctx context.Context, db *sql.DB, workers int, d time.Duration) (benchRaw, error) {
	out := benchRaw{Workers: workers}
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
	db.SetMaxOpenConns(max(workers+4, 20))
	db.SetMaxIdleConns(max(workers+4, 20))
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

// benchUsers hands out distinct buyer ids and their bearer headers, minted
// here with the shops' SHOP_AUTH_SECRET as the demo login signs them (HS256,
// issuer "shop", subject the user id): the login route is rate limited per
// address, and a login per order would double the load.
type benchUsers struct {
	next   atomic.Int64
	secret []byte
}

// take reserves n consecutive user ids and returns the first.
func (u *benchUsers) take(n int64) int64 { return u.next.Add(n) - n + 1 }

// minter signs tokens for one goroutine: one HMAC state and buffer reused,
// a few hundred nanoseconds and one allocation per token.
type minter struct {
	mac      hash.Hash
	buf, sum []byte
	iat, exp int64
}

func (u *benchUsers) minter() *minter {
	now := time.Now()
	return &minter{mac: hmac.New(sha256.New, u.secret), iat: now.Unix(), exp: now.Add(time.Hour).Unix()}
}

var jwtHeader = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))

// bearer is the Authorization header value of user id.
func (m *minter) bearer(id int64) string {
	var claims [96]byte
	c := append(claims[:0], `{"iss":"shop","sub":"`...)
	c = strconv.AppendInt(c, id, 10)
	c = append(c, `","exp":`...)
	c = strconv.AppendInt(c, m.exp, 10)
	c = append(c, `,"iat":`...)
	c = strconv.AppendInt(c, m.iat, 10)
	c = append(c, '}')
	enc := base64.RawURLEncoding
	b := append(m.buf[:0], "Bearer "...)
	b = append(b, jwtHeader...)
	b = append(b, '.')
	b = enc.AppendEncode(b, c)
	m.mac.Reset()
	m.mac.Write(b[len("Bearer "):])
	m.sum = m.mac.Sum(m.sum[:0])
	b = append(b, '.')
	b = enc.AppendEncode(b, m.sum)
	m.buf = b
	return string(b)
}

// headers mints n bearer headers for fresh users, on both cores.
func (u *benchUsers) headers(n int) []string {
	first := u.take(int64(n))
	out := make([]string, n)
	var wg sync.WaitGroup
	const parts = 2
	for p := range parts {
		wg.Go(func() {
			m := u.minter()
			for i := p; i < n; i += parts {
				out[i] = m.bearer(first + int64(i))
			}
		})
	}
	wg.Wait()
	return out
}

// benchLoad is a closed loop of clients sending one kind of request.
type benchLoad struct {
	method, path string
	want         int           // the status that counts
	wantCode     string        // and its problem code, if any
	users        *benchUsers   // nil: no token; else every request a new user
	timeout      time.Duration // for an answer's head; 0: 30 s
}

// benchPool bounds the tokens minted before a phase; past them each client
// mints its own as it goes.
const benchPool = 100_000

// run drives clients (client i on urls[i % len]) for warmup + d and reports
// the answers of the requests that started in the window.
func (l benchLoad) run(ctx context.Context, urls []string, clients int, warmup, d time.Duration) (benchRate, error) {
	out := benchRate{Clients: clients, Answers: map[string]int{}}
	targets := make([]*url.URL, len(urls))
	for i, s := range urls {
		u, err := url.Parse(s + l.path)
		if err != nil {
			return out, err
		}
		targets[i] = u
	}
	var pool []string
	if l.users != nil {
		pool = l.users.headers(min(benchPool, max(clients*4, int(5_000*(warmup+d).Seconds()))))
	}
	var next atomic.Int64
	bearer := func(m *minter) string {
		if i := next.Add(1) - 1; i < int64(len(pool)) {
			return pool[i]
		}
		return m.bearer(l.users.take(1))
	}
	tr := benchTransport(clients, cmp.Or(l.timeout, 30*time.Second))
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	start := time.Now()
	t0, t1 := start.Add(warmup), start.Add(warmup+d)
	results := make([]benchClientResult, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			results[i] = l.client(ctx, hc, targets[i%len(targets)], bearer, t0, t1)
		})
	}
	wg.Wait()
	var lat []uint32
	for _, r := range results {
		lat = append(lat, r.lat...)
		out.Requests += r.requests
		for k, v := range r.answers {
			out.Answers[k] += v
		}
		if r.err != nil && ctx.Err() == nil {
			return out, r.err
		}
	}
	out.Seconds = d.Seconds()
	good := out.Answers[answerKey(l.want, l.wantCode)]
	out.PerSec = float64(good) / out.Seconds
	slices.Sort(lat)
	if len(lat) > 0 {
		q := func(p float64) time.Duration {
			return time.Duration(lat[min(len(lat)-1, int(p*float64(len(lat))))]) * time.Microsecond
		}
		out.P50, out.P90, out.P99, out.Max = q(0.50), q(0.90), q(0.99), q(1)
	}
	if good == 0 {
		return out, fmt.Errorf("%s %s: no %s answer in %d requests (%s)", l.method, l.path, answerKey(l.want, l.wantCode), out.Requests, answersText(out.Answers))
	}
	return out, ctx.Err()
}

type benchClientResult struct {
	lat      []uint32 // microseconds, requests started in the window
	requests int
	answers  map[string]int
	err      error
}

// client is one keep-alive client: it sends until t1 and keeps what
// started in [t0, t1).
func (l benchLoad) client(ctx context.Context, hc *http.Client, u *url.URL, bearer func(*minter) string, t0, t1 time.Time) benchClientResult {
	res := benchClientResult{answers: map[string]int{}, lat: make([]uint32, 0, 1024)}
	buf := make([]byte, 2048)
	auth := []string{""}
	hdr := http.Header{}
	var m *minter
	if l.users != nil {
		hdr["Authorization"] = auth
		m = l.users.minter()
	}
	errs := 0
	for ctx.Err() == nil {
		start := time.Now()
		if !start.Before(t1) {
			break
		}
		if l.users != nil {
			auth[0] = bearer(m)
		}
		req := &http.Request{Method: l.method, URL: u, Host: u.Host, Header: hdr, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		status, code, err := roundTrip(hc, req, buf)
		measured := !start.Before(t0)
		if measured {
			res.requests++
			res.lat = append(res.lat, uint32(min(time.Since(start).Microseconds(), 1<<32-1)))
			res.answers[answerKey(status, code)]++
		}
		if err != nil {
			if errs++; errs > 100 {
				res.err = fmt.Errorf("%s %s: %w", l.method, u, err)
				break
			}
			time.Sleep(10 * time.Millisecond) // the server went away or refused: do not spin
		}
	}
	return res
}

// roundTrip sends req and reads the answer into buf: the status and, for a
// problem+json answer, its code.
func roundTrip(hc *http.Client, req *http.Request, buf []byte) (status int, code string, err error) {
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	n, _ := io.ReadFull(resp.Body, buf)
	if n == len(buf) {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		code = problemCode(buf[:n])
	}
	return resp.StatusCode, code, nil
}

// problemCode finds "code":"..." in a problem+json body without decoding it.
func problemCode(b []byte) string {
	_, rest, ok := bytes.Cut(b, []byte(`"code":`))
	if !ok {
		return ""
	}
	rest = bytes.TrimLeft(rest, " ")
	if len(rest) == 0 || rest[0] != '"' {
		return ""
	}
	end := bytes.IndexByte(rest[1:], '"')
	if end < 0 {
		return ""
	}
	return knownCode(rest[1 : 1+end])
}

// knownCode interns the codes the bench expects so counting them allocates
// nothing.
func knownCode(b []byte) string {
	for _, c := range []string{"sold_out", "busy", "unavailable", "rate_limited", "insufficient_stock"} {
		if string(b) == c {
			return c
		}
	}
	return string(b)
}

func answerKey(status int, code string) string {
	switch {
	case status == 0:
		return "no answer"
	case code != "":
		return statusText(status) + " " + code
	}
	return statusText(status)
}

var statusTexts = func() map[int]string {
	m := map[int]string{}
	for s := 100; s < 600; s++ {
		m[s] = strconv.Itoa(s)
	}
	return m
}()

func statusText(s int) string {
	if t, ok := statusTexts[s]; ok {
		return t
	}
	return strconv.Itoa(s)
}

func answersText(m map[string]int) string { return outcomes(m) }

// benchTransport keeps one idle connection per client (keep-alive all the
// way) and adds nothing the shop's answers do not need.
func benchTransport(clients int, timeout time.Duration) *http.Transport {
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          clients,
		MaxIdleConnsPerHost:   clients,
		IdleConnTimeout:       time.Minute,
		ResponseHeaderTimeout: timeout,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
}

// benchMemoryPhase runs o.rssClients keep-alive clients on the sold-out
// path of instance 1 for o.rssDuration and reads its peak RSS: VmHWM, reset
// at the start (clear_refs 5), and VmRSS sampled every 100 ms.
func benchMemoryPhase(ctx context.Context, c *cluster, l benchLoad, o benchOptions) (benchMemory, error) {
	out := benchMemory{Clients: o.rssClients, Seconds: o.rssDuration.Seconds(), MaxConns: "SHOP_MAX_CONNS default"}
	for _, kv := range c.instances[0].env {
		if v, ok := strings.CutPrefix(kv, "SHOP_MAX_CONNS="); ok {
			out.MaxConns = v
		}
	}
	c.instances[0].mu.Lock()
	pid := c.instances[0].cmd.Process.Pid
	c.instances[0].mu.Unlock()
	st, err := procStatus(pid)
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
			if st, err := procStatus(pid); err == nil {
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
	// Clients beyond the shop's connection cap wait in the listen backlog;
	// after 5 s without an answer they count as "no answer".
	l.timeout = 5 * time.Second
	out.Load, err = l.run(ctx, c.urls()[:1], o.rssClients, 0, o.rssDuration)
	close(stop)
	out.MaxRSSMB = <-sampled
	if st, e := procStatus(pid); e == nil {
		out.PeakRSSMB = st["VmHWM"]
	}
	return out, err
}

// procStatus reads the kB fields of /proc/<pid>/status, in MB.
func procStatus(pid int) (map[string]float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("peak RSS needs /proc (Linux): %w", err)
	}
	defer f.Close()
	return parseProcStatus(f), nil
}

func parseProcStatus(r io.Reader) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		f := strings.Fields(rest)
		if !ok || len(f) != 2 || f[1] != "kB" {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			out[name] = v / 1024
		}
	}
	return out
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

// benchTargets sets this run's figures beside issue 14's targets.
func benchTargets(br *benchReport) []benchTarget {
	var out []benchTarget
	add := func(what, want, unit string, got float64, met bool, missed string) {
		t := benchTarget{What: what, Want: want, Got: got, Unit: unit, Met: met}
		if !met {
			t.Missed = missed
		}
		out = append(out, t)
	}
	for _, o := range br.Orders {
		if o.Instances != 1 || o.OrdersPerSec == 0 {
			continue
		}
		add("committed orders/s, 1 instance, ÷ raw ceiling", ">= 2.0x", "x", o.OfRaw, o.OfRaw >= 2.0, fmt.Sprintf("%.2fx short", 2.0-o.OfRaw))
		p99 := float64(o.Load.P99) / float64(time.Millisecond)
		add("orders p99, 1 instance", "<= 100 ms", "ms", p99, p99 <= 100, fmt.Sprintf("%.0f ms over", p99-100))
	}
	if br.RefusalRatio > 0 {
		add("sold-out refusals/s ÷ /healthz", ">= 0.6x", "x", br.RefusalRatio, br.RefusalRatio >= 0.6, fmt.Sprintf("%.2fx short", 0.6-br.RefusalRatio))
	}
	if m := br.Memory; m.PeakRSSMB > 0 || m.MaxRSSMB > 0 {
		peak := max(m.PeakRSSMB, m.MaxRSSMB)
		add(fmt.Sprintf("peak RSS, %d connections", m.Clients), "<= 150 MB", "MB", peak, peak <= 150, fmt.Sprintf("%.0f MB over", peak-150))
	}
	return out
}

// writeBench prints the bench figures for a person.
func writeBench(w io.Writer, br *benchReport) {
	if br.Raw.Commits > 0 {
		fmt.Fprintf(w, "raw db:   %d workers, conditional UPDATE + order INSERT + COMMIT: %.0f tx/s (%d in %.1fs, %d errors)\n",
			br.Raw.Workers, br.Raw.TxPerSec, br.Raw.Commits, br.Raw.Seconds, br.Raw.Errors)
	}
	for _, o := range br.Orders {
		batch := "no batch-size metric"
		if o.BatchMean > 0 {
			batch = fmt.Sprintf("mean batch %.1f", o.BatchMean)
		}
		fmt.Fprintf(w, "orders:   %d instance(s), %d clients: %.0f committed orders/s = %.2fx raw ceiling (%d in %.1fs); p50 %s, p99 %s; %s\n",
			o.Instances, o.Clients, o.OrdersPerSec, o.OfRaw, o.Committed, o.Seconds, ms(o.Load.P50), ms(o.Load.P99), batch)
		fmt.Fprintf(w, "          answers: %s\n", answersText(o.Answers))
	}
	if br.SoldOut.Requests > 0 {
		fmt.Fprintf(w, "refusals: %.0f sold-out refusals/s (p50 %s, p99 %s) vs GET /healthz %.0f/s (p50 %s, p99 %s): %.2fx; %d clients\n",
			br.SoldOut.PerSec, ms(br.SoldOut.P50), ms(br.SoldOut.P99), br.Healthz.PerSec, ms(br.Healthz.P50), ms(br.Healthz.P99), br.RefusalRatio, br.SoldOut.Clients)
		fmt.Fprintf(w, "          answers: %s\n", answersText(br.SoldOut.Answers))
	}
	if m := br.Memory; m.Load.Requests > 0 {
		fmt.Fprintf(w, "memory:   %d keep-alive clients on the sold-out path for %.0fs: peak RSS %.0f MB (VmHWM; max sampled VmRSS %.0f MB, %.0f MB before); %.0f refusals/s, p99 %s; shop connection cap %s\n",
			m.Clients, m.Seconds, m.PeakRSSMB, m.MaxRSSMB, m.StartRSSMB, m.Load.PerSec, ms(m.Load.P99), m.MaxConns)
		fmt.Fprintf(w, "          answers: %s\n", answersText(m.Load.Answers))
	}
	for _, t := range br.Targets {
		verdict := "met"
		if !t.Met {
			verdict = "MISSED by " + t.Missed
		}
		fmt.Fprintf(w, "target:   %s %s: %s %s -> %s\n", t.What, t.Want, trimFloat2(t.Got), t.Unit, verdict)
	}
}

func trimFloat2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// benchHTML is the bench section of report.html: the figures, and orders/s
// and batch sizes over time.
func benchHTML(br *benchReport) string {
	var b strings.Builder
	b.WriteString("<table><tr><th class=l>measure</th><th>figure</th><th>ratio</th><th>p50</th><th>p99</th></tr>")
	row := func(what string, fig float64, unit, ratio string, p50, p99 time.Duration) {
		fmt.Fprintf(&b, "<tr><td class=l>%s</td><td>%.0f %s</td><td>%s</td><td>%s</td><td>%s</td></tr>", html.EscapeString(what), fig, unit, ratio, ms(p50), ms(p99))
	}
	row(fmt.Sprintf("raw database ceiling, %d workers", br.Raw.Workers), br.Raw.TxPerSec, "tx/s", "1", 0, 0)
	for _, o := range br.Orders {
		row(fmt.Sprintf("committed orders, %d instance(s), %d clients", o.Instances, o.Clients), o.OrdersPerSec, "orders/s", fmt.Sprintf("%.2fx raw", o.OfRaw), o.Load.P50, o.Load.P99)
	}
	row("sold-out refusals", br.SoldOut.PerSec, "/s", fmt.Sprintf("%.2fx healthz", br.RefusalRatio), br.SoldOut.P50, br.SoldOut.P99)
	row("GET /healthz", br.Healthz.PerSec, "/s", "1", br.Healthz.P50, br.Healthz.P99)
	fmt.Fprintf(&b, "<tr><td class=l>peak RSS, %d keep-alive clients on the sold-out path</td><td>%.0f MB</td><td></td><td>%s</td><td>%s</td></tr></table>",
		br.Memory.Clients, max(br.Memory.PeakRSSMB, br.Memory.MaxRSSMB), ms(br.Memory.Load.P50), ms(br.Memory.Load.P99))
	if len(br.Targets) > 0 {
		b.WriteString("<table><tr><th class=l>target</th><th>want</th><th>this run</th><th class=l>verdict</th></tr>")
		for _, t := range br.Targets {
			v := `<span class=ok>met</span>`
			if !t.Met {
				v = `<span class=bad>missed by ` + html.EscapeString(t.Missed) + `</span>`
			}
			fmt.Fprintf(&b, "<tr><td class=l>%s</td><td>%s</td><td>%s %s</td><td class=l>%s</td></tr>", html.EscapeString(t.What), html.EscapeString(t.Want), trimFloat2(t.Got), t.Unit, v)
		}
		b.WriteString("</table>")
	}
	colors := []string{"#2e7d32", "#1565c0", "#6a1b9a"}
	var orders, batches []chartSeries
	for i, o := range br.Orders {
		var op, bp [][2]float64
		for _, s := range o.Series {
			op = append(op, [2]float64{s.T, s.Orders})
			if s.BatchMean > 0 {
				bp = append(bp, [2]float64{s.T, s.BatchMean})
			}
		}
		name := fmt.Sprintf("%d inst.", o.Instances)
		orders = append(orders, chartSeries{name, colors[i%len(colors)], op})
		if len(bp) > 0 {
			batches = append(batches, chartSeries{name, colors[i%len(colors)], bp})
		}
	}
	if len(orders) > 0 {
		b.WriteString(lineChart("committed orders per second (from the database), hot product", orders, nil))
	}
	if len(batches) > 0 {
		b.WriteString(lineChart("mean batch size per second ("+benchBatchMetric+")", batches, nil))
	}
	return b.String()
}

// benchSay prints one progress line of the bench.
func (h *harness) benchSay(format string, args ...any) {
	fmt.Fprintf(h.out, "  "+format+"\n", args...)
}
