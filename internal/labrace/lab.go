// Package labrace runs the demo page's lab races: simulated buyers (the
// load generator, internal/loadgen) that race for one or two products of
// this instance through its own HTTP address, sampled while they run and
// audited at the end. It owns a race's lifecycle and keeps the last races
// in memory; httpapi only decodes requests and encodes the views.
package labrace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/inventory"
)

// MaxBuyers bounds one race; MaxConcurrency bounds its buyers in flight.
const (
	MaxBuyers      = 5000
	MaxConcurrency = 500
)

const (
	raceTimeout     = 10 * time.Minute
	sampleEvery     = 100 * time.Millisecond
	maxSamples      = 1200 // then every other sample is dropped and the interval doubles
	racesKept       = 10
	busyResends     = 6 // a buyer answered 503 busy sends again, this many times at most (4 left one buyer in 200 undecided in chapter 5's pause blocks on a loaded machine)
	racePriceCents  = 990
	defaultParallel = 100
)

// ProductPrefix starts the name of every product a race creates, so the
// demo page can keep race products out of the shopper's list (app.js
// filters on the same prefix; httpapi's TestDemoPage checks they agree).
const ProductPrefix = "Lab race "

// Strategies are the stock strategies a race side may use, in the order
// the page offers them.
var Strategies = []string{inventory.LockFence, inventory.Naive, inventory.Lock, inventory.LockConditional, inventory.Conditional, inventory.RedisGate}

// Stock is what a race needs of the inventory service.
type Stock interface {
	Get(ctx context.Context, id int64) (inventory.Product, error)
	CreateLab(ctx context.Context, name string, priceCents, stock int64, strategy string) (inventory.Product, error)
	Strategy() string
	UseStrategy(productID int64, name string)
}

// Auditor audits the database (for one product, after its race).
type Auditor func(ctx context.Context, o audit.Options) (audit.Report, error)

// Config is what a Lab works with.
type Config struct {
	Stock Stock
	Audit Auditor
	Log   *slog.Logger
	// Background outlives requests: races run under it (default Background).
	Background context.Context
	// SelfURL is this instance's own base URL, known once it listens.
	SelfURL func() string
	// Switches are the lab switches on in this instance (unsafe settings).
	Switches   []string
	AdminToken string
	// Racer runs one side's buyers; nil runs them with internal/loadgen.
	Racer Racer
}

// Lab holds the races of this instance; they live in its memory only, the
// last ten of them, one running at a time.
type Lab struct {
	cfg Config

	mu      sync.Mutex
	races   map[string]*race
	order   []string // race ids, oldest first
	running string
}

// New makes the lab of one instance.
func New(cfg Config) *Lab {
	if cfg.Background == nil {
		cfg.Background = context.Background()
	}
	if cfg.SelfURL == nil {
		cfg.SelfURL = func() string { return "" }
	}
	if cfg.Racer == nil {
		cfg.Racer = loadgenRacer
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Lab{cfg: cfg, races: map[string]*race{}}
}

// Request is a race as asked for, already validated: an existing product
// (ProductID), or Stock units of a new product per strategy.
type Request struct {
	ProductID   *int64
	Stock       *int64
	Buyers      int
	Concurrency *int     // default min(100, Buyers)
	Strategies  []string // default the instance's strategy
}

// BusyError: another race is running in this instance.
type BusyError struct{ Running string }

func (e *BusyError) Error() string {
	return "lab race " + e.Running + " is still running; one race at a time per instance"
}

// ErrNoSelfURL: the lab does not know where this instance listens.
var ErrNoSelfURL = errors.New("the lab does not know this instance's listen address")

// Start makes the race's products and starts its buyers; it returns the
// race's first view at once. log is the request's logger.
func (l *Lab) Start(ctx context.Context, log *slog.Logger, req Request) (View, error) {
	base := l.cfg.SelfURL()
	if base == "" {
		return View{}, ErrNoSelfURL
	}
	id := "r" + strconv.FormatUint(rand.Uint64()>>16, 36)
	l.mu.Lock()
	if l.running != "" {
		running := l.running
		l.mu.Unlock()
		return View{}, &BusyError{Running: running}
	}
	l.running = id
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		l.running = ""
		l.mu.Unlock()
	}

	sides, err := l.newSides(ctx, id, req)
	if err != nil {
		release()
		return View{}, err
	}
	conc := min(defaultParallel, req.Buyers)
	if req.Concurrency != nil {
		conc = min(*req.Concurrency, req.Buyers)
	}
	r := &race{id: id, buyers: req.Buyers, concurrency: conc, startedAt: time.Now().UTC(), sides: sides}
	l.mu.Lock()
	l.races[id] = r
	l.order = append(l.order, id)
	for len(l.order) > racesKept {
		delete(l.races, l.order[0])
		l.order = l.order[1:]
	}
	l.mu.Unlock()

	for _, s := range sides {
		log.Info("lab race started", "race_id", id, "product_id", s.productID, "buyers", r.buyers,
			"concurrency", conc, "stock", s.initialStock, "stock_strategy", s.strategy, "target", base)
	}
	go l.run(r, base, release)
	return r.view(), nil
}

