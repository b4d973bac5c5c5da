// Package loadgen is the shop's client-side load generator: simulated buyers
// that race for a flash-sale product, retry with the same Idempotency-Key,
// and pay, across one or more shop instances. It records what every client
// saw (Record) and checks those records against the database's facts: the
// invariants only clients can judge (O3 no lost acknowledgement, O4
// consistent replay, O5 no undersell, and the payment scenario's client-side
// money checks), and judges each product's history for linearizability
// (CheckLinear, with internal/linear).
//
// It only speaks HTTP: it starts no process and opens no database, so the
// load-test harness and an in-server lab route can both use it.
package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/seckill-lab/shop/internal/wire"
)

// Config is one race: Users buyers, each sending Attempts seckill (or
// regular) requests, against the instances at BaseURLs.
type Config struct {
	BaseURLs   []string
	AdminToken string
	// ProductID is the flash-sale product; 0 creates one with Stock units
	// (default 500). With a ProductID, Stock is only reported back.
	ProductID int64
	Stock     int64
	// Users buyers (default 5000) with ids UserIDBase+1 .. UserIDBase+Users;
	// UserIDBase 0 picks a random base so runs never share users.
	Users      int
	UserIDBase int64
	// Concurrency bounds the buyers in flight (default 256).
	Concurrency int
	// Attempts is how many times each buyer sends its request (default 1, the
	// plain race). With more, buyers mix patterns: one after another, all at
	// once, a first send given up after TinyTimeout then retried, and two at
	// once followed by the rest. Every send of one buyer carries the same
	// idempotency identity.
	Attempts int
	// RegularShare of the buyers (0..1) place a regular order with an
	// Idempotency-Key on RegularProductID instead of a seckill order.
	RegularShare     float64
	RegularProductID int64 // 0 creates RegularProducts products with RegularStock units each
	RegularStock     int64 // default Stock
	// RegularProducts spreads the regular buyers over this many products
	// (default 1), so their product locks are not all one.
	RegularProducts int
	RegularMaxQty   int64 // quantities are 1..RegularMaxQty (default 3)
	// TinyTimeout is the client timeout of the "gave up early" first sends
	// (0: that pattern sends normally). Timeout bounds every other send.
	TinyTimeout time.Duration
	Timeout     time.Duration // default 10s
	// Rate paces buyers' starts per second; 0 starts them as fast as the
	// concurrency allows.
	Rate float64
	// MaxResends bounds the resends (same key) of a send answered 503, 5xx,
	// 409 idempotency_key_in_use or not at all (default 3; -1 none).
	MaxResends int
	// Failover sends a resend to the next instance, as a load balancer would.
	Failover bool
	// RunID namespaces idempotency keys and product names (default random).
	RunID string
	// Progress, when set, is called about every ProgressEvery (default
	// 500ms) while the race runs, and once at the end.
	Progress      func(Stats)
	ProgressEvery time.Duration
	// Client, when set, is used instead of a new one for BaseURLs.
	Client *Client
}

// Buyer is one simulated user of a run.
type Buyer struct {
	UserID    int64  `json:"user_id"`
	Token     string `json:"-"`
	Op        string `json:"op"` // OpSeckill or OpOrder
	ProductID int64  `json:"product_id"`
	Quantity  int64  `json:"quantity"`
	Key       string `json:"key,omitempty"`
	Pattern   string `json:"pattern"`
}

// Result is what a run did and saw.
type Result struct {
	RunID            string        `json:"run_id"`
	ProductID        int64         `json:"product_id"`
	Stock            int64         `json:"stock"`
	RegularProductID int64         `json:"regular_product_id,omitempty"`
	RegularProducts  []int64       `json:"regular_products,omitempty"`
	RegularStock     int64         `json:"regular_stock,omitempty"`
	Buyers           []Buyer       `json:"-"`
	Started          time.Time     `json:"started"`
	Ended            time.Time     `json:"ended"`
	Records          []Record      `json:"-"`
	Summary          Summary       `json:"summary"`
	Created          map[int64]int `json:"-"` // 201 answers per product
}

// Tokens maps user id to bearer token, for look-ups as the owner.
func (r Result) Tokens() map[int64]string {
	m := make(map[int64]string, len(r.Buyers))
	for _, b := range r.Buyers {
		m[b.UserID] = b.Token
	}
	return m
}

// InitialStock maps each product the run created to the units it started with.
func (r Result) InitialStock() map[int64]int64 {
	m := map[int64]int64{r.ProductID: r.Stock}
	for _, id := range r.RegularProducts {
		m[id] = r.RegularStock
	}
	return m
}

// Patterns of a buyer's sends when Attempts > 1.
const (
	PatternOnce       = "once"
	PatternSequential = "sequential"
	PatternBurst      = "burst"
	PatternTimeout    = "timeout-then-retry"
	PatternMixed      = "burst-then-sequential"
)

