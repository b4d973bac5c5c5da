// Package inventory owns product stock: creation, restock, and deduction
// under a per-product Redis lock backed by a fenced conditional update in
// the database, plus the sold-out fast path. The lab strategies beside the
// safe one exist so the harness can show what each missing piece costs.
package inventory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/lockx"
)

// Errors the HTTP layer maps to problem codes.
var (
	ErrNotFound          = errors.New("product not found")
	ErrSoldOut           = errors.New("sold out")
	ErrInsufficientStock = errors.New("not enough stock")
	// ErrBusy: the product lock was not obtained within the acquire timeout;
	// nothing was changed.
	ErrBusy = errors.New("system busy, retry later")
	// errStaleFence: the database saw a newer fencing token than ours, so our
	// hold is stale (paused past its TTL, or Redis lost the fence counter).
	errStaleFence = errors.New("stale fencing token")
)

// Strategy names, the lab's comparison axis (README says what each
// demonstrates). Only LockFence is safe on its own; the others exist so the
// harness can show what goes wrong. Lock, LockConditional and LockFence
// add one piece at a time: a lock around a read-modify-write, the
// conditional decrement instead, then the fence on it.
const (
	Naive           = "naive"
	Lock            = "lock"
	LockConditional = "lock-conditional"
	LockFence       = "lock-fence"
	Conditional     = "conditional"
	RedisGate       = "redis-gate"
)

// Strategies lists every strategy, the valid values of --stock-strategy.
var Strategies = []string{Naive, Lock, LockConditional, LockFence, Conditional, RedisGate}

// Config tunes the service.
type Config struct {
	Strategy  string
	LockTTL   time.Duration
	LockWait  time.Duration
	KeyPrefix string // Redis prefix for the gate counters and the stock-returned channel
	// SoldOutRecheck is how long the sold-out book is trusted before one
	// request re-reads the product row.
	SoldOutRecheck time.Duration
	// GateLease is how long the redis-gate strategy holds admitted units for
	// their request before any instance may reap them; 0 = the default
	// (see gateLease).
	GateLease time.Duration
	// Buckets is K, how many stock buckets a product created here gets
	// (buckets.go); 0 or 1 = one, the products row alone. More than one
	// needs the lock-fence strategy.
	Buckets int
	// HomeBucket is the bucket this instance deducts from first, mod a
	// product's K; negative = drawn once per process (drawHome).
	HomeBucket int
	// Queued: the seckill route admits at the gate whatever the strategy
	// (queuegate.go), so the gate reaper runs.
	Queued bool

	// Lab faults, off by default.
	PauseAfterLock   time.Duration
	PauseProbability float64
}

// Product is a row of products.
type Product struct {
	ID          int64     `gorm:"primaryKey" json:"id"`
	Name        string    `json:"name"`
	PriceCents  int64     `json:"price_cents"`
	Stock       int64     `json:"stock"`
	FlashSale   bool      `json:"flash_sale"` // offered as a flash sale (the demo page's seckill button); the API does not check it
	Fence       int64     `json:"-"`
	FenceHolder string    `json:"-"` // the lock holder that wrote Fence (lockx.Fence)
	Version     int64     `json:"-"`
	Buckets     int       `json:"-"` // K: bucket 0 is this row, 1..K-1 are stock_buckets rows
	IdemRef     *string   `json:"-"`
	RequestHash string    `json:"-"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"-"`
}

// LedgerRow is a row of the append-only stock ledger.
type LedgerRow struct {
	ID          int64 `gorm:"primaryKey"`
	ProductID   int64
	Delta       int64
	Reason      string
	OrderNo     *string
	Ref         *string
	RequestHash string
	Fence       int64
	Bucket      int // the stock bucket an order took from (0: the products row)
	CreatedAt   time.Time
}

// TableName maps LedgerRow to stock_ledger.
func (LedgerRow) TableName() string { return "stock_ledger" }

// Ledger reasons.
const (
	ReasonCreate  = "create"
	ReasonRestock = "restock"
	ReasonOrder   = "order"
	ReasonCancel  = "cancel"
)

// Service is the inventory.
type Service struct {
	db      *gorm.DB
	locks   *lockx.Client
	rdb     redis.UniversalClient
	cfg     Config
	log     *slog.Logger
	metrics *Metrics

	prices  sync.Map // product id -> price in cents (a price never changes)
	soldOut *soldOutBook

	seeding func() // a test's pause between seedGate's read and its write

	labMu       sync.RWMutex
	labStrategy map[int64]string // LAB: per-product override of cfg.Strategy

	home    int        // this instance's home bucket, before mod K
	buckets sync.Map   // product id -> its K (never changes after create)
	empty   *emptyBook // buckets this instance found empty
}

