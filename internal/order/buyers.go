package order

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/seckill-lab/shop/internal/inventory"
)

// The buyer lists are order's half of the sold-out fast path. Inventory
// knows which products are sold out, and at which version of their row;
// for each of those this instance reads the product's seckill buyers
// (user -> order number) from the orders table once per version. A refusal
// is then a map lookup, and a repeat buyer one point read of its order: no
// Redis, no lock, no stock row.
//
// The buyers are read after inventory read the empty row, so every order
// of that version is among them (its order committed with its stock); a
// buyer of a later sale found as well is a real buyer all the same.
//
// A list holds at most Config.SoldOutBuyers buyers. A product sold to more
// keeps that many, and a user not on its list is looked up by the order
// number only this user can have: one point read on the unique index, no
// Redis, no lock.
//
// The read is bounded (buyersReadFor): a sold-out batch answers only once
// it is done, so a slow database must not hold that answer. A read cut
// short keeps the buyers it got and is marked partial, so the database
// answers for the others the same way.

type buyerLists struct {
	mu       sync.RWMutex
	products map[int64]*buyerList
	readFor  time.Duration // bound of one read of a product's buyers
}

// buyerList is the seckill buyers of one product sold out at version.
type buyerList struct {
	version int64
	ready   chan struct{} // closed once the list is read (or failed)
	byUser  map[int64]string
	partial bool // more buyers than the list holds: the database answers for the rest
	ok      bool // read
}

// defaultSoldOutBuyers bounds a product's buyer list when Config leaves it 0.
const defaultSoldOutBuyers = 100_000

// buyersReadFor bounds the read of a sold-out product's buyers.
const buyersReadFor = 500 * time.Millisecond

func newBuyerLists() *buyerLists {
	return &buyerLists{products: map[int64]*buyerList{}, readFor: buyersReadFor}
}

// fromBook answers a seckill request for a product inventory's sold-out
// book has at version: answered is false when its buyers could not be read
// (the request then takes the locked path).
func (s *Service) fromBook(ctx context.Context, userID, productID, version int64) (o Order, answered bool, err error) {
	l := s.buyersOf(ctx, productID, version)
	if l == nil {
		return Order{}, false, nil
	}
	no, bought := l.byUser[userID]
	if !bought && l.partial {
		o, err = s.byNo(ctx, SeckillNo(userID, productID))
		switch {
		case err == nil:
			s.metrics.replayed(KindSeckill)
			return o, true, nil
		case !errors.Is(err, ErrNotFound):
			return Order{}, false, nil // the locked path decides
		}
	}
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

// buyersOf is the buyer list of productID sold out at version, read by one
// request while the others wait for it; nil when it could not be read (the
// next request tries again).
func (s *Service) buyersOf(ctx context.Context, productID, version int64) *buyerList {
	b := s.buyers
	b.mu.RLock()
	l := b.products[productID]
	b.mu.RUnlock()
	if l == nil || l.version != version {
		b.mu.Lock()
		if l = b.products[productID]; l == nil || l.version != version {
			l = &buyerList{version: version, ready: make(chan struct{})}
			b.products[productID] = l
			b.mu.Unlock()
			s.readBuyers(ctx, productID, l)
		} else {
			b.mu.Unlock()
		}
	}
	select {
	case <-l.ready:
	case <-ctx.Done():
		return nil
	}
	if !l.ok {
		return nil
	}
	return l
}

// readBuyers fills l from the orders table and closes its ready channel.
// A read cut short by its bound leaves l partial: the buyers it got, and
// the database for the rest.
func (s *Service) readBuyers(ctx context.Context, productID int64, l *buyerList) {
	defer close(l.ready)
	limit := cmp.Or(s.cfg.SoldOutBuyers, defaultSoldOutBuyers)
	byUser := map[int64]string{}
	partial := false
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.buyers.readFor)
	defer cancel()
	err := func() error {
		rows, err := s.db.WithContext(ctx).Model(&Order{}).Select("user_id, order_no").
			Where("product_id = ? AND kind = ?", productID, KindSeckill).Limit(limit + 1).Rows()
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
			if len(byUser) == limit {
				partial = true
				break
			}
			byUser[uid] = no
		}
		return rows.Err()
	}()
	if err != nil && ctx.Err() != nil {
		s.log.Warn("sold-out buyers read cut short (the database answers for the buyers not read)", "product_id", productID, "read", len(byUser), "err", err)
		err, partial = nil, true
	}
	if err != nil {
		s.log.Warn("sold-out buyers not read (buyers take the locked path)", "product_id", productID, "err", err)
		s.buyers.mu.Lock()
		if s.buyers.products[productID] == l {
			delete(s.buyers.products, productID)
		}
		s.buyers.mu.Unlock()
		return
	}
	l.byUser, l.partial, l.ok = byUser, partial, true
}
