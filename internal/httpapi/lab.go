package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/httpapi/web"
	"github.com/seckill-lab/shop/internal/inventory"
)

// The lab race is the demo page's flash sale: POST /api/v1/admin/lab/races
// starts N simulated buyers, each a distinct demo user, that send real HTTP
// requests to this instance's own listen address; GET .../races/{id} is its
// progress. A race with two strategies runs two sides at once (labrace.go). The page polls it: a browser's EventSource cannot send the admin
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

// labProductPrefix starts the name of every product a lab race creates, so
// the demo page can keep race products out of the shopper's list (app.js
// filters on the same prefix; TestDemoPage checks they agree).
const labProductPrefix = "Lab race "

// raceStrategies are the stock strategies a race side may use, in the order
// the page offers them.
var raceStrategies = []string{inventory.LockFence, inventory.Naive, inventory.Lock, inventory.Conditional, inventory.RedisGate}

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

// labPaused says whether the lab pause (a lock holder paused past its TTL)
// is on in this instance: without it the plain lock strategy never oversells.
func (l *lab) labPaused() bool {
	for _, s := range l.switches {
		if strings.HasPrefix(s, "lab-pause-after-lock") {
			return true
		}
	}
	return false
}

type raceStrategy struct {
	Name      string `json:"name"`
	Oversells bool   `json:"oversells"` // can oversell in this instance as it runs now
	Note      string `json:"note"`
}

// strategies describes each race strategy as it behaves in this instance.
func (l *lab) strategies() []raceStrategy {
	lockNote := "a lock without a fencing token: safe until a holder outlives its lease; this instance runs without the lab pause (--lab-pause-after-lock), so it will not oversell here"
	if l.labPaused() {
		lockNote = "a lock without a fencing token: the lab pause is on, so a holder paused past its TTL writes after the next holder and oversells"
	}
	notes := map[string]string{
		inventory.LockFence:   "the safe default: a Redis lock per product, and a fencing token the database checks",
		inventory.Naive:       "read the stock, then write it back, with no lock: concurrent buyers overwrite each other and it oversells under any real load",
		inventory.Lock:        lockNote,
		inventory.Conditional: "no lock, one guarded UPDATE (stock >= quantity) decides: it does not oversell, but nothing keeps buyers in line",
		inventory.RedisGate:   "a Redis counter admits at most the units left, then the lock + fence path decides: it does not oversell",
	}
	out := make([]raceStrategy, 0, len(raceStrategies))
	for _, name := range raceStrategies {
		out = append(out, raceStrategy{Name: name, Note: notes[name],
			Oversells: name == inventory.Naive || (name == inventory.Lock && l.labPaused())})
	}
	return out
}

