package inventory

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// The sold-out book is the fast path of a flash sale: what an instance
// knows of its products that have no stock left, and at which version of
// the product row. It learns a product when a deduction of its own left no
// stock (a Deduction) or the gate turned a buyer away on an empty row (admit).
// Stock that comes back (restock, return) ends the state here at once and
// in every instance through the stock-returned channel (Follow); every
// SHOP_SOLD_OUT_CACHE one request re-reads the product row, so a lost
// message or a sale that another instance reopened is noticed within that
// time even without Redis.

type soldOutBook struct {
	ttl time.Duration

	mu       sync.RWMutex
	products map[int64]*soldOut
	gen      map[int64]uint64 // bumped by every forget: a slow read cannot resurrect a cleared state
}

// soldOut is what an instance knows of one sold-out product.
type soldOut struct {
	version    int64        // the product row's version when read
	checked    atomic.Int64 // unix nanos of the last read of the product row
	refreshing atomic.Bool
}

func newSoldOutBook(ttl time.Duration) *soldOutBook {
	return &soldOutBook{ttl: ttl, products: map[int64]*soldOut{}, gen: map[int64]uint64{}}
}

func (b *soldOutBook) get(id int64) *soldOut {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.products[id]
}

func (b *soldOutBook) generation(id int64) uint64 {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.gen[id]
}

// learn records that the product row read at generation gen had no stock
// at version.
func (b *soldOutBook) learn(id int64, gen uint64, version int64) {
	e := &soldOut{version: version}
	e.checked.Store(time.Now().UnixNano())
	b.mu.Lock()
	if b.gen[id] == gen {
		b.products[id] = e
	}
	b.mu.Unlock()
}

// forget ends a product's sold-out state (its stock came back).
func (b *soldOutBook) forget(id int64) {
	b.mu.Lock()
	delete(b.products, id)
	b.gen[id]++
	b.mu.Unlock()
}

// Check is what inventory knows of a product before a want for it queues,
// asked once per request, up front: whether this instance's sold-out book
// has it (SoldOut, and at which Version of its row), and whether its wants
// are deducted under a lock (Locks), which is what lets the wants of one
// product share a hold, coalesced in one batch (the lock-free lab
// strategies take none, and each request deducts alone).
type Check struct {
	SoldOut bool
	Version int64
	Locks   bool
}

// Check is productID's Check.
func (s *Service) Check(ctx context.Context, productID int64) Check {
	var c Check
	c.Version, c.SoldOut = s.SoldOut(ctx, productID)
	k := 1 // a K not known yet: the batch of one finds it
	if v, ok := s.buckets.Load(productID); ok {
		k = v.(int)
	}
	c.Locks = resolve(s.StrategyOf(productID), k).locks
	return c
}

// SoldOut reports whether this instance knows productID to be sold out,
// and at which version of its row: a seckill or regular order for it is
// answered from memory (the fast path). An entry older than
// Config.SoldOutRecheck is checked against the product row first, by one
// request at a time (the others use it meanwhile), so every path that
// trusts the book trusts it for that long at most, pub/sub or not.
func (s *Service) SoldOut(ctx context.Context, productID int64) (version int64, ok bool) {
	e := s.soldOut.get(productID)
	if e == nil {
		return 0, false
	}
	if time.Since(time.Unix(0, e.checked.Load())) > s.soldOut.ttl && e.refreshing.CompareAndSwap(false, true) {
		s.recheckSoldOut(ctx, productID, e)
		e.refreshing.Store(false)
		if e = s.soldOut.get(productID); e == nil {
			return 0, false
		}
	}
	return e.version, true
}

// recheckSoldOut re-reads the product row of an aging book entry: the same
// version extends it; stock back forgets it; another version still sold
// out (sold again elsewhere) replaces it. A database that cannot answer
// keeps the entry as it is.
func (s *Service) recheckSoldOut(ctx context.Context, id int64, e *soldOut) {
	gen := s.soldOut.generation(id)
	p, err := s.Get(ctx, id)
	switch {
	case err != nil:
	case p.Stock > 0:
		s.forget(id)
	case p.Version == e.version:
		e.checked.Store(time.Now().UnixNano())
	default:
		s.soldOut.learn(id, gen, p.Version)
	}
}

// learnSoldOut reads the product row and records it when it has no stock,
// at the version it reports.
func (s *Service) learnSoldOut(ctx context.Context, id int64) (version int64, soldOut bool) {
	gen := s.soldOut.generation(id)
	p, err := s.Get(context.WithoutCancel(ctx), id)
	if err != nil {
		s.log.Warn("sold-out book not updated (buyers take the locked path)", "product_id", id, "err", err)
		return 0, false
	}
	if p.Stock > 0 {
		return 0, false
	}
	s.soldOut.learn(id, gen, p.Version)
	return p.Version, true
}
