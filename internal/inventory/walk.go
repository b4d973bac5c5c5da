package inventory

import (
	"context"
	"errors"
	"sync"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-lab/shop/internal/dbx"
)

// The walk deducts a product held in stock buckets (buckets.go), one lock
// held at a time: its home bucket first, then home+1, home+2, ... (mod K)
// for the wants the buckets before could not serve (left open). A want is
// refused only by the tally, which runs when every bucket was tried: it
// takes every bucket's lock in bucket order (as a restock does, so holders
// of one lock never deadlock with it), reads every row, and serves or
// refuses the wants still open against the sum, taking a want's units from
// several buckets when no one bucket has them all. So a refusal is decided
// on the whole stock at one instant, and one unit left in any bucket is
// sold. An instance remembers the buckets it found empty (emptyBuckets) and
// skips them until stock comes back, so a run dry bucket costs a batch
// nothing; the memory only saves work, the tally decides.

// errOpen refuses a want in one bucket while other buckets are still to
// be tried: the want stays open (Taken.Open), for the walk's next hold. It
// never reaches a buyer: the tally decides every want still open.
var errOpen = errors.New("not enough stock in this bucket; another bucket may have some")

// walked is what one hold of the walk found: how many wants it left open,
// whether it left its bucket empty, and, for the tally (tallied: it ran),
// the buckets it left empty.
type walked struct {
	open    int
	emptied bool
	tallied bool
	empty   uint64 // the buckets the tally left empty (a mask)
}

// walk is the deductor of a product held in k buckets.
type walk struct {
	s    *Service
	id   int64
	k    int
	home int
	// The buckets known empty when the walk began, and the memory's
	// generation then.
	empty, gen uint64
	// The hold the walk is at: tried buckets from home (the step's bucket
	// is (home+tried) % k), or the tally.
	tried int
	tally bool
}

func startWalk(_ context.Context, s *Service, id int64, k int, _ []Want) (deductor, []error, error) {
	w := &walk{s: s, id: id, k: k, home: s.home % k, tried: -1}
	w.empty, w.gen = s.empty.get(id)
	return w, nil, nil
}

func (w *walk) bucket() int { return (w.home + w.tried) % w.k }

func (w *walk) next(last *Taken) (claim, bool) {
	if last != nil {
		switch {
		case w.tally:
			if last.walked.tallied {
				w.s.empty.set(w.id, w.gen, last.walked.empty)
			}
			return claim{}, false
		case last.walked.emptied:
			w.s.empty.add(w.id, w.gen, 1<<w.bucket())
		}
		if last.walked.open == 0 {
			return claim{}, false
		}
	}
	for w.tried++; w.tried < w.k; w.tried++ {
		if b := w.bucket(); w.empty&(1<<b) == 0 {
			if b != w.home {
				w.s.metrics.bucketMove()
			}
			return oneBucket(b, true), true
		}
	}
	w.tally = true
	w.s.metrics.bucketTally()
	return allBuckets(w.k), true
}

func (w *walk) prepare(context.Context, *hold) error { return nil }

func (w *walk) deductTx(tx *gorm.DB, h *hold, wants []Want) (Taken, error) {
	if w.tally {
		return w.fromAll(tx, h, wants)
	}
	return w.fromBucket(tx, h.fence(w.bucket()), wants)
}

func (w *walk) close(context.Context) {}

// fromBucket is the fenced take for one bucket: the wants it cannot serve
// stay open, for the next bucket.
func (w *walk) fromBucket(tx *gorm.DB, fence Fence, wants []Want) (Taken, error) {
	id, b := w.id, w.bucket()
	price, err := w.s.price(tx, id)
	if err != nil {
		return Taken{}, err
	}
	// A sale in progress: the whole batch fits; one UPDATE, no read.
	res := moveBucket(tx, id, b, -units(wants), fence)
	if res.Error != nil {
		return Taken{}, res.Error
	}
	if res.RowsAffected == 1 {
		out := Taken{PriceCents: price, Refused: make([]error, len(wants))}
		return out, ledger(tx, id, b, fence, wants, out.Refused)
	}
	r, err := readBucket(tx.Clauses(clause.Locking{Strength: "UPDATE"}), id, b)
	if err != nil {
		return Taken{}, err
	}
	if r.refuses(fence) {
		return Taken{}, errStaleFence
	}
	refused, took := allocate(r.Stock, wants)
	out := Taken{PriceCents: price, Refused: refused}
	for i, err := range refused {
		if err != nil {
			refused[i] = errOpen
			out.walked.open++
		}
	}
	out.walked.emptied = r.Stock-took <= 0
	if took == 0 {
		return out, nil
	}
	if err := mustMove(tx, id, b, -took, fence); err != nil {
		return Taken{}, err
	}
	return out, ledger(tx, id, b, fence, wants, refused)
}

