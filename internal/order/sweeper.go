package order

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/inventory"
)

// Sweep cancels up to batch pending orders older than timeout, oldest
// first, and returns how many this call cancelled. Every instance may sweep
// at once: each order is claimed by its guarded update, so it is cancelled,
// and its stock returned, exactly once.
//
// The product lock is tried once: buyers go first, and a product whose lock
// is busy is left for a later round while the call goes on to the next
// oldest orders of other products, so one hot product cannot stall the rest
// (its orders are skipped, not retried, within the call).
func (s *Service) Sweep(ctx context.Context, timeout time.Duration, batch int) (int, error) {
	cutoff := dbx.Now().Add(-timeout)
	var busy []int64
	n := 0
	// Every order a round reads leaves the pending set (cancelled, or paid
	// meanwhile) or puts its product on the busy list, so rounds end; the
	// bound is a guard.
	for round := 0; n < batch && round <= batch; round++ {
		q := s.db.WithContext(ctx).Where("status = ? AND created_at < ?", StatusPending, cutoff)
		if len(busy) > 0 {
			q = q.Where("product_id NOT IN ?", busy)
		}
		var due []Order
		if err := q.Order("created_at").Limit(batch - n).Find(&due).Error; err != nil {
			return n, err
		}
		if len(due) == 0 {
			return n, nil
		}
		for _, o := range due {
			if slices.Contains(busy, o.ProductID) {
				continue
			}
			_, won, err := s.cancel(ctx, o, "timeout", inventory.TryOnce)
			switch {
			case err == nil:
				if won {
					n++
				}
			case errors.Is(err, ErrInvalidState): // paid meanwhile: the payment won
			case errors.Is(err, inventory.ErrBusy):
				busy = append(busy, o.ProductID)
			default:
				return n, err
			}
		}
	}
	return n, nil
}

// RunSweeper sweeps every interval until ctx ends.
func (s *Service) RunSweeper(ctx context.Context, interval, timeout time.Duration) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			n, err := s.Sweep(ctx, timeout, 100)
			if err != nil && ctx.Err() == nil {
				s.log.Warn("sweeper", "err", err)
			}
			if n > 0 {
				s.log.Info("sweeper cancelled unpaid orders", "count", n, "timeout", timeout)
			}
			if n < 100 || ctx.Err() != nil {
				break
			}
		}
	}
}