// Get is a race's progress, while this instance keeps it.
func (l *Lab) Get(id string) (View, bool) {
	l.mu.Lock()
	r := l.races[id]
	l.mu.Unlock()
	if r == nil {
		return View{}, false
	}
	return r.view(), true
}

// Kept is how many races an instance keeps.
const Kept = racesKept

// Info is what the page needs to offer a race in this instance. (Fields in
// name order, as the body has always been written.)
type Info struct {
	LabProductPrefix string         `json:"lab_product_prefix"`
	LabSwitches      []string       `json:"lab_switches"`
	MaxBuyers        int            `json:"max_buyers"`
	MaxConcurrency   int            `json:"max_concurrency"`
	RaceStrategies   []StrategyInfo `json:"race_strategies"`
	RunningRace      *string        `json:"running_race"`
	Safe             bool           `json:"safe"`
	SelfURL          string         `json:"self_url"`
	StockStrategy    string         `json:"stock_strategy"`
}

// StrategyInfo says how a strategy behaves in this instance.
type StrategyInfo struct {
	Name      string `json:"name"`
	Oversells bool   `json:"oversells"` // can oversell in this instance as it runs now
	Note      string `json:"note"`
}

// Info describes the lab of this instance.
func (l *Lab) Info() Info {
	l.mu.Lock()
	var running *string
	if l.running != "" {
		id := l.running
		running = &id
	}
	l.mu.Unlock()
	return Info{
		StockStrategy: l.cfg.Stock.Strategy(), Safe: len(l.cfg.Switches) == 0, LabSwitches: append([]string{}, l.cfg.Switches...),
		RaceStrategies: l.strategies(), LabProductPrefix: ProductPrefix,
		MaxBuyers: MaxBuyers, MaxConcurrency: MaxConcurrency, SelfURL: l.cfg.SelfURL(), RunningRace: running,
	}
}

// paused says whether the lab pause (a lock holder paused past its TTL) is
// on in this instance: without it the plain lock strategy never oversells.
func (l *Lab) paused() bool {
	for _, s := range l.cfg.Switches {
		if strings.HasPrefix(s, "lab-pause-after-lock") {
			return true
		}
	}
	return false
}

// strategies describes each race strategy as it behaves in this instance.
func (l *Lab) strategies() []StrategyInfo {
	lockNote := "a lock without a fencing token: safe until a holder outlives its lease; this instance runs without the lab pause (--lab-pause-after-lock), so it will not oversell here"
	if l.paused() {
		lockNote = "a lock without a fencing token: the lab pause is on, so a holder paused past its TTL writes after the next holder and oversells"
	}
	notes := map[string]string{
		inventory.LockFence:       "the safe default: a Redis lock per product, and a fencing token the database checks",
		inventory.Naive:           "read the stock, then write it back, with no lock: concurrent buyers overwrite each other and it oversells under any real load",
		inventory.Lock:            lockNote,
		inventory.LockConditional: "the lock and lock-fence's conditional UPDATE (stock >= quantity), without the fence: a holder paused past its TTL still writes, yet it does not oversell, since the UPDATE checks the stock itself",
		inventory.Conditional:     "no lock, one guarded UPDATE (stock >= quantity) decides: it does not oversell, but nothing keeps buyers in line",
		inventory.RedisGate:       "a Redis counter admits at most the units left, then the lock + fence path decides: it does not oversell",
	}
	out := make([]StrategyInfo, 0, len(Strategies))
	for _, name := range Strategies {
		out = append(out, StrategyInfo{Name: name, Note: notes[name],
			Oversells: name == inventory.Naive || (name == inventory.Lock && l.paused())})
	}
	return out
}