// New builds the service. Run Follow to hear of restocks in other instances.
func New(db *gorm.DB, locks *lockx.Client, rdb redis.UniversalClient, cfg Config, m *Metrics, log *slog.Logger) *Service {
	if cfg.Strategy == "" {
		cfg.Strategy = LockFence
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	home := cfg.HomeBucket
	if home < 0 {
		home = drawHome(rdb, cfg.KeyPrefix, log)
	}
	return &Service{db: db, locks: locks, rdb: rdb, cfg: cfg, log: log, metrics: m, soldOut: newSoldOutBook(cfg.SoldOutRecheck),
		home: home, empty: newEmptyBook()}
}

// drawHome is the default home bucket: the next value of a counter in
// Redis, taken once per process start, so instances started one after
// another get consecutive homes, different mod any K at least their number
// (random homes collide often: 3 instances, K=3, share one 7 times in 9).
// An instance restarted later takes the next value, which may share a home
// with a running one. Without Redis it is a random one.
func drawHome(rdb redis.UniversalClient, prefix string, log *slog.Logger) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n, err := rdb.Incr(ctx, prefix+"home-bucket").Result()
	if err != nil {
		log.Warn("home bucket counter not read; this instance starts at a random bucket", "err", err)
		return rand.IntN(1 << 20)
	}
	return int(n % (1 << 20))
}

// Strategy is the deduction strategy in use.
func (s *Service) Strategy() string { return s.cfg.Strategy }

func lockKey(id int64) string { return "product:" + strconv.FormatInt(id, 10) }

// bucketKey is the lock key of one stock bucket: bucket 0's is the
// product's own (lockKey), so a one-bucket product locks as it always did.
func bucketKey(id int64, bucket int) string {
	if bucket == 0 {
		return lockKey(id)
	}
	return lockKey(id) + ":" + strconv.Itoa(bucket)
}

// Create makes a product (on flash sale or not) and its opening ledger row
// in one transaction. idemRef (a scoped Idempotency-Key, may be empty)
// makes a retried create return the first product: created is false then,
// and hash tells whether the retry asked for the same thing.
func (s *Service) Create(ctx context.Context, name string, priceCents, stock int64, flashSale bool, idemRef, hash string) (p Product, created bool, err error) {
	return s.create(ctx, name, priceCents, stock, flashSale, idemRef, hash, "")
}

// labProduct is a row of lab_products: a product a lab race created, and the
// strategy its buyers raced under. The shop-wide audit reports these apart.
type labProduct struct {
	ProductID     int64 `gorm:"primaryKey"`
	StockStrategy string
	CreatedAt     time.Time
}

func (labProduct) TableName() string { return "lab_products" }

// CreateLab creates a lab race's product, marked in the same transaction as
// raced under strategy, so no crash can leave a lab product that the
// shop-wide audit would take for one of the shop's own.
func (s *Service) CreateLab(ctx context.Context, name string, priceCents, stock int64, strategy string) (Product, error) {
	p, _, err := s.create(ctx, name, priceCents, stock, true, "", "", strategy)
	return p, err
}

// create inserts the product and its create ledger row, and its lab mark
// when labStrategy is set. A shop product gets Config.Buckets buckets, its
// opening stock split over them (a lab product always one: its race is
// about the strategy alone).
func (s *Service) create(ctx context.Context, name string, priceCents, stock int64, flashSale bool, idemRef, hash, labStrategy string) (p Product, created bool, err error) {
	if idemRef != "" {
		// A repeat (a retry, the demo catalog at every start) finds its
		// product without an insert that fails as a duplicate; two at
		// once still meet at the unique index below.
		var prev []Product
		if err := s.db.WithContext(ctx).Where("idem_ref = ?", idemRef).Limit(1).Find(&prev).Error; err != nil {
			return Product{}, false, err
		}
		if len(prev) == 1 {
			return s.replay(ctx, prev[0])
		}
	}
	k := 1
	if labStrategy == "" {
		k = max(1, s.cfg.Buckets)
	}
	shares := spread(stock, k)
	now := dbx.Now()
	p = Product{Name: name, PriceCents: priceCents, Stock: shares[0], FlashSale: flashSale, Buckets: k, RequestHash: hash, CreatedAt: now, UpdatedAt: now}
	if idemRef != "" {
		p.IdemRef = &idemRef
	}
	err = dbx.Tx(ctx, s.db, func(tx *gorm.DB) error {
		p.ID = 0 // a rerun transaction must not reuse the rolled-back id
		if err := tx.Create(&p).Error; err != nil {
			return err
		}
		if err := createBuckets(tx, p.ID, shares); err != nil {
			return err
		}
		if labStrategy != "" {
			if err := tx.Create(&labProduct{ProductID: p.ID, StockStrategy: labStrategy, CreatedAt: now}).Error; err != nil {
				return err
			}
		}
		return tx.Create(&LedgerRow{ProductID: p.ID, Delta: stock, Reason: ReasonCreate, CreatedAt: now}).Error
	})
	if err != nil && idemRef != "" && dbx.IsDuplicate(err) {
		var prev Product
		if e := s.db.WithContext(ctx).Where("idem_ref = ?", idemRef).Take(&prev).Error; e != nil {
			return Product{}, false, e
		}
		return s.replay(ctx, prev)
	}
	if err == nil {
		p.Stock = stock
		s.buckets.Store(p.ID, k)
	}
	return p, err == nil, err
}

