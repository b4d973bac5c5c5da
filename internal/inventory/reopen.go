package inventory

import (
	"context"
	"strconv"
	"time"
)

// Stock that comes back (a restock, a cancelled order's return) ends a
// sold-out state in every instance. The instance that returned the stock
// PUBLISHes the product id on one channel after its commit, still under the
// product lock; every instance (itself included) hears it through Follow.
// A lost message (Redis restarting) is covered by the sold-out book's own
// re-reading of the product row (SHOP_SOLD_OUT_CACHE).

func (s *Service) returnsChannel() string { return s.cfg.KeyPrefix + "soldout:reset" }

// Reopen makes a product sellable again everywhere after stock came back:
// call it after the transaction that returned or added the stock
// committed, still holding the product lock.
func (s *Service) Reopen(ctx context.Context, productID, quantity int64) {
	ctx = context.WithoutCancel(ctx)
	s.forget(productID)
	s.gateAdd(ctx, productID, quantity)
	if err := s.rdb.Publish(ctx, s.returnsChannel(), strconv.FormatInt(productID, 10)).Err(); err != nil {
		s.log.Warn("stock-returned message not published (instances re-read the product within SHOP_SOLD_OUT_CACHE)", "product_id", productID, "err", err)
	}
}

// Follow ends the sold-out state of every product whose stock came back in
// any instance, until ctx ends; run it in its own goroutine.
func (s *Service) Follow(ctx context.Context) {
	for ctx.Err() == nil {
		sub := s.rdb.Subscribe(ctx, s.returnsChannel())
		ch := sub.Channel()
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case m, ok := <-ch:
				if !ok {
					break loop
				}
				if id, err := strconv.ParseInt(m.Payload, 10, 64); err == nil {
					s.forget(id)
				}
			}
		}
		_ = sub.Close()
		if ctx.Err() == nil {
			s.log.Warn("stock-returned channel closed; resubscribing")
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
		}
	}
}
