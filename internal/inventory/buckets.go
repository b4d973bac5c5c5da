package inventory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/lockx"
)

// Stock buckets (docs chapter 9, "Scaling a hot product"): a product
// created while Config.Buckets is K > 1 holds its stock in K rows, each
// with its own lock key and fence, so K leaders (one per instance, each
// starting at its home bucket) can deduct side by side. Bucket 0 is the
// products row itself; buckets 1..K-1 are stock_buckets rows. The product's
// stock is the sum: Get and List report it, the audit checks it.
//
// A batch walks the buckets, one lock held at a time: its home bucket
// first, then home+1, home+2, ... (mod K) for the wants the buckets before
// could not serve (ErrElsewhere). A want is refused only by the tally, which
// runs when every bucket was tried: it takes every bucket's lock in bucket
// order (as a restock does, so holders of one lock never deadlock with it),
// reads every row, and serves or refuses the wants still open against the
// sum, taking a want's units from several buckets when no one bucket has
// them all. So a refusal is decided on the whole stock at one instant, and
// one unit left in any bucket is sold. An instance remembers the buckets it
// found empty (emptyBook) and skips them until stock comes back, so a run
// dry bucket costs a batch nothing; the memory only saves work, the tally
// decides.
//
// Restocks spread their units over the buckets (spread); returns of
// cancelled orders go to bucket 0 (ReturnTx). Only lock-fence walks
// buckets: the shop refuses to start with K > 1 under another strategy,
// and Deduct deducts a product held in buckets by lock-fence whatever a lab
// switch says.

// MaxBuckets bounds K: the empty-bucket memory is one 64-bit mask.
const MaxBuckets = 64

// ErrElsewhere refuses a want in one bucket of a product held in buckets
// while other buckets are still to be tried: the want stays open, and its
// batch offers it to the next bucket (the Deduction's next hold). It never
// reaches a buyer: the tally decides every want still open.
var ErrElsewhere = errors.New("not enough stock in this bucket; another bucket may have some")

// stockBucket is a row of stock_buckets, bucket 1..K-1 of a product (bucket
// 0, the products row, is read into one too).
type stockBucket struct {
	ProductID   int64 `gorm:"primaryKey"`
	Bucket      int   `gorm:"primaryKey"`
	Stock       int64
	Fence       int64
	FenceHolder string
	Version     int64
}

func (stockBucket) TableName() string { return "stock_buckets" }

// refuses is Product.refuses for a bucket's row.
func (r stockBucket) refuses(fence Fence) bool {
	return Product{Fence: r.Fence, FenceHolder: r.FenceHolder}.refuses(fence)
}

// spread splits units as evenly as it goes over k buckets, the remainder
// one each to the first buckets.
func spread(units int64, k int) []int64 {
	out := make([]int64, k)
	for b := range out {
		out[b] = units / int64(k)
		if int64(b) < units%int64(k) {
			out[b]++
		}
	}
	return out
}

// createBuckets inserts buckets 1.. of a new product (shares[0] is on its
// products row).
func createBuckets(tx *gorm.DB, id int64, shares []int64) error {
	if len(shares) <= 1 {
		return nil
	}
	rows := make([]stockBucket, 0, len(shares)-1)
	for b, n := range shares[1:] {
		rows = append(rows, stockBucket{ProductID: id, Bucket: b + 1, Stock: n})
	}
	return tx.Create(&rows).Error
}

// addStock adds shares[b] units to bucket b (a restock), each under the
// fence of the hold on that bucket's lock (fences[b]), so a restock by a
// holder whose lease ran out is refused like its deduction would be
// (errStaleFence: the caller raises the fence and retries under a new
// hold). The products row is always written, so a restock of a one-bucket
// product is one UPDATE as it always was.
func addStock(tx *gorm.DB, id int64, shares []int64, fences []Fence) error {
	for b, n := range shares {
		if n == 0 && b > 0 {
			continue
		}
		res := moveBucket(tx, id, b, n, fences[b])
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return missedBucket(tx, id, b, fences[b])
		}
	}
	return nil
}