// replay answers a create repeated under its ref with the product it made,
// its Stock summed over its buckets.
func (s *Service) replay(ctx context.Context, prev Product) (Product, bool, error) {
	if prev.Buckets > 1 {
		p, err := s.Get(ctx, prev.ID)
		return p, false, err
	}
	return prev, false, nil
}

// Get returns one product, its Stock and Version summed over its buckets.
func (s *Service) Get(ctx context.Context, id int64) (Product, error) {
	return readTotal(s.db.WithContext(ctx), id)
}

// List returns up to limit products with id > after, by id, each summed
// over its buckets.
func (s *Service) List(ctx context.Context, after int64, limit int) ([]Product, error) {
	return readTotals(s.db.WithContext(ctx).Where("id > ?", after).Order("id").Limit(limit))
}

// Restock adds quantity under the product's lock, writes a ledger row and
// ends the sold-out state in every instance. ref (a scoped Idempotency-Key,
// may be empty) makes a retried restock add nothing the second time:
// replayed is true then, and a retry whose hash differs from the first
// request's is idem.ErrFingerprintMismatch. A product held in buckets takes
// every bucket's lock, in bucket order, and gets quantity spread over them.
func (s *Service) Restock(ctx context.Context, id, quantity int64, ref, hash string) (out Product, replayed bool, err error) {
	k, err := s.bucketsOf(ctx, id)
	if err != nil {
		return Product{}, false, err
	}
	restock := func(ctx context.Context, fences []Fence) error {
		added := false
		err := dbx.Tx(ctx, s.db, func(tx *gorm.DB) error {
			added, replayed = false, false
			var err error
			if out, err = readProduct(tx, id); err != nil {
				return err
			}
			var r *string
			if ref != "" {
				r = &ref
			}
			row := LedgerRow{ProductID: id, Delta: quantity, Reason: ReasonRestock, Ref: r, RequestHash: hash, Fence: fences[0].Number, CreatedAt: dbx.Now()}
			if err := tx.Create(&row).Error; err != nil {
				if !dbx.IsDuplicate(err) {
					return err
				}
				var prev LedgerRow // this restock already happened
				if err := tx.Where("ref = ?", ref).Take(&prev).Error; err != nil {
					return err
				}
				if prev.RequestHash != hash || prev.ProductID != id {
					return idem.ErrFingerprintMismatch
				}
				replayed = true
				// Answered as the first time: the stock summed over the buckets.
				out, err = readTotal(tx, id)
				return err
			}
			if err := addStock(tx, id, spread(quantity, k), fences); err != nil {
				return err
			}
			added = true
			out, err = readTotal(tx, id)
			return err
		})
		if err == nil && added {
			// Still under the lock, after COMMIT: no holder can mark the
			// product sold out on the old stock after this clear.
			s.Returned(ctx, id, quantity)
		}
		return err
	}
	if k > 1 {
		err = s.lockedAll(ctx, id, k, func() time.Duration { return s.cfg.LockWait }, restock)
	} else {
		err = s.locked(ctx, id, s.cfg.LockWait, noLabPause, func(ctx context.Context, fence Fence) error {
			return restock(ctx, []Fence{fence})
		})
	}
	return out, replayed, err
}

