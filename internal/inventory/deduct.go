package inventory

import (
	"context"
	"errors"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/lockx"
)

// Deduction is one order's claim on stock.
type Deduction struct {
	ProductID int64
	Quantity  int64
	OrderNo   string
	// Recheck runs after the lock is held and before the transaction: the
	// seed's "check again", so a request that raced its own twin sees the
	// twin's committed order instead of buying twice. Lock-free strategies
	// run it too (it is then only a hint; the unique order number decides).
	Recheck func(ctx context.Context) error
	// Insert writes the order in the same transaction as the stock update.
	Insert func(tx *gorm.DB, p Product) error
}

// Deduct takes the stock for d and runs d.Insert in the same transaction,
// by the configured strategy. The lock (when there is one) is released only
// after COMMIT. Errors: ErrNotFound, ErrSoldOut (nothing left),
// ErrInsufficientStock (some left, not enough), ErrBusy, or Insert's error.
func (s *Service) Deduct(ctx context.Context, d Deduction) (p Product, err error) {
	start := time.Now()
	strategy := s.strategyFor(d.ProductID)
	defer func() { s.metrics.deducted(strategy, err, time.Since(start)) }()
	if s.soldOut.is(ctx, d.ProductID) {
		s.metrics.fastPath()
		return Product{}, ErrSoldOut
	}
	switch strategy {
	case Naive:
		return s.readModifyWrite(ctx, d, 0)
	case Conditional:
		return s.conditional(ctx, d, 0)
	case Lock:
		err = s.withDeductLock(ctx, d, func(ctx context.Context, fence int64) error {
			p, err = s.readModifyWrite(ctx, d, fence)
			return err
		})
		return p, err
	case RedisGate:
		return s.gated(ctx, d)
	default: // LockFence
		return s.lockFence(ctx, d)
	}
}

// lockFence is the safe strategy: the lock keeps buyers of one product in
// line; the fenced conditional update makes a holder whose lease ran out
// (paused, partitioned) unable to write. A stale fence caused by Redis losing
// its counter is repaired by raising the counter to what the database last
// accepted and taking the lock again.
func (s *Service) lockFence(ctx context.Context, d Deduction) (p Product, err error) {
	for attempt := 0; attempt < 3; attempt++ {
		err = s.withDeductLock(ctx, d, func(ctx context.Context, fence int64) error {
			p, err = s.conditional(ctx, d, fence)
			return err
		})
		if !errors.Is(err, errStaleFence) {
			return p, err
		}
		s.metrics.staleFence()
		s.log.Warn("stock write refused: stale fencing token; raising the fence and retrying", "product_id", d.ProductID, "db_fence", p.Fence)
		if err := s.locks.RaiseFence(ctx, lockKey(d.ProductID), p.Fence); err != nil {
			return Product{}, err
		}
	}
	return Product{}, ErrBusy
}

// withDeductLock holds the product lock around fn. With the lab pause on,
// the watchdog is left off: the pause stands in for a stop-the-world pause
// during which no renewal could have run either.
func (s *Service) withDeductLock(ctx context.Context, d Deduction, fn func(ctx context.Context, fence int64) error) error {
	paused := s.cfg.PauseAfterLock > 0
	l, err := s.locks.Acquire(ctx, lockKey(d.ProductID), lockx.AcquireOptions{TTL: s.cfg.LockTTL, Wait: s.cfg.LockWait, Watchdog: !paused})
	if errors.Is(err, lockx.ErrNotObtained) {
		s.metrics.busy()
		return ErrBusy
	}
	if err != nil {
		return err
	}
	defer func() {
		if err := l.Release(context.WithoutCancel(ctx)); err != nil {
			s.metrics.releaseFailed()
			s.log.Warn("product lock was lost before release", "product_id", d.ProductID, "fence", l.Fence(), "err", err)
		}
	}()
	wctx := l.Context()
	if paused {
		// A paused process does not notice it lost the lock: run on the
		// caller's context, not the lock's, so the fence alone must stop it.
		wctx = ctx
	}
	if d.Recheck != nil {
		if err := d.Recheck(wctx); err != nil {
			return err
		}
	}
	return lostIsBusy(l, fn(wctx, l.Fence()))
}

