package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/httpapi/web"
	"github.com/seckill-lab/shop/internal/loadgen"
)

// The lab race is the demo page's flash sale: POST /api/v1/admin/lab/races
// starts N simulated buyers, each a distinct demo user, that send real HTTP
// requests to this instance's own listen address; GET .../races/{id} is its
// progress. The page polls it: a browser's EventSource cannot send the admin
// bearer token, and a token in a URL ends up in logs.

// MaxRaceBuyers bounds one lab race; more is 400 invalid_request.
const MaxRaceBuyers = 5000

const (
	maxRaceConcurrency = 500
	raceTimeout        = 10 * time.Minute
	raceSampleEvery    = 100 * time.Millisecond
	raceMaxSamples     = 1200 // then every other sample is dropped and the interval doubles
	racesKept          = 10
	raceBusyResends    = 4 // a buyer answered 503 busy sends again, this many times at most
	racePriceCents     = 990
)

// SelfURL is the base URL at which a server listening on addr reaches
// itself: an unspecified host (":8080") becomes the loopback address.
func SelfURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String()
	}
	ip := tcp.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port))
}

// raceSpec is one race as a racer runs it.
type raceSpec struct {
	baseURL     string
	adminToken  string
	productID   int64
	buyers      int
	concurrency int
}

// raceTally is what the buyers saw so far, as the racer last reported it.
type raceTally struct {
	sent, created, replayed, soldOut, busy, errors, buyersDone atomic.Int64
	racingSince                                                atomic.Pointer[time.Time] // nil while the buyers log in
}

// update takes a loadgen progress report.
func (t *raceTally) update(st loadgen.Stats) {
	o := st.ByOutcome
	created, replayed, soldOut, busy := o["201"], o["200 replay"], o["409 sold_out"], o["503 busy"]
	t.sent.Store(int64(st.Done))
	t.created.Store(int64(created))
	t.replayed.Store(int64(replayed))
	t.soldOut.Store(int64(soldOut))
	t.busy.Store(int64(busy))
	t.errors.Store(int64(st.Done - created - replayed - soldOut - busy))
	// busy answers and failures are resent; every other answer is final
	t.buyersDone.Store(int64(max(0, st.Done-busy-st.Errors)))
	since := time.Now().Add(-st.Elapsed)
	t.racingSince.CompareAndSwap(nil, &since)
}

// racer runs the buyers of one race and returns when each has its final
// answer or ctx ends.
type racer func(ctx context.Context, s raceSpec, t *raceTally) error

// loadgenRacer runs the buyers with internal/loadgen, the load-test
// harness's own race code: each buyer logs in through the demo login, then
// sends its seckill request, resent (same buyer) after 503 busy.
func loadgenRacer(ctx context.Context, s raceSpec, t *raceTally) error {
	_, err := loadgen.Race(ctx, loadgen.Config{
		BaseURLs: []string{s.baseURL}, AdminToken: s.adminToken, ProductID: s.productID,
		Users: s.buyers, Concurrency: s.concurrency, MaxResends: raceBusyResends,
		Progress: t.update, ProgressEvery: raceSampleEvery,
	})
	return err
}

// lab holds the races of this instance; they live in its memory only.
type lab struct {
	a          *api
	log        *slog.Logger
	bg         context.Context
	selfURL    func() string
	switches   []string
	racer      racer
	adminToken string

	mu      sync.Mutex
	races   map[string]*race
	order   []string // race ids, oldest first
	running string
}

func newLab(a *api, d Deps) *lab {
	bg := d.Background
	if bg == nil {
		bg = context.Background()
	}
	self := d.SelfURL
	if self == nil {
		self = func() string { return "" }
	}
	return &lab{a: a, log: d.Log, bg: bg, selfURL: self, switches: d.LabSwitches, racer: loadgenRacer, adminToken: d.AdminToken, races: map[string]*race{}}
}

// race is one race's state.
type race struct {
	id           string
	productID    int64
	buyers       int
	concurrency  int
	strategy     string
	initialStock int64
	startedAt    time.Time
	tally        raceTally

	mu         sync.Mutex
	stock      int64
	series     []racePoint
	every      time.Duration
	lastSample time.Time
	auditing   bool
	finishedAt *time.Time
	report     *audit.Report
	err        string
}

type racePoint struct {
	TMS     int64 `json:"t_ms"`
	Sent    int64 `json:"sent"`
	Created int64 `json:"created"`
	SoldOut int64 `json:"sold_out"`
	Busy    int64 `json:"busy"`
	Stock   int64 `json:"stock"`
}