// ReturnTx gives the stock of cancelled orders of productID back inside the
// caller's transaction (the orders' guarded cancel): one ledger row per
// order, in one INSERT, and one stock update under fence, the hold
// WithProductLock passed in, so a return by a holder whose lease ran out is
// refused (errStaleFence, and the whole transaction rolls back: the orders
// stay pending; WithProductLock raises the fence and runs it again). The
// units go to bucket 0, the products row, whose lock is the one
// WithProductLock holds; a product held in buckets then sells them from
// there (the walk reaches it). The unique (order_no, reason) index makes a
// second return of an order fail, so stock comes back exactly once.
func (s *Service) ReturnTx(tx *gorm.DB, productID int64, fence Fence, returns []Want) error {
	if len(returns) == 0 {
		return nil
	}
	rows := make([]LedgerRow, len(returns))
	var units int64
	now := dbx.Now()
	for i, w := range returns {
		no := w.OrderNo
		rows[i] = LedgerRow{ProductID: productID, Delta: w.Quantity, Reason: ReasonCancel, OrderNo: &no, Fence: fence.Number, CreatedAt: now}
		units += w.Quantity
	}
	if err := tx.Create(&rows).Error; err != nil {
		return fmt.Errorf("return stock of %d orders of product %d: %w", len(rows), productID, err)
	}
	res := moveStock(tx, productID, units, fence)
	if res.Error != nil || res.RowsAffected == 1 {
		return res.Error
	}
	return missedBucket(tx, productID, 0, fence)
}

// LockWait says how a caller waits for a product lock.
type LockWait int

const (
	// WaitForLock waits up to the configured lock wait (buyers, restocks).
	WaitForLock LockWait = iota
	// TryOnce gives up at once when the lock is taken: background work
	// (the sweeper) yields to buyers and comes back later.
	TryOnce
)

// Fence is the product lock's fencing token, as lockx hands it out: the
// stock write takes it only while no newer fence, and no other holder of
// the same fence, has written (moveStock). Named here so the callers of
// WithProductLock need not import lockx. The zero Fence: no lock.
type Fence = lockx.Fence

// WithProductLock runs fn holding the product's lock: restocks,
// cancellations and returns, so a return never interleaves with a
// deduction and sold-out state is set and cleared in lock order. fence is
// the lock's fencing token.
func (s *Service) WithProductLock(ctx context.Context, productID int64, wait LockWait, fn func(ctx context.Context, fence Fence) error) error {
	d := s.cfg.LockWait
	if wait == TryOnce {
		d = 0
	}
	return s.locked(ctx, productID, d, noLabPause, fn)
}

// locks reports whether a strategy deducts under the product lock (the
// lock-free ones are lab strategies: naive and conditional).
func locks(strategy string) bool { return strategy != Naive && strategy != Conditional }

// labPause says whether the lab's pause after lock (PauseAfterLock) may
// apply to work under a lock: only deductions are paused.
type labPause bool

const (
	noLabPause  labPause = false
	labPausable labPause = true
)

// locked is the one place that runs work under a product lock. It takes
// the lock with the watchdog on, runs fn, and releases only after fn
// returned (after its transaction committed). A lock lost while fn ran
// cancels fn's context, so its transaction rolls back: reported as ErrBusy,
// nothing changed. A write the database refused for a stale fence (Redis
// lost the fence counter) raises the counter to what the database last
// accepted and runs fn again under a new hold.
//
// labPausable lets the lab pause stand in for a stop-the-world pause: the
// watchdog is off (no renewal could run during such a pause either) and fn
// runs on the caller's context, so the fence alone must stop a stale write.
func (s *Service) locked(ctx context.Context, id int64, wait time.Duration, pause labPause, fn func(ctx context.Context, fence Fence) error) error {
	return s.lockedBucket(ctx, id, 0, wait, pause, fn)
}

// lockedBucket is locked for one stock bucket's lock (bucket 0: the
// product's own), its fence raised from that bucket's row.
func (s *Service) lockedBucket(ctx context.Context, id int64, bucket int, wait time.Duration, pause labPause, fn func(ctx context.Context, fence Fence) error) error {
	paused := pause == labPausable && s.cfg.PauseAfterLock > 0
	opts := lockx.AcquireOptions{TTL: s.cfg.LockTTL, Wait: wait, Watchdog: !paused}
	for range 3 {
		err := s.holding(ctx, id, bucket, opts, paused, fn)
		if !errors.Is(err, errStaleFence) {
			return err
		}
		s.metrics.staleFence()
		if err := s.raiseFence(ctx, id, bucket); err != nil {
			return err
		}
	}
	return ErrBusy
}

// raiseFence raises a bucket lock's fence counter to the fence its row last
// accepted.
func (s *Service) raiseFence(ctx context.Context, id int64, bucket int) error {
	r, err := readBucket(s.db.WithContext(context.WithoutCancel(ctx)), id, bucket)
	if err != nil {
		return err
	}
	s.log.Warn("stock write refused: stale fencing token; raising the fence and retrying", "product_id", id, "bucket", bucket, "db_fence", r.Fence)
	return s.locks.RaiseFence(ctx, bucketKey(id, bucket), r.Fence)
}