type raceRequest struct {
	ProductID   *int64   `json:"product_id"`
	Stock       *int64   `json:"stock"`
	Buyers      *int     `json:"buyers"`
	Concurrency *int     `json:"concurrency"`
	Strategies  []string `json:"strategies"`
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
	switch {
	case r.Strategies == nil:
	case len(r.Strategies) < 1 || len(r.Strategies) > 2:
		f["strategies"] = "one or two stock strategies, one per side of the race"
	case r.ProductID != nil:
		f["strategies"] = "each side races a new product of its own: leave product_id out"
	default:
		for _, s := range r.Strategies {
			if !slices.Contains(raceStrategies, s) {
				f["strategies"] = "each must be one of " + strings.Join(raceStrategies, ", ")
			}
		}
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
	writeJSON(c, http.StatusOK, gin.H{
		"stock_strategy": l.a.products.Strategy(), "safe": len(l.switches) == 0, "lab_switches": append([]string{}, l.switches...),
		"race_strategies": l.strategies(), "lab_product_prefix": labProductPrefix,
		"max_buyers": MaxRaceBuyers, "max_concurrency": maxRaceConcurrency, "self_url": l.selfURL(), "running_race": running,
	})
}

func (l *lab) startRace(c *gin.Context) {
	var req raceRequest
	if err := decode(c, &req, bodyRequired); err != nil {
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

	sides, err := l.newSides(c.Request.Context(), id, req)
	if err != nil {
		release()
		writeError(c, err)
		return
	}
	conc := min(100, *req.Buyers)
	if req.Concurrency != nil {
		conc = min(*req.Concurrency, *req.Buyers)
	}
	r := &race{id: id, buyers: *req.Buyers, concurrency: conc, startedAt: time.Now().UTC(), sides: sides}
	l.mu.Lock()
	l.races[id] = r
	l.order = append(l.order, id)
	for len(l.order) > racesKept {
		delete(l.races, l.order[0])
		l.order = l.order[1:]
	}
	l.mu.Unlock()

	for _, s := range sides {
		logger(c).Info("lab race started", "race_id", id, "product_id", s.productID, "buyers", r.buyers,
			"concurrency", conc, "stock", s.initialStock, "stock_strategy", s.strategy, "target", base)
	}
	go l.run(r, base, release)

	c.Header("Location", "/api/v1/admin/lab/races/"+id)
	writeJSON(c, http.StatusAccepted, r.view())
}

// newSides makes the products of a race: the one asked for, or one new
// product per strategy, each switched to its strategy in this instance.
func (l *lab) newSides(ctx context.Context, id string, req raceRequest) ([]*raceSide, error) {
	if req.ProductID != nil {
		p, err := l.a.products.Get(ctx, *req.ProductID)
		if err != nil {
			return nil, err
		}
		return []*raceSide{l.newSide(p, l.a.products.Strategy())}, nil
	}
	names := req.Strategies
	if names == nil {
		names = []string{l.a.products.Strategy()}
	}
	var sides []*raceSide
	for _, name := range names {
		p, _, err := l.a.products.Create(ctx, labProductPrefix+id+" · "+name, racePriceCents, *req.Stock, "", "")
		if err != nil {
			return nil, err
		}
		if name != l.a.products.Strategy() {
			l.a.products.UseStrategy(p.ID, name)
		}
		sides = append(sides, l.newSide(p, name))
	}
	return sides, nil
}

func (l *lab) newSide(p inventory.Product, strategy string) *raceSide {
	return &raceSide{productID: p.ID, strategy: strategy, initialStock: p.Stock, snap: raceSnapshot{stock: p.Stock}, every: raceSampleEvery}
}

// run drives every side at once, samples them while they run, audits each
// side's product once its buyers are done, and then ends the race.
func (l *lab) run(r *race, base string, release func()) {
	defer release()
	ctx, cancel := context.WithTimeout(l.bg, raceTimeout)
	defer cancel()
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
				for _, s := range r.sides {
					s.sample(ctx, l.a.products, false)
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
	l.log.Info("lab race finished", "race_id", r.id, "err", r.err)
}

// runSide races one side, takes its last snapshot and audits its product.
func (l *lab) runSide(ctx context.Context, r *race, s *raceSide, base string) error {
	if s.strategy != l.a.products.Strategy() {
		defer l.a.products.UseStrategy(s.productID, "")
	}
	spec := raceSpec{baseURL: base, adminToken: l.adminToken, productID: s.productID, buyers: r.buyers, concurrency: r.concurrency}
	raceErr := l.racer(ctx, spec, &s.tally)
	if raceErr == nil {
		s.tally.buyersDone.Store(int64(r.buyers))
	}
	s.sample(ctx, l.a.products, true)
	s.mu.Lock()
	s.raced = true
	s.mu.Unlock()
	rep, auditErr := l.a.audit(ctx, audit.Options{ProductID: s.productID})
	if auditErr == nil {
		s.mu.Lock()
		s.report = &rep
		s.mu.Unlock()
	}
	l.log.Info("lab race side finished", "race_id", r.id, "product_id", s.productID, "stock_strategy", s.strategy,
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