// raceView is the progress of a race (API: GET /api/v1/admin/lab/races/{id}).
type raceView struct {
	RaceID        string        `json:"race_id"`
	Phase         string        `json:"phase"` // login, race, audit, done
	ProductID     int64         `json:"product_id"`
	Buyers        int           `json:"buyers"`
	Concurrency   int           `json:"concurrency"`
	StockStrategy string        `json:"stock_strategy"`
	InitialStock  int64         `json:"initial_stock"`
	StartedAt     string        `json:"started_at"`
	FinishedAt    *string       `json:"finished_at"`
	ElapsedMS     int64         `json:"elapsed_ms"`
	Sent          int64         `json:"sent"`
	Created       int64         `json:"created"`
	Replayed      int64         `json:"replayed"`
	SoldOut       int64         `json:"sold_out"`
	Busy          int64         `json:"busy"`
	Errors        int64         `json:"errors"`
	BuyersDone    int64         `json:"buyers_done"`
	Stock         int64         `json:"stock"`
	Oversold      int64         `json:"oversold"`
	Done          bool          `json:"done"`
	Audit         *audit.Report `json:"audit"`
	Error         *string       `json:"error"`
	Series        []racePoint   `json:"series"`
}

func (r *race) view() raceView {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := time.Now()
	var fin *string
	if r.finishedAt != nil {
		end = *r.finishedAt
		fin = tsPtr(r.finishedAt)
	}
	v := raceView{
		RaceID: r.id, ProductID: r.productID, Buyers: r.buyers, Concurrency: r.concurrency,
		StockStrategy: r.strategy, InitialStock: r.initialStock, StartedAt: ts(r.startedAt), FinishedAt: fin,
		ElapsedMS: end.Sub(r.startedAt).Milliseconds(),
		Sent:      r.tally.sent.Load(), Created: r.tally.created.Load(), Replayed: r.tally.replayed.Load(),
		SoldOut: r.tally.soldOut.Load(), Busy: r.tally.busy.Load(), Errors: r.tally.errors.Load(),
		BuyersDone: r.tally.buyersDone.Load(), Stock: r.stock, Done: r.finishedAt != nil, Audit: r.report,
		Series: append([]racePoint{}, r.series...),
	}
	v.Oversold = max(0, v.Created-r.initialStock)
	switch {
	case v.Done:
		v.Phase = "done"
	case r.auditing:
		v.Phase = "audit"
	case r.tally.racingSince.Load() == nil:
		v.Phase = "login"
	default:
		v.Phase = "race"
	}
	if r.err != "" {
		v.Error = &r.err
	}
	return v
}

// sample records the counters and the product's stock, thinning the series
// so a long race keeps a bounded one.
func (r *race) sample(ctx context.Context, a *api, force bool) {
	now := time.Now()
	since := r.tally.racingSince.Load()
	r.mu.Lock()
	due := force || (since != nil && now.Sub(r.lastSample) >= r.every)
	r.mu.Unlock()
	if !due {
		return
	}
	t0 := now
	if since != nil {
		t0 = *since
	}
	p, err := a.products.Get(ctx, r.productID)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.stock = p.Stock
	}
	r.lastSample = now
	r.series = append(r.series, racePoint{
		TMS: max(0, now.Sub(t0).Milliseconds()), Sent: r.tally.sent.Load(), Created: r.tally.created.Load(),
		SoldOut: r.tally.soldOut.Load(), Busy: r.tally.busy.Load(), Stock: r.stock,
	})
	if len(r.series) >= raceMaxSamples {
		kept := r.series[:0]
		for i, s := range r.series {
			if i%2 == 0 || i == len(r.series)-1 {
				kept = append(kept, s)
			}
		}
		r.series = kept
		r.every *= 2
	}
}

type raceRequest struct {
	ProductID   *int64 `json:"product_id"`
	Stock       *int64 `json:"stock"`
	Buyers      *int   `json:"buyers"`
	Concurrency *int   `json:"concurrency"`
}

func (r raceRequest) validate() map[string]string {
	f := map[string]string{}
	switch {
	case r.Buyers == nil:
		f["buyers"] = "required"
	case *r.Buyers < 1 || *r.Buyers > MaxRaceBuyers:
		f["buyers"] = fmt.Sprintf("must be between 1 and %d", MaxRaceBuyers)
	}
	switch {
	case r.ProductID == nil && r.Stock == nil:
		f["stock"] = "required when product_id is absent (the race then sells a new product)"
	case r.ProductID != nil && r.Stock != nil:
		f["stock"] = "give product_id (race an existing product) or stock (race a new one), not both"
	case r.ProductID != nil && (*r.ProductID <= 0 || *r.ProductID >= maxID):
		f["product_id"] = "must be a positive integer"
	case r.Stock != nil && (*r.Stock < 1 || *r.Stock > 1_000_000):
		f["stock"] = "must be between 1 and 1000000"
	}
	if r.Concurrency != nil && (*r.Concurrency < 1 || *r.Concurrency > maxRaceConcurrency) {
		f["concurrency"] = fmt.Sprintf("must be between 1 and %d", maxRaceConcurrency)
	}
	return f
}

func (l *lab) info(c *gin.Context) {
	l.mu.Lock()
	var running *string
	if l.running != "" {
		id := l.running
		running = &id
	}
	l.mu.Unlock()
	strategy := l.a.products.Strategy()
	writeJSON(c, http.StatusOK, gin.H{
		"stock_strategy": strategy, "safe": len(l.switches) == 0, "lab_switches": append([]string{}, l.switches...),
		"max_buyers": MaxRaceBuyers, "max_concurrency": maxRaceConcurrency, "self_url": l.selfURL(), "running_race": running,
	})
}

