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
// first, and returns how many this call cancelled: the due orders of one
// product in one transaction (cancelPending). Every instance may sweep at
// once: each order is claimed by its guarded update, so it is cancelled,
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
		for _, p := range byProduct(due) {
			if slices.Contains(busy, p.id) {
				continue
			}
			// One transaction per product; an order paid meanwhile is
			// left out (the payment won).
			done, err := s.cancelPending(ctx, p.id, p.nos, "timeout", inventory.TryOnce)
			switch {
			case err == nil:
				n += len(done)
			case errors.Is(err, inventory.ErrBusy):
				busy = append(busy, p.id)
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

// productOrders are the order numbers of one product's due orders.
type productOrders struct {
	id  int64
	nos []string
}

// byProduct groups orders by product, the products in the order of their
// first order (the oldest, for the sweeper).
func byProduct(orders []Order) []productOrders {
	var out []productOrders
	at := map[int64]int{}
	for _, o := range orders {
		i, ok := at[o.ProductID]
		if !ok {
			i = len(out)
			at[o.ProductID] = i
			out = append(out, productOrders{id: o.ProductID})
		}
		out[i].nos = append(out[i].nos, o.OrderNo)
	}
	return out
}