// newSides makes the products of a race: the one asked for, or one new
// product per strategy, each switched to its strategy in this instance and
// marked as a lab product (the shop-wide audit reports it apart; a product
// asked for by id stays one of the shop's own).
func (l *Lab) newSides(ctx context.Context, id string, req Request) ([]*side, error) {
	st := l.cfg.Stock
	if req.ProductID != nil {
		p, err := st.Get(ctx, *req.ProductID)
		if err != nil {
			return nil, err
		}
		return []*side{newSide(p, st.Strategy())}, nil
	}
	names := req.Strategies
	if names == nil {
		names = []string{st.Strategy()}
	}
	var sides []*side
	for _, name := range names {
		p, err := st.CreateLab(ctx, ProductPrefix+id+" · "+name, racePriceCents, *req.Stock, name)
		if err != nil {
			return nil, err
		}
		if name != st.Strategy() {
			st.UseStrategy(p.ID, name)
		}
		sides = append(sides, newSide(p, name))
	}
	return sides, nil
}

func newSide(p inventory.Product, strategy string) *side {
	return &side{productID: p.ID, strategy: strategy, initialStock: p.Stock, snap: snapshot{stock: p.Stock}, every: sampleEvery}
}

// run drives every side at once, samples them while they run, audits each
// side's product once its buyers are done, and then ends the race.
func (l *Lab) run(r *race, base string, release func()) {
	defer release()
	ctx, cancel := context.WithTimeout(l.cfg.Background, raceTimeout)
	defer cancel()
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				for _, s := range r.sides {
					s.sample(ctx, l.cfg.Stock, whenDue)
				}
			}
		}
	}()
	errs := make([]error, len(r.sides))
	var wg sync.WaitGroup
	for i, s := range r.sides {
		wg.Go(func() {
			errs[i] = l.runSide(ctx, r, s, base)
		})
	}
	wg.Wait()
	close(stop)
	<-sampled

	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now().UTC()
	r.finishedAt = &now
	if err := errors.Join(errs...); err != nil {
		r.err = err.Error()
	}
	l.cfg.Log.Info("lab race finished", "race_id", r.id, "err", r.err)
}

// runSide races one side, takes its last snapshot and audits its product.
func (l *Lab) runSide(ctx context.Context, r *race, s *side, base string) error {
	if s.strategy != l.cfg.Stock.Strategy() {
		defer l.cfg.Stock.UseStrategy(s.productID, "")
	}
	spec := Spec{BaseURL: base, AdminToken: l.cfg.AdminToken, ProductID: s.productID, Buyers: r.buyers, Concurrency: r.concurrency}
	raceErr := l.cfg.Racer(ctx, spec, &s.tally)
	if raceErr == nil {
		s.tally.buyersDone.Store(int64(r.buyers))
	}
	s.sample(ctx, l.cfg.Stock, atOnce)
	s.mu.Lock()
	s.raced = true
	s.mu.Unlock()
	rep, auditErr := l.cfg.Audit(ctx, audit.Options{ProductID: s.productID})
	if auditErr == nil {
		s.mu.Lock()
		s.report = &rep
		s.mu.Unlock()
	}
	l.cfg.Log.Info("lab race side finished", "race_id", r.id, "product_id", s.productID, "stock_strategy", s.strategy,
		"created", s.tally.created.Load(), "sold_out", s.tally.soldOut.Load(), "busy", s.tally.busy.Load(),
		"errors", s.tally.errors.Load(), "audit_ok", auditErr == nil && rep.OK)
	switch {
	case raceErr != nil:
		return fmt.Errorf("%s side: race stopped: %w", s.strategy, raceErr)
	case auditErr != nil:
		return fmt.Errorf("%s side: audit failed: %w", s.strategy, auditErr)
	}
	return nil
}
