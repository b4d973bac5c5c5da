package order

import (
	"context"
	"errors"
	"time"

	"github.com/seckill-lab/shop/internal/inventory"
)

// Sweep cancels up to batch pending orders older than timeout and returns
// how many this call cancelled. Every instance may sweep at once: each order
// is claimed by its guarded update, so it is cancelled, and its stock
// returned, exactly once.
func (s *Service) Sweep(ctx context.Context, timeout time.Duration, batch int) (int, error) {
	var due []Order
	err := s.db.WithContext(ctx).Where("status = ? AND created_at < ?", StatusPending, Now().Add(-timeout)).
		Order("created_at").Limit(batch).Find(&due).Error
	if err != nil {
		return 0, err
	}
	n := 0
	for _, o := range due {
		// Try the product lock once: buyers go first, a busy product is
		// swept on a later round, and one hot product cannot stall the rest.
		_, won, err := s.cancel(ctx, o, "timeout", true)
		switch {
		case err == nil:
			if won {
				n++
			}
		case errors.Is(err, ErrInvalidState): // paid meanwhile: the payment won
		case errors.Is(err, inventory.ErrBusy): // next round
		default:
			return n, err
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