func (l *lab) startRace(c *gin.Context) {
	var req raceRequest
	if err := decode(c, &req, false); err != nil {
		writeError(c, err)
		return
	}
	if !l.a.demoLogin {
		writeError(c, newError("not_found", "a lab race logs its buyers in with the demo login, which is off (SHOP_DEMO_LOGIN=false)"))
		return
	}
	base := l.selfURL()
	if base == "" {
		writeError(c, newError("internal", "the lab does not know this instance's listen address"))
		return
	}
	id := "r" + strconv.FormatUint(rand.Uint64()>>16, 36)
	l.mu.Lock()
	if l.running != "" {
		running := l.running
		l.mu.Unlock()
		writeError(c, newError("busy", "lab race "+running+" is still running; one race at a time per instance"))
		return
	}
	l.running = id
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		l.running = ""
		l.mu.Unlock()
	}

	ctx := c.Request.Context()
	var stock int64
	var productID int64
	if req.ProductID != nil {
		p, err := l.a.products.Get(ctx, *req.ProductID)
		if err != nil {
			release()
			writeError(c, err)
			return
		}
		productID, stock = p.ID, p.Stock
	} else {
		p, _, err := l.a.products.Create(ctx, "Flash sale "+id, racePriceCents, *req.Stock, "", "")
		if err != nil {
			release()
			writeError(c, err)
			return
		}
		productID, stock = p.ID, p.Stock
	}
	conc := min(100, *req.Buyers)
	if req.Concurrency != nil {
		conc = min(*req.Concurrency, *req.Buyers)
	}
	r := &race{
		id: id, productID: productID, buyers: *req.Buyers, concurrency: conc, strategy: l.a.products.Strategy(),
		initialStock: stock, startedAt: time.Now().UTC(), stock: stock, every: raceSampleEvery,
	}
	l.mu.Lock()
	l.races[id] = r
	l.order = append(l.order, id)
	for len(l.order) > racesKept {
		delete(l.races, l.order[0])
		l.order = l.order[1:]
	}
	l.mu.Unlock()

	spec := raceSpec{baseURL: base, adminToken: l.adminToken, productID: productID, buyers: r.buyers, concurrency: conc}
	logger(c).Info("lab race started", "race_id", id, "product_id", productID, "buyers", r.buyers,
		"concurrency", conc, "stock", stock, "stock_strategy", r.strategy, "target", base)
	go l.run(r, spec, release)

	v := r.view()
	c.Header("Location", "/api/v1/admin/lab/races/"+id)
	writeJSON(c, http.StatusAccepted, v)
}

// run drives the race, samples it while it runs, then audits its product.
func (l *lab) run(r *race, spec raceSpec, release func()) {
	defer release()
	ctx, cancel := context.WithTimeout(l.bg, raceTimeout)
	defer cancel()
	r.sample(ctx, l.a, true)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(raceSampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				r.sample(ctx, l.a, false)
			}
		}
	}()
	raceErr := l.racer(ctx, spec, &r.tally)
	close(stop)
	<-sampled
	if raceErr == nil {
		r.tally.buyersDone.Store(int64(r.buyers))
	}
	r.sample(ctx, l.a, true)
	r.mu.Lock()
	r.auditing = true
	r.mu.Unlock()
	rep, auditErr := l.a.audit(ctx, audit.Options{ProductID: r.productID})

	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now().UTC()
	r.finishedAt = &now
	switch {
	case raceErr != nil:
		r.err = "race stopped: " + raceErr.Error()
	case auditErr != nil:
		r.err = "audit failed: " + auditErr.Error()
	}
	if auditErr == nil {
		r.report = &rep
	}
	l.log.Info("lab race finished", "race_id", r.id, "product_id", r.productID, "created", r.tally.created.Load(),
		"sold_out", r.tally.soldOut.Load(), "busy", r.tally.busy.Load(), "errors", r.tally.errors.Load(),
		"stock", r.stock, "audit_ok", auditErr == nil && rep.OK, "err", r.err)
}

func (l *lab) raceProgress(c *gin.Context) {
	l.mu.Lock()
	r := l.races[c.Param("race_id")]
	l.mu.Unlock()
	if r == nil {
		writeError(c, newError("not_found", "no such race in this instance (races live in the instance that ran them; the last "+strconv.Itoa(racesKept)+" are kept)"))
		return
	}
	writeJSON(c, http.StatusOK, r.view())
}

// demoPage serves the embedded demo page and its assets; an unknown asset is
// the API's 404 problem.
func demoPage() gin.HandlerFunc {
	return func(c *gin.Context) {
		notFound := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			writeError(c, newError("not_found", "no route "+c.Request.URL.Path))
		})
		web.Handler(notFound).ServeHTTP(c.Writer, c.Request)
	}
}