// fromAll is the tally, every bucket's lock held: it reads every bucket
// with a locking read and serves the wants in order against their sum,
// each want's units from the buckets in walk order, one ledger row per want
// (its bucket and fence those of the first bucket it took from). What it
// refuses is ErrSoldOut or ErrInsufficientStock, final.
func (w *walk) fromAll(tx *gorm.DB, h *hold, wants []Want) (Taken, error) {
	rows, price, err := w.readAll(tx, h)
	if err != nil {
		return Taken{}, err
	}
	var sum int64
	left := make([]int64, w.k)
	for b, r := range rows {
		sum += r.Stock
		left[b] = r.Stock
	}
	refused, total := allocate(sum, wants)
	first := w.spend(wants, refused, left)
	var emptied uint64
	for b := range w.k {
		if left[b] <= 0 {
			emptied |= 1 << b
		}
		if d := rows[b].Stock - left[b]; d != 0 {
			if err := mustMove(tx, w.id, b, -d, h.fence(b)); err != nil {
				return Taken{}, err
			}
		}
	}
	out := Taken{PriceCents: price, Refused: refused, SoldOut: sum-total <= 0}
	out.walked = walked{tallied: true, empty: emptied}
	ledger := make([]LedgerRow, 0, len(wants))
	now := dbx.Now()
	for i, want := range wants {
		if refused[i] == nil {
			no := want.OrderNo
			ledger = append(ledger, LedgerRow{ProductID: w.id, Delta: -want.Quantity, Reason: ReasonOrder, OrderNo: &no,
				Fence: h.fence(first[i]).Number, Bucket: first[i], CreatedAt: now})
		}
	}
	if len(ledger) > 0 {
		if err := tx.Create(&ledger).Error; err != nil {
			return Taken{}, err
		}
	}
	return out, nil
}

// readAll reads every bucket's row with a locking read, indexed by bucket,
// and the product's price; a row that refuses its bucket's fence is
// errStaleFence.
func (w *walk) readAll(tx *gorm.DB, h *hold) ([]stockBucket, int64, error) {
	forUpdate := clause.Locking{Strength: "UPDATE"}
	p, err := readProduct(tx.Clauses(forUpdate), w.id)
	if err != nil {
		return nil, 0, err
	}
	var rest []stockBucket
	if err := tx.Clauses(forUpdate).Where("product_id = ?", w.id).Order("bucket").Find(&rest).Error; err != nil {
		return nil, 0, err
	}
	rows := make([]stockBucket, w.k)
	rows[0] = stockBucket{ProductID: w.id, Stock: p.Stock, Fence: p.Fence, FenceHolder: p.FenceHolder}
	for _, r := range rest {
		if r.Bucket > 0 && r.Bucket < w.k {
			rows[r.Bucket] = r
		}
	}
	for b, r := range rows {
		if r.refuses(h.fence(b)) {
			return nil, 0, errStaleFence
		}
	}
	w.s.prices.Store(w.id, p.PriceCents)
	return rows, p.PriceCents, nil
}

// spend takes each served want's units from left, bucket by bucket in walk
// order, and returns the bucket each took from first.
func (w *walk) spend(wants []Want, refused []error, left []int64) (first []int) {
	first = make([]int, len(wants))
	for i, want := range wants {
		if refused[i] != nil {
			continue
		}
		first[i] = -1
		for j, need := 0, want.Quantity; j < w.k && need > 0; j++ {
			b := (w.home + j) % w.k
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
	return first
}

// emptyBuckets is what an instance knows of its products' empty buckets: a
// mask per product, bit b set when bucket b was found empty. Stock that
// comes back clears it (clear); gen, bumped then, keeps a slow walk from
// writing back what it saw before.
type emptyBuckets struct {
	mu   sync.Mutex
	mask map[int64]uint64
	gen  map[int64]uint64
}

func newEmptyBuckets() *emptyBuckets {
	return &emptyBuckets{mask: map[int64]uint64{}, gen: map[int64]uint64{}}
}

func (e *emptyBuckets) get(id int64) (mask, gen uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mask[id], e.gen[id]
}

// add marks the buckets in bits empty, unless stock came back since gen.
func (e *emptyBuckets) add(id int64, gen, bits uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gen[id] == gen {
		e.mask[id] |= bits
	}
}

// set replaces what is known, unless stock came back since gen.
func (e *emptyBuckets) set(id int64, gen, mask uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gen[id] == gen {
		e.mask[id] = mask
	}
}

func (e *emptyBuckets) clear(id int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.mask, id)
	e.gen[id]++
}
