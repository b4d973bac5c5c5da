package order

import (
	"context"
	"fmt"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/inventory"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Cancel cancels the user's pending order and gives its stock back exactly
// once. Cancelling a cancelled order returns it unchanged; a paid one is
// ErrInvalidState.
func (s *Service) Cancel(ctx context.Context, userID int64, no string) (Order, error) {
	o, err := s.Get(ctx, userID, no)
	if err != nil {
		return o, err
	}
	o, _, err = s.cancel(ctx, o, "user", inventory.WaitForLock)
	return o, err
}

// cancel moves o to cancelled and returns its stock (cancelPending). won
// reports whether this call made the transition (false: someone else
// already had). wait says whether to give up at once when the product lock
// is taken (ErrBusy).
func (s *Service) cancel(ctx context.Context, o Order, reason string, wait inventory.LockWait) (out Order, won bool, err error) {
	switch o.Status {
	case StatusCancelled:
		return o, false, nil
	case StatusPaid:
		return o, false, ErrInvalidState
	}
	done, err := s.cancelPending(ctx, o.ProductID, []string{o.OrderNo}, reason, wait)
	if err != nil {
		return o, false, err
	}
	if len(done) == 1 {
		return done[0], true, nil
	}
	// No longer pending: decide by re-reading, never by assuming (both
	// other states are final).
	if o, err = s.byNo(ctx, o.OrderNo); err != nil {
		return o, false, err
	}
	if o.Status == StatusPaid {
		return o, false, ErrInvalidState
	}
	return o, false, nil
}

// cancelPending cancels those of the orders nos (all of productID) still
// pending, in ONE transaction under the product lock, and gives their stock
// back in it. It locks the rows still pending (a payment racing it waits,
// then finds its order cancelled and changes nothing; a payment that
// committed first leaves its order out), moves exactly those to cancelled
// with one guarded UPDATE, and returns their units with one ledger INSERT
// and one stock UPDATE. It returns the orders it cancelled, as committed.
func (s *Service) cancelPending(ctx context.Context, productID int64, nos []string, reason string, wait inventory.LockWait) (done []Order, err error) {
	err = s.inv.WithProductLock(ctx, productID, wait, func(ctx context.Context, fence inventory.Fence) error {
		err := dbx.Tx(ctx, s.db, func(tx *gorm.DB) error {
			done = nil
			var pending []Order
			if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("order_no IN ? AND status = ?", nos, StatusPending).
				Order("order_no").Find(&pending).Error; err != nil {
				return err
			}
			if len(pending) == 0 {
				return nil
			}
			claimed := make([]string, len(pending))
			returns := make([]inventory.Want, len(pending))
			for i, o := range pending {
				claimed[i] = o.OrderNo
				returns[i] = inventory.Want{OrderNo: o.OrderNo, Quantity: o.Quantity}
			}
			now := dbx.Now()
			res := tx.Model(&Order{}).Where("order_no IN ? AND status = ?", claimed, StatusPending).
				Updates(map[string]any{"status": StatusCancelled, "cancelled_at": now, "updated_at": now, "version": gorm.Expr("version + 1")})
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected != int64(len(claimed)) {
				// One moved under us (a writer that took no row lock):
				// roll back, and a later attempt decides by re-reading.
				return fmt.Errorf("%w: orders of product %d moved while being cancelled", inventory.ErrBusy, productID)
			}
			if err := s.inv.ReturnTx(tx, productID, fence, returns); err != nil {
				return err
			}
			return tx.Where("order_no IN ?", claimed).Order("order_no").Find(&done).Error
		})
		if err == nil && len(done) > 0 {
			// Committed, and still under the product lock.
			var units int64
			for _, o := range done {
				units += o.Quantity
			}
			s.inv.Reopen(ctx, productID, units)
		}
		return err
	})
	if err == nil {
		s.metrics.cancelled(reason, len(done))
	}
	return done, err
}