// RandomID returns n random bytes in hex, for run ids and keys.
func RandomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (c *Config) defaults() error {
	if len(c.BaseURLs) == 0 && c.Client == nil {
		return errNoTargets
	}
	if c.Client == nil {
		c.Client = NewClient(c.BaseURLs, c.AdminToken, max(c.Concurrency, 1))
	}
	if len(c.Client.BaseURLs) == 0 {
		return errNoTargets
	}
	if c.Stock <= 0 && c.ProductID == 0 {
		c.Stock = 500
	}
	if c.Users <= 0 {
		c.Users = 5000
	}
	if c.UserIDBase == 0 {
		c.UserIDBase = 1_000_000 + mrand.Int64N(1<<40)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 256
	}
	if c.Attempts <= 0 {
		c.Attempts = 1
	}
	if c.RegularStock <= 0 {
		c.RegularStock = c.Stock
	}
	if c.RegularProducts <= 0 || c.RegularProductID != 0 {
		c.RegularProducts = 1
	}
	if c.RegularMaxQty <= 0 {
		c.RegularMaxQty = 3
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.MaxResends == 0 {
		c.MaxResends = 3
	}
	if c.RunID == "" {
		c.RunID = RandomID(4)
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = 500 * time.Millisecond
	}
	return nil
}

// Race runs one flash sale (and, with Attempts > 1 or RegularShare > 0, a
// retry storm) and returns every client record. It returns an error only
// when the run could not be set up (products, logins); what the shop
// answered during the run is in the records, judged by Check.
func Race(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.defaults(); err != nil {
		return Result{}, err
	}
	c := cfg.Client
	res := Result{RunID: cfg.RunID, ProductID: cfg.ProductID, Stock: cfg.Stock, Created: map[int64]int{}}
	if res.ProductID == 0 {
		p, err := c.CreateProduct(ctx, "flash sale "+cfg.RunID, 990, cfg.Stock, "lt-product-"+cfg.RunID)
		if err != nil {
			return res, err
		}
		res.ProductID = p.ID
	}
	nRegular := int(cfg.RegularShare * float64(cfg.Users))
	if nRegular > 0 {
		res.RegularStock = cfg.RegularStock
		res.RegularProducts = []int64{cfg.RegularProductID}
		if cfg.RegularProductID == 0 {
			res.RegularProducts = nil
			for k := range cfg.RegularProducts {
				p, err := c.CreateProduct(ctx, fmt.Sprintf("regular %s #%d", cfg.RunID, k+1), 250, cfg.RegularStock, fmt.Sprintf("lt-regular-%s-%d", cfg.RunID, k+1))
				if err != nil {
					return res, err
				}
				res.RegularProducts = append(res.RegularProducts, p.ID)
			}
		}
		res.RegularProductID = res.RegularProducts[0]
	}
	res.Buyers = planBuyers(cfg, res.ProductID, res.RegularProducts, nRegular)
	if err := login(ctx, c, res.Buyers, cfg.Concurrency); err != nil {
		return res, err
	}

	rec := NewRecorder(len(res.Buyers) * cfg.Attempts)
	stop := progress(rec, cfg.Progress, cfg.ProgressEvery)
	res.Started = time.Now()
	pool(ctx, len(res.Buyers), cfg.Concurrency, cfg.Rate, func(i int) {
		b := res.Buyers[i]
		s := sender{c: c, cfg: &cfg, rec: rec, b: b, target: i}
		s.run(ctx)
	})
	res.Ended = time.Now()
	// A3: every request answered outcome_unknown is retried with the same
	// identity until an answer tells its outcome.
	resolveDoubts(ctx, c, res.Buyers, rec, cfg.Timeout)
	stop()
	res.Records = rec.Records()
	res.Summary = Summarize(res.Records)
	for _, r := range res.Records {
		if r.Status == http.StatusCreated {
			res.Created[r.ProductID]++
		}
	}
	return res, ctx.Err()
}

func planBuyers(cfg Config, product int64, regular []int64, nRegular int) []Buyer {
	buyers := make([]Buyer, cfg.Users)
	// Spread regular buyers evenly among seckill ones.
	every := 0
	if nRegular > 0 {
		every = max(1, cfg.Users/nRegular)
	}
	left := nRegular
	for i := range buyers {
		b := Buyer{UserID: cfg.UserIDBase + int64(i) + 1, Op: OpSeckill, ProductID: product, Quantity: 1, Pattern: PatternOnce}
		if left > 0 && every > 0 && i%every == 0 {
			left--
			b.Op, b.ProductID = OpOrder, regular[(nRegular-left-1)%len(regular)]
			b.Quantity = 1 + int64(i/every)%cfg.RegularMaxQty
			b.Key = "lt-" + cfg.RunID + "-" + strconv.FormatInt(b.UserID, 10)
		}
		if cfg.Attempts > 1 {
			b.Pattern = []string{PatternSequential, PatternBurst, PatternTimeout, PatternMixed}[i%4]
		}
		buyers[i] = b
	}
	return buyers
}

// login gets every buyer a token, spreading the logins over the instances.
func login(ctx context.Context, c *Client, buyers []Buyer, concurrency int) error {
	var mu sync.Mutex
	var first error
	pool(ctx, len(buyers), min(concurrency, 64), 0, func(i int) {
		var tok string
		var err error
		for attempt := 0; attempt < 4; attempt++ {
			if tok, err = c.Token(ctx, i+attempt, buyers[i].UserID); err == nil {
				break
			}
			sleep(ctx, 200*time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil && first == nil {
			first = err
		}
		buyers[i].Token = tok
	})
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// pool runs fn(0..n-1) on at most workers goroutines, starting at most rate
// per second when rate > 0; it stops handing out work when ctx ends.
func pool(ctx context.Context, n, workers int, rate float64, fn func(i int)) {
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range max(1, min(workers, n)) {
		wg.Go(func() {
			for i := range jobs {
				fn(i)
			}
		})
	}
	start := time.Now()
feed:
	for i := 0; i < n; i++ {
		if rate > 0 {
			due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				sleep(ctx, d)
			}
		}
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
}

// progress calls fn every interval until the returned stop is called, and
// once more then.
func progress(rec *Recorder, fn func(Stats), every time.Duration) (stop func()) {
	if fn == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn(rec.Stats())
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		fn(rec.Stats())
	}
}

// sender sends one buyer's requests by its pattern.
type sender struct {
	c      *Client
	cfg    *Config
	rec    *Recorder
	b      Buyer
	target int
}

func (s sender) run(ctx context.Context) {
	n := s.cfg.Attempts
	switch s.b.Pattern {
	case PatternBurst:
		s.parallel(ctx, 0, n)
	case PatternMixed:
		s.parallel(ctx, 0, min(2, n))
		for i := 2; i < n; i++ {
			s.send(ctx, i, s.cfg.Timeout)
		}
	case PatternTimeout:
		first := s.cfg.Timeout
		if s.cfg.TinyTimeout > 0 {
			first = s.cfg.TinyTimeout
		}
		s.send(ctx, 0, first)
		for i := 1; i < n; i++ {
			s.send(ctx, i, s.cfg.Timeout)
		}
	default:
		for i := 0; i < n; i++ {
			s.send(ctx, i, s.cfg.Timeout)
		}
	}
}

func (s sender) parallel(ctx context.Context, from, to int) {
	var wg sync.WaitGroup
	for i := from; i < to; i++ {
		wg.Go(func() { s.send(ctx, i, s.cfg.Timeout) })
	}
	wg.Wait()
}

// send is one logical send (the i-th of the buyer), with its resends.
// A send the client gave up on (its own timeout) is not resent here: the
// next send of the pattern is the retry.
func (s sender) send(ctx context.Context, i int, timeout time.Duration) {
	call := buyerCall(s.b)
	call.Timeout = timeout
	for r := 0; r <= max(0, s.cfg.MaxResends); r++ {
		if ctx.Err() != nil {
			return
		}
		call.Target = s.target + i
		if s.cfg.Failover {
			call.Target += r
		}
		call.Target %= len(s.c.BaseURLs)
		a := s.c.Do(ctx, call)
		rec := recordOf(s.b, call, a, i*100+r)
		gaveUp := errors.Is(a.Err, context.DeadlineExceeded) && timeout < s.cfg.Timeout
		rec.GaveUp = gaveUp
		s.rec.Add(rec)
		if !retryable(a) || gaveUp {
			return
		}
		sleep(ctx, time.Duration(100+mrand.IntN(200))*time.Millisecond)
	}
}

func buyerCall(b Buyer) Call {
	if b.Op == OpOrder {
		return Call{Method: http.MethodPost, Path: "/api/v1/orders", Token: b.Token, Key: b.Key,
			Body: map[string]int64{"product_id": b.ProductID, "quantity": b.Quantity}}
	}
	return Call{Method: http.MethodPost, Path: "/api/v1/seckill/" + strconv.FormatInt(b.ProductID, 10) + "/orders", Token: b.Token}
}

// recordOf turns an answer into a record; attempt is send*100 + resend.
func recordOf(b Buyer, call Call, a Answer, attempt int) Record {
	r := Record{
		Op: b.Op, UserID: b.UserID, ProductID: b.ProductID, Quantity: b.Quantity, Key: call.Key,
		Target: call.Target, Attempt: attempt, Start: a.Start, End: a.End,
		Status: a.Status, Code: a.Code, Replayed: a.Replayed,
	}
	if a.Err != nil {
		r.Err = a.Err.Error()
		r.Status = 0
	}
	if r.Code == CodeOutcomeUnknown {
		r.OrderNo = a.DoubtNo
	}
	if r.OK() {
		var o wire.Order
		if err := json.Unmarshal(a.Body, &o); err == nil {
			r.OrderNo, r.OrderQuantity, r.OrderUserID, r.OrderProduct = o.OrderNo, o.Quantity, o.UserID, o.ProductID
			r.OrderStatus, r.AmountCents = o.Status, o.AmountCents
		}
	}
	return r
}
