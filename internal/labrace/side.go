package labrace

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/internal/wire"
)

// A race has one or two sides. Each side sells its own product by its own
// stock strategy to its own buyers, all at once, so the operator sees the
// same load against the safe strategy and an unsafe one side by side.

// Spec is one side as a Racer runs it.
type Spec struct {
	BaseURL     string
	AdminToken  string
	ProductID   int64
	Buyers      int
	Concurrency int
}

// Tally is what the buyers saw so far, as the racer last reported it.
type Tally struct {
	sent, created, replayed, soldOut, busy, errors, buyersDone atomic.Int64
	racingSince                                                atomic.Pointer[time.Time] // nil while the buyers log in
}

// Update takes a loadgen progress report.
func (t *Tally) Update(st loadgen.Stats) {
	a := st.Answers
	t.sent.Store(int64(st.Done))
	t.created.Store(int64(a.Created))
	t.replayed.Store(int64(a.Replayed))
	t.soldOut.Store(int64(a.SoldOut))
	t.busy.Store(int64(a.Busy))
	t.errors.Store(int64(st.Done - a.Created - a.Replayed - a.SoldOut - a.Busy))
	// busy answers and failures are resent; every other answer is final
	t.buyersDone.Store(int64(max(0, st.Done-a.Busy-st.Errors)))
	since := time.Now().Add(-st.Elapsed)
	t.racingSince.CompareAndSwap(nil, &since)
}

// Racer runs the buyers of one side, reporting to t, and returns when each
// has its final answer or ctx ends.
type Racer func(ctx context.Context, s Spec, t *Tally) error

// loadgenRacer runs the buyers with internal/loadgen, the load-test
// harness's own race code: each buyer logs in through the demo login, then
// sends its seckill request, resent (same buyer) after 503 busy.
func loadgenRacer(ctx context.Context, s Spec, t *Tally) error {
	_, err := loadgen.Race(ctx, loadgen.Config{
		BaseURLs: []string{s.BaseURL}, AdminToken: s.AdminToken, ProductID: s.ProductID,
		Users: s.Buyers, Concurrency: s.Concurrency, MaxResends: busyResends,
		Progress: t.Update, ProgressEvery: sampleEvery,
	})
	return err
}

// race is one race's state.
type race struct {
	id          string
	buyers      int
	concurrency int
	startedAt   time.Time
	sides       []*side

	mu         sync.Mutex
	finishedAt *time.Time
	err        string
}

// side is one product, one strategy and its buyers.
type side struct {
	productID    int64
	strategy     string
	initialStock int64
	tally        Tally

	// sampling keeps one sample at a time: the ticker's and the final one
	// may overlap, and an older snapshot must never land after a newer one.
	sampling sync.Mutex

	mu         sync.Mutex
	snap       snapshot // the figures the page shows, all from one sample
	series     []Point
	every      time.Duration
	lastSample time.Time
	raced      bool // the buyers have their answers (or gave up)
	report     *audit.Report
}

// snapshot is one sample of a side: the buyers' counters, read first, then
// the product's stock. A 201 reaches a buyer only after its order
// committed, so under a safe strategy created + stock never exceeds the
// units on sale in one snapshot; mixing a live counter with an older stock
// reading could show more.
type snapshot struct {
	sent, created, replayed, soldOut, busy, errors, buyersDone, stock int64
}

// Point is one sample of a side's series.
type Point struct {
	TMS     int64 `json:"t_ms"`
	Sent    int64 `json:"sent"`
	Created int64 `json:"created"`
	SoldOut int64 `json:"sold_out"`
	Busy    int64 `json:"busy"`
	Stock   int64 `json:"stock"`
}

// SideView is one side's progress. Oversold is audit.ProductSummary's
// Oversold once the audit ran, and orders beyond the initial stock before.
type SideView struct {
	ProductID     int64         `json:"product_id"`
	StockStrategy string        `json:"stock_strategy"`
	Safe          bool          `json:"safe"`
	Phase         string        `json:"phase"` // login, race, audit, done
	InitialStock  int64         `json:"initial_stock"`
	Sent          int64         `json:"sent"`
	Created       int64         `json:"created"`
	Replayed      int64         `json:"replayed"`
	SoldOut       int64         `json:"sold_out"`
	Busy          int64         `json:"busy"`
	Errors        int64         `json:"errors"`
	BuyersDone    int64         `json:"buyers_done"`
	Stock         int64         `json:"stock"`
	Oversold      int64         `json:"oversold"`
	Audit         *audit.Report `json:"audit"`
	Series        []Point       `json:"series"`
}