// holding is one hold of a bucket's lock (bucket 0: the product lock)
// around fn.
func (s *Service) holding(ctx context.Context, id int64, bucket int, opts lockx.AcquireOptions, paused bool, fn func(ctx context.Context, fence Fence) error) error {
	err := s.locks.Do(ctx, bucketKey(id, bucket), opts, func(lctx context.Context, fence Fence) error {
		if paused {
			lctx = ctx
		}
		return fn(lctx, fence)
	})
	return s.holdErr(id, paused, err)
}

// holdErr is the outcome of a hold of a product's (or bucket's) lock as
// inventory reports it, from lockx's: the lock not obtained is ErrBusy; a
// hold lost before its release after fenced work committed stands; a hold
// lost while the work ran wrote nothing (ErrBusy).
func (s *Service) holdErr(id int64, paused bool, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lockx.ErrNotObtained):
		s.metrics.busy()
		return ErrBusy
	case errors.Is(err, lockx.ErrLostBeforeRelease):
		// Committed, fenced: it stands. Counted, since it means the TTL is
		// too short for the work or the holder was paused.
		s.metrics.releaseFailed()
		s.log.Warn("product lock was lost before release", "product_id", id, "err", err)
		return nil
	case errors.Is(err, errStaleFence):
		return err
	case errors.Is(err, lockx.ErrNotHeld) && !paused:
		s.log.Warn("product lock lost before commit; nothing was written", "product_id", id, "err", err)
		return ErrBusy
	}
	return err
}

func (s *Service) labPause(ctx context.Context) {
	if s.cfg.PauseAfterLock <= 0 || rand.Float64() >= s.cfg.PauseProbability {
		return
	}
	s.metrics.labPause()
	s.log.Warn("LAB: pausing a lock holder", "pause", s.cfg.PauseAfterLock)
	sleep(ctx, s.cfg.PauseAfterLock)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// UseStrategy makes this instance deduct productID's stock by the named
// strategy instead of the configured one ("" restores the default). It is a
// LAB switch for the operator's side-by-side race: the same load against the
// safe strategy and an unsafe one at once, each on its own product. A switch
// into or out of redis-gate retires the product's gate counter: deductions
// by another strategy do not keep it in step, so it is seeded afresh from
// the database when redis-gate next needs it. The counter is deleted after
// the switch, outside labMu (a Redis call must not stall StrategyOf): a gate
// seeded in between is only seeded again, the gate only saves work. A
// product held in buckets is always deducted by lock-fence: Deduct ignores a
// switch for it.
func (s *Service) UseStrategy(productID int64, name string) {
	if s.switchStrategy(productID, name) {
		if err := s.rdb.Del(context.Background(), s.gateKey(productID)).Err(); err != nil {
			s.log.Warn("LAB: gate counter not retired on a strategy switch", "product_id", productID, "err", err)
		}
	}
}

// switchStrategy records productID's strategy and reports whether the
// switch went into or out of redis-gate.
func (s *Service) switchStrategy(productID int64, name string) (retireGate bool) {
	s.labMu.Lock()
	defer s.labMu.Unlock()
	if s.labStrategy == nil {
		s.labStrategy = map[int64]string{}
	}
	old, ok := s.labStrategy[productID]
	if !ok {
		old = s.cfg.Strategy
	}
	if name == "" {
		delete(s.labStrategy, productID)
	} else {
		s.labStrategy[productID] = name
	}
	now := cmp.Or(name, s.cfg.Strategy)
	return now != old && (now == RedisGate || old == RedisGate)
}

// StrategyOf is the strategy that deducts productID's stock here.
func (s *Service) StrategyOf(productID int64) string {
	s.labMu.RLock()
	defer s.labMu.RUnlock()
	if name, ok := s.labStrategy[productID]; ok {
		return name
	}
	return s.cfg.Strategy
}

// holdGrace is how long past its request's deadline a hold may last: the
// work under it (a transaction bounded to the deadline plus less than
// this) must end first, or the watchdog would stop while it still ran; and
// with the release (which waits no longer than the hold, lockx.Do) and
// keeping the idempotency record (500 ms at most) the answer must leave
// within the deadline + 1 s (A1).
const holdGrace = 300 * time.Millisecond

// HoldPast is the context of a hold taken for a request whose deadline is
// dl: not cancelled with the request (a client gone away must not cut a
// COMMIT midway), but over holdGrace after dl, so a database or Redis that
// went silent cannot keep the hold, and the client's answer, for ever.
func HoldPast(ctx context.Context, dl time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.WithoutCancel(ctx), dl.Add(holdGrace))
}