// missedBucket says why a fenced stock write to bucket b changed no row:
// the row refuses the fence (errStaleFence), or there is no such bucket.
func missedBucket(tx *gorm.DB, id int64, b int, fence Fence) error {
	r, err := readBucket(tx, id, b)
	if err != nil {
		return err
	}
	if r.refuses(fence) {
		return errStaleFence
	}
	return fmt.Errorf("inventory: stock write to product %d bucket %d changed no row", id, b)
}

// moveBucket is moveStock for one bucket (0: the products row).
func moveBucket(tx *gorm.DB, id int64, bucket int, delta int64, fence Fence) *gorm.DB {
	if bucket == 0 {
		return moveStock(tx, id, delta, fence)
	}
	q, args := guardedMove("UPDATE stock_buckets SET stock = stock + ?, version = version + 1", []any{delta},
		" WHERE product_id = ? AND bucket = ?", []any{id, bucket}, delta, fence)
	return tx.Exec(q, args...)
}

// readBucket reads one bucket's row (0: the products row's stock and fence).
func readBucket(db *gorm.DB, id int64, bucket int) (stockBucket, error) {
	if bucket == 0 {
		p, err := readProduct(db, id)
		return stockBucket{ProductID: id, Stock: p.Stock, Fence: p.Fence, FenceHolder: p.FenceHolder, Version: p.Version}, err
	}
	var r stockBucket
	err := db.Where("product_id = ? AND bucket = ?", id, bucket).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return r, ErrNotFound
	}
	return r, err
}

// totalSelect reads products with their buckets' stock and versions summed
// in the same statement (one snapshot).
const totalSelect = `products.*,
 (SELECT COALESCE(SUM(b.stock), 0) FROM stock_buckets b WHERE b.product_id = products.id) AS bucket_stock,
 (SELECT COALESCE(SUM(b.version), 0) FROM stock_buckets b WHERE b.product_id = products.id) AS bucket_version`

type totalRow struct {
	Product
	BucketStock   int64
	BucketVersion int64
}

// readTotals reads the products q selects, each with Stock the sum over its
// buckets and Version its row's plus its buckets' (any deduction moves it,
// so the sold-out book's version check holds for bucketed products too).
func readTotals(q *gorm.DB) ([]Product, error) {
	var rows []totalRow
	if err := q.Table("products").Select(totalSelect).Scan(&rows).Error; err != nil {
		return nil, err
	}
	ps := make([]Product, len(rows))
	for i, r := range rows {
		ps[i] = r.Product
		ps[i].Stock += r.BucketStock
		ps[i].Version += r.BucketVersion
	}
	return ps, nil
}

func readTotal(db *gorm.DB, id int64) (Product, error) {
	ps, err := readTotals(db.Where("products.id = ?", id))
	if err != nil {
		return Product{}, err
	}
	if len(ps) == 0 {
		return Product{}, ErrNotFound
	}
	return ps[0], nil
}

// bucketsOf is a product's K, read once (it never changes). A product not
// found is taken as one bucket: its deduction answers ErrNotFound as before.
// That answer is not remembered (the product may be created the next
// moment), so an order for an id that does not exist costs a primary-key
// read in Deduct, besides the deduction that refuses it.
func (s *Service) bucketsOf(ctx context.Context, id int64) (int, error) {
	if k, ok := s.buckets.Load(id); ok {
		return k.(int), nil
	}
	var p Product
	err := s.db.WithContext(ctx).Select("id", "buckets").Take(&p, id).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	k := max(1, p.Buckets)
	s.buckets.Store(id, k)
	return k, nil
}

// price is the product's unit price (it never changes), remembered.
func (s *Service) price(tx *gorm.DB, id int64) (int64, error) {
	if p, ok := s.prices.Load(id); ok {
		return p.(int64), nil
	}
	p, err := readProduct(tx, id)
	if err != nil {
		return 0, err
	}
	s.prices.Store(id, p.PriceCents)
	return p.PriceCents, nil
}