// View is the progress of a race (API: GET /api/v1/admin/lab/races/{id}).
// The first side's figures are also at the top level, so a client of a
// one-sided race reads it as a single sale.
type View struct {
	RaceID      string  `json:"race_id"`
	Buyers      int     `json:"buyers"`
	Concurrency int     `json:"concurrency"`
	StartedAt   string  `json:"started_at"`
	FinishedAt  *string `json:"finished_at"`
	ElapsedMS   int64   `json:"elapsed_ms"`
	Done        bool    `json:"done"`
	Error       *string `json:"error"`
	SideView
	Sides []SideView `json:"sides"`
}

func (r *race) view() View {
	r.mu.Lock()
	end := time.Now()
	v := View{RaceID: r.id, Buyers: r.buyers, Concurrency: r.concurrency, StartedAt: r.startedAt.UTC().Format(wire.TimeFormat)}
	if r.finishedAt != nil {
		end = *r.finishedAt
		at := r.finishedAt.UTC().Format(wire.TimeFormat)
		v.FinishedAt, v.Done = &at, true
	}
	if r.err != "" {
		e := r.err
		v.Error = &e
	}
	r.mu.Unlock()
	v.ElapsedMS = end.Sub(r.startedAt).Milliseconds()
	for _, s := range r.sides {
		v.Sides = append(v.Sides, s.view(v.Done))
	}
	v.SideView = v.Sides[0]
	// The race is as far as its slowest side.
	for _, s := range v.Sides {
		if phaseRank[s.Phase] < phaseRank[v.Phase] {
			v.Phase = s.Phase
		}
	}
	return v
}

var phaseRank = map[string]int{"login": 0, "race": 1, "audit": 2, "done": 3}

func (s *side) view(done bool) SideView {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.snap
	v := SideView{
		ProductID: s.productID, StockStrategy: s.strategy, Safe: s.strategy == inventory.LockFence, InitialStock: s.initialStock,
		Sent: n.sent, Created: n.created, Replayed: n.replayed, SoldOut: n.soldOut, Busy: n.busy, Errors: n.errors,
		BuyersDone: n.buyersDone, Stock: n.stock, Oversold: max(0, n.created-s.initialStock), Audit: s.report,
		Series: append([]Point{}, s.series...),
	}
	if s.report != nil {
		for _, p := range s.report.Products {
			if p.ProductID == s.productID {
				v.Oversold = p.Oversold()
			}
		}
	}
	switch {
	case done || s.report != nil:
		v.Phase = "done"
	case s.raced:
		v.Phase = "audit"
	case s.tally.racingSince.Load() == nil:
		v.Phase = "login"
	default:
		v.Phase = "race"
	}
	return v
}

// sampleWhen says whether sample waits for its interval.
type sampleWhen bool

const (
	whenDue sampleWhen = false // only once the interval has passed (and the buyers race)
	atOnce  sampleWhen = true  // at once: the last sample of a side
)

// sample takes a snapshot (counters first, then the stock) and records it,
// thinning the series so a long race keeps a bounded one.
func (s *side) sample(ctx context.Context, products Stock, when sampleWhen) {
	s.sampling.Lock()
	defer s.sampling.Unlock()
	at := time.Now()
	since := s.tally.racingSince.Load()
	s.mu.Lock()
	due := when == atOnce || (since != nil && at.Sub(s.lastSample) >= s.every)
	stock := s.snap.stock
	s.mu.Unlock()
	if !due {
		return
	}
	t := &s.tally
	n := snapshot{
		sent: t.sent.Load(), created: t.created.Load(), replayed: t.replayed.Load(), soldOut: t.soldOut.Load(),
		busy: t.busy.Load(), errors: t.errors.Load(), buyersDone: t.buyersDone.Load(), stock: stock,
	}
	p, err := products.Get(ctx, s.productID)
	if err != nil {
		return // keep the last snapshot whole rather than pair new counters with an old stock
	}
	n.stock = p.Stock
	t0 := at
	if since != nil {
		t0 = *since
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snap, s.lastSample = n, at
	if len(s.series) == 0 && since != nil {
		// The chart starts where the sale did: nothing sold, every unit on sale.
		s.series = append(s.series, Point{Stock: s.initialStock})
	}
	s.series = append(s.series, Point{TMS: max(0, at.Sub(t0).Milliseconds()), Sent: n.sent, Created: n.created,
		SoldOut: n.soldOut, Busy: n.busy, Stock: n.stock})
	if len(s.series) >= maxSamples {
		kept := s.series[:0]
		for i, p := range s.series {
			if i%2 == 0 || i == len(s.series)-1 {
				kept = append(kept, p)
			}
		}
		s.series = kept
		s.every *= 2
	}
}