// conditional: one guarded UPDATE decides; the fence (0 = none) rejects a
// holder older than the last accepted write.
func (s *Service) conditional(ctx context.Context, d Deduction, fence int64) (p Product, err error) {
	if fence == 0 && d.Recheck != nil {
		if err := d.Recheck(ctx); err != nil {
			return p, err
		}
	}
	if fence > 0 {
		s.labPause(ctx)
	}
	err = dbx.Tx(ctx, s.db, func(tx *gorm.DB) error {
		now := time.Now().UTC()
		q := "UPDATE products SET stock = stock - ?, version = version + 1, updated_at = ? WHERE id = ? AND stock >= ?"
		args := []any{d.Quantity, now, d.ProductID, d.Quantity}
		if fence > 0 {
			q = "UPDATE products SET stock = stock - ?, fence = ?, version = version + 1, updated_at = ? WHERE id = ? AND stock >= ? AND fence <= ?"
			args = []any{d.Quantity, fence, now, d.ProductID, d.Quantity, fence}
		}
		res := tx.Exec(q, args...)
		if res.Error != nil {
			return res.Error
		}
		if err := tx.Take(&p, d.ProductID).Error; err != nil {
			if errors.Is(err, gorm.ErrRecordNotFound) {
				return ErrNotFound
			}
			return err
		}
		if res.RowsAffected == 0 {
			// Decide by re-reading, never by assuming.
			switch {
			case p.Stock < d.Quantity:
				return s.shortage(ctx, p)
			case fence > 0 && p.Fence > fence:
				return errStaleFence
			default:
				return errors.New("inventory: conditional update hit no row for an unknown reason")
			}
		}
		return s.record(tx, d, p, fence)
	})
	if err == nil && p.Stock == 0 {
		s.soldOut.mark(ctx, d.ProductID)
	}
	return p, err
}

// readModifyWrite is the unsafe classic: read the stock, compute, write the
// number back. Without a lock (naive) concurrent buyers overwrite each
// other; with a lock but no fence (lock) a holder paused past its TTL does.
func (s *Service) readModifyWrite(ctx context.Context, d Deduction, fence int64) (p Product, err error) {
	if fence == 0 && d.Recheck != nil {
		if err := d.Recheck(ctx); err != nil {
			return p, err
		}
	}
	if err := s.db.WithContext(ctx).Take(&p, d.ProductID).Error; err != nil {
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return p, ErrNotFound
		}
		return p, err
	}
	if p.Stock < d.Quantity {
		return p, s.shortage(ctx, p)
	}
	if fence > 0 {
		s.labPause(ctx)
	}
	left := p.Stock - d.Quantity
	err = dbx.Tx(ctx, s.db, func(tx *gorm.DB) error {
		if err := tx.Exec("UPDATE products SET stock = ?, version = version + 1, updated_at = ? WHERE id = ?", left, time.Now().UTC(), d.ProductID).Error; err != nil {
			return err
		}
		p.Stock = left
		return s.record(tx, d, p, fence)
	})
	if err == nil && left == 0 {
		s.soldOut.mark(ctx, d.ProductID)
	}
	return p, err
}

// record appends the ledger row and inserts the order.
func (s *Service) record(tx *gorm.DB, d Deduction, p Product, fence int64) error {
	no := d.OrderNo
	if err := tx.Create(&LedgerRow{ProductID: d.ProductID, Delta: -d.Quantity, Reason: ReasonOrder, OrderNo: &no, Fence: fence, CreatedAt: time.Now().UTC()}).Error; err != nil {
		return err
	}
	return d.Insert(tx, p)
}

// shortage turns "not enough" into the right error and remembers a sold-out
// product.
func (s *Service) shortage(ctx context.Context, p Product) error {
	if p.Stock <= 0 {
		s.soldOut.mark(ctx, p.ID)
		return ErrSoldOut
	}
	return ErrInsufficientStock
}