// emptyBook is what an instance knows of its products' empty buckets: a
// mask per product, bit b set when bucket b was found empty. Stock that
// comes back clears it (forget); gen, bumped then, keeps a slow walk from
// writing back what it saw before.
type emptyBook struct {
	mu   sync.Mutex
	mask map[int64]uint64
	gen  map[int64]uint64
}

func newEmptyBook() *emptyBook {
	return &emptyBook{mask: map[int64]uint64{}, gen: map[int64]uint64{}}
}

func (e *emptyBook) get(id int64) (mask, gen uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mask[id], e.gen[id]
}

// add marks the buckets in bits empty, unless stock came back since gen.
func (e *emptyBook) add(id int64, gen, bits uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gen[id] == gen {
		e.mask[id] |= bits
	}
}

// set replaces what is known, unless stock came back since gen.
func (e *emptyBook) set(id int64, gen, mask uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gen[id] == gen {
		e.mask[id] = mask
	}
}

func (e *emptyBook) clear(id int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.mask, id)
	e.gen[id]++
}

// forget ends what this instance knows of a product's empty stock (its
// stock came back): the sold-out book's entry and the empty buckets.
func (s *Service) forget(id int64) {
	s.soldOut.forget(id)
	s.empty.clear(id)
}

// lockedAll runs fn holding every bucket's lock, taken in bucket order
// (0, 1, ..., K-1), fences[b] bucket b's fencing token: the tally and
// restocks. Deductions hold one bucket lock at a time, so taking them in
// order cannot deadlock with anything. A write refused for a stale fence
// raises every bucket's fence and runs fn again under new holds.
func (s *Service) lockedAll(ctx context.Context, id int64, k int, wait func() time.Duration, fn func(ctx context.Context, fences []Fence) error) error {
	for range 3 {
		err := s.holdAll(ctx, id, k, wait, nil, fn)
		if !errors.Is(err, errStaleFence) {
			return err
		}
		s.metrics.staleFence()
		for b := range k {
			if err := s.raiseFence(ctx, id, b); err != nil {
				return err
			}
		}
	}
	return ErrBusy
}

// holdAll takes bucket len(fences)'s lock and the ones after it, then runs fn.
func (s *Service) holdAll(ctx context.Context, id int64, k int, wait func() time.Duration, fences []Fence, fn func(ctx context.Context, fences []Fence) error) error {
	b := len(fences)
	if b == k {
		return fn(ctx, fences)
	}
	opts := lockx.AcquireOptions{TTL: s.cfg.LockTTL, Wait: wait(), Watchdog: true}
	return s.holding(ctx, id, b, opts, false, func(ctx context.Context, f Fence) error {
		return s.holdAll(ctx, id, k, wait, append(fences, f), fn)
	})
}

// fromBucket is fenced for one bucket of a product held in buckets: the
// wants it cannot serve stay open (ErrElsewhere), for the next bucket.
func (s *Service) fromBucket(tx *gorm.DB, t *Take, wants []Want) (Taken, error) {
	t.open, t.emptied = 0, false
	price, err := s.price(tx, t.ProductID)
	if err != nil {
		return Taken{}, err
	}
	var total int64
	for _, w := range wants {
		total += w.Quantity
	}
	// A sale in progress: the whole batch fits; one UPDATE, no read.
	res := moveBucket(tx, t.ProductID, t.bucket, -total, t.Fence)
	if res.Error != nil {
		return Taken{}, res.Error
	}
	if res.RowsAffected == 1 {
		out := Taken{PriceCents: price, Refused: make([]error, len(wants))}
		return out, s.ledger(tx, t, wants, out.Refused)
	}
	r, err := readBucket(tx.Clauses(clause.Locking{Strength: "UPDATE"}), t.ProductID, t.bucket)
	if err != nil {
		return Taken{}, err
	}
	if r.refuses(t.Fence) {
		return Taken{}, errStaleFence
	}
	refused, took := allocate(r.Stock, wants)
	for i, err := range refused {
		if err != nil {
			refused[i] = ErrElsewhere
			t.open++
		}
	}
	t.emptied = r.Stock-took <= 0
	out := Taken{PriceCents: price, Refused: refused}
	if took == 0 {
		return out, nil
	}
	if res = moveBucket(tx, t.ProductID, t.bucket, -took, t.Fence); res.Error != nil {
		return Taken{}, res.Error
	}
	if res.RowsAffected != 1 {
		if now, err := readBucket(tx, t.ProductID, t.bucket); err == nil && now.refuses(t.Fence) {
			return Taken{}, errStaleFence
		}
		return Taken{}, ErrBusy
	}
	return out, s.ledger(tx, t, wants, refused)
}

