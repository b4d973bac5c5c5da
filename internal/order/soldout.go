package order

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/inventory"
)

// The sold-out book is the fast path of a flash sale. When an instance
// learns that a product is sold out (a batch of its own left no stock), it
// reads that product's seckill buyers once (user -> order number) and keeps
// them in memory. A refusal is then a map lookup, and a repeat buyer one
// point read of its order: no Redis, no lock, no stock row. Stock that comes
// back (restock, return) ends the state in every instance through the
// stock-returned channel; every SHOP_SOLD_OUT_CACHE one request re-reads the
// product row, so a lost message or a sale that another instance reopened
// is noticed within that time even without Redis.

type soldOutBook struct {
	ttl time.Duration

	mu       sync.RWMutex
	products map[int64]*soldOut
	gen      map[int64]uint64 // bumped by every forget: a slow load cannot resurrect a cleared state
}

// soldOut is what an instance knows of one sold-out product.
type soldOut struct {
	version    int64            // the product row's version when read
	buyers     map[int64]string // seckill buyers: user id -> order number
	checked    atomic.Int64     // unix nanos of the last read of the product row
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

// learn records a sold-out product read at generation gen.
func (b *soldOutBook) learn(id int64, gen uint64, e *soldOut) {
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

// SoldOutKnown reports whether this instance answers a seckill order for
// productID from memory (the sold-out fast path): 409 sold_out, or the
// buyer's existing order. Such answers stay cheap and are not rate limited.
func (s *Service) SoldOutKnown(ctx context.Context, productID int64) bool {
	return s.soldOutEntry(ctx, productID) != nil
}

// soldOutEntry is the book's entry for productID, nil when the product is
// not known to be sold out. An entry older than SoldOutRecheck is checked
// against the product row first, by one request at a time (the others use
// it meanwhile), so every path that trusts the book trusts it for that long
// at most, pub/sub or not.
func (s *Service) soldOutEntry(ctx context.Context, productID int64) *soldOut {
	e := s.book.get(productID)
	if e == nil {
		return nil
	}
	if time.Since(time.Unix(0, e.checked.Load())) > s.book.ttl && e.refreshing.CompareAndSwap(false, true) {
		still := s.recheckSoldOut(ctx, productID, e)
		e.refreshing.Store(false)
		if !still {
			return nil
		}
		e = s.book.get(productID)
	}
	return e
}

// fromBook answers a seckill request from the sold-out book: answered is
// false when the product is not known to be sold out.
func (s *Service) fromBook(ctx context.Context, userID, productID int64) (o Order, answered bool, err error) {
	e := s.soldOutEntry(ctx, productID)
	if e == nil {
		return Order{}, false, nil
	}
	no, bought := e.buyers[userID]
	if !bought {
		s.metrics.fastPath()
		return Order{}, true, inventory.ErrSoldOut
	}
	o, err = s.byNo(ctx, no)
	if err == nil {
		s.metrics.replayed(KindSeckill)
	}
	return o, true, err
}

// recheckSoldOut re-reads the product row of an aging book entry: the same
// version extends it; stock back forgets it; another version still sold out
// (sold again elsewhere) reloads the buyers. A database that cannot answer
// keeps the entry as it is.
func (s *Service) recheckSoldOut(ctx context.Context, id int64, e *soldOut) bool {
	p, err := s.inv.Get(ctx, id)
	switch {
	case err != nil:
		return true
	case p.Stock > 0:
		s.book.forget(id)
		return false
	case p.Version == e.version:
		e.checked.Store(time.Now().UnixNano())
		return true
	}
	s.learnSoldOut(ctx, id)
	return s.book.get(id) != nil
}

// learnSoldOut reads the product row and its seckill buyers in one
// snapshot and records them when the product has no stock.
func (s *Service) learnSoldOut(ctx context.Context, id int64) {
	gen := s.book.generation(id)
	e := &soldOut{buyers: map[int64]string{}}
	var stock int64
	err := dbx.ReadTx(ctx, s.db, func(tx *gorm.DB) error {
		var p inventory.Product
		if err := tx.Take(&p, id).Error; err != nil {
			return err
		}
		stock, e.version = p.Stock, p.Version
		rows, err := tx.Model(&Order{}).Select("user_id, order_no").Where("product_id = ? AND kind = ?", id, KindSeckill).Rows()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var uid int64
			var no string
			if err := rows.Scan(&uid, &no); err != nil {
				return err
			}
			e.buyers[uid] = no
		}
		return rows.Err()
	})
	if err != nil {
		s.log.Warn("sold-out book not loaded (buyers take the locked path)", "product_id", id, "err", err)
		return
	}
	if stock <= 0 {
		s.book.learn(id, gen, e)
	}
}
