// Package inventory owns product stock: creation, restock, and deduction
// under a per-product Redis lock backed by a fenced conditional update in
// the database, plus the sold-out fast path. The lab strategies beside the
// safe one exist so the harness can show what each missing piece costs.
//
// Where things are:
//
//	hold.go       the one way to hold a product's lock(s), and the stale-fence policy
//	stock.go      the stock writes (moveBucket, mustMove) and the ledger rows
//	deduction.go  a batch's deduction: the loop order runs (Deduct, Next, DeductTx, Done),
//	              its Wants and what each transaction Took
//	strategy.go   strategy names resolved into a deductor, the seam
//	fenced.go     lock-fence, the safe default
//	gate.go       redis-gate: admission before, the fenced path, settlement after
//	walk.go       a product held in stock buckets (buckets.go: their rows)
//	lab.go        the unsafe strategies and the lab pause
//	restock.go    stock that comes back: restocks, returns, WithProductLock
//	soldout.go    the sold-out book; reopen.go tells every instance of stock back
package inventory

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
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
	// KeepBatches and KeepFor bound a kept hold (keep.go): a batch leader
	// keeps a product's lock for at most KeepBatches batches and KeepFor
	// since it took it. KeepBatches 0 or 1: every batch takes and releases
	// its own hold.
	KeepBatches int
	KeepFor     time.Duration

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

	home    int           // this instance's home bucket, before mod K
	buckets sync.Map      // product id -> its K (never changes after create)
	empty   *emptyBuckets // buckets this instance found empty
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
		home: home, empty: newEmptyBuckets()}
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

func lockKey(id int64) string { return "product:" + strconv.FormatInt(id, 10) }

// bucketKey is the lock key of one stock bucket: bucket 0's is the
// product's own (lockKey).
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
