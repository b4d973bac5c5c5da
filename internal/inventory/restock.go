package inventory

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/lockx"
)

// Stock that comes back: restocks, and the returns of cancelled orders.

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
	restock := func(ctx context.Context, h *hold) error {
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
			row := LedgerRow{ProductID: id, Delta: quantity, Reason: ReasonRestock, Ref: r, RequestHash: hash, Fence: h.fence(0).Number, CreatedAt: dbx.Now()}
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
			if err := addStock(tx, id, spread(quantity, k), h); err != nil {
				return err
			}
			added = true
			out, err = readTotal(tx, id)
			return err
		})
		if err == nil && added {
			// Still under the lock, after COMMIT: no holder can mark the
			// product sold out on the old stock after this clear.
			s.Reopen(ctx, id, quantity)
		}
		return err
	}
	err = s.withHold(ctx, id, allBuckets(k), s.cfg.LockWait, restock)
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
	return mustMove(tx, productID, 0, units, fence)
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
// the same fence, has written (moveBucket). Named here so the callers of
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
	return s.withHold(ctx, productID, oneBucket(0, false), d, func(ctx context.Context, h *hold) error {
		return fn(ctx, h.fence(0))
	})
}