// fromAll is the tally's deduction, every bucket's lock held (t.fences):
// it reads every bucket with a locking read and serves the wants in order
// against their sum, each want's units from the buckets in walk order, one
// ledger row per want (its bucket and fence those of the first bucket it
// took from). What it refuses is ErrSoldOut or ErrInsufficientStock, final.
func (s *Service) fromAll(tx *gorm.DB, t *Take, wants []Want) (Taken, error) {
	id, k := t.ProductID, t.buckets
	forUpdate := clause.Locking{Strength: "UPDATE"}
	p, err := readProduct(tx.Clauses(forUpdate), id)
	if err != nil {
		return Taken{}, err
	}
	var rest []stockBucket
	if err := tx.Clauses(forUpdate).Where("product_id = ?", id).Order("bucket").Find(&rest).Error; err != nil {
		return Taken{}, err
	}
	rows := make([]stockBucket, k)
	rows[0] = stockBucket{ProductID: id, Stock: p.Stock, Fence: p.Fence, FenceHolder: p.FenceHolder}
	for _, r := range rest {
		if r.Bucket > 0 && r.Bucket < k {
			rows[r.Bucket] = r
		}
	}
	var sum int64
	left := make([]int64, k)
	for b, r := range rows {
		if r.refuses(t.fences[b]) {
			return Taken{}, errStaleFence
		}
		sum += r.Stock
		left[b] = r.Stock
	}
	s.prices.Store(id, p.PriceCents)
	refused, total := allocate(sum, wants)
	home := s.home % k
	first := make([]int, len(wants)) // the bucket each served want took from first
	for i, w := range wants {
		if refused[i] != nil {
			continue
		}
		first[i] = -1
		for j, need := 0, w.Quantity; j < k && need > 0; j++ {
			b := (home + j) % k
			n := min(need, left[b])
			if n <= 0 {
				continue
			}
			if first[i] < 0 {
				first[i] = b
			}
			left[b] -= n
			need -= n
		}
		first[i] = max(first[i], 0)
	}
	var emptied uint64
	for b := range k {
		if left[b] <= 0 {
			emptied |= 1 << b
		}
		d := rows[b].Stock - left[b]
		if d == 0 {
			continue
		}
		res := moveBucket(tx, id, b, -d, t.fences[b])
		if res.Error != nil {
			return Taken{}, res.Error
		}
		if res.RowsAffected != 1 {
			if now, err := readBucket(tx, id, b); err == nil && now.refuses(t.fences[b]) {
				return Taken{}, errStaleFence
			}
			return Taken{}, ErrBusy
		}
	}
	out := Taken{PriceCents: p.PriceCents, Refused: refused, SoldOut: sum-total <= 0}
	ledger := make([]LedgerRow, 0, len(wants))
	now := dbx.Now()
	for i, w := range wants {
		if refused[i] == nil {
			no := w.OrderNo
			ledger = append(ledger, LedgerRow{ProductID: id, Delta: -w.Quantity, Reason: ReasonOrder, OrderNo: &no,
				Fence: t.fences[first[i]].Number, Bucket: first[i], CreatedAt: now})
		}
	}
	if len(ledger) > 0 {
		if err := tx.Create(&ledger).Error; err != nil {
			return Taken{}, err
		}
	}
	t.tallied, t.left = true, emptied
	return out, nil
}
