package inventory

import (
	"context"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"
)

// The queued seckill mode admits a buyer at the gate (gate.go) when the
// order is accepted, long before a consumer commits it: the unit is held
// for the order number while the message waits in the queue. The hold is
// the gate's own (one per order number, shared with the consumer's batch,
// whose admission of the same number takes nothing more), with a lease
// lengthened to cover the queue's lag (QueueHold's lease): a lease that
// ended while the message still waited would be reaped, its unit given
// back, and the order could then be rejected as sold out after its 202.
// The consumer settles the hold when the order's fate is known: sold
// (placed, or found placed on a redelivery) or given back (rejected).

//go:embed lua/queue_hold.lua
var queueHoldLua string

var queueHold = redis.NewScript(gateLib + queueHoldLua)

// QueueHold is the unit the gate holds for one queued order, carried in its
// message so whichever consumer takes it can settle it.
type QueueHold struct {
	ProductID int64  `json:"product_id"`
	OrderNo   string `json:"order_no"`
	Gen       string `json:"gen"` // the hold's generation; "": the gate took nothing
}

// AdmitQueued takes one unit of productID's gate for the order orderNo and
// holds it for lease (the queue's lag it must outlive). refused is
// ErrSoldOut, ErrInsufficientStock or ErrBusy (units in flight) when the
// gate is empty; a hold with no Gen took nothing: an order with that number
// was sold already. err: Redis or the database could not answer (the unit,
// if taken, comes back when the gate's own lease ends).
func (s *Service) AdmitQueued(ctx context.Context, productID int64, orderNo string, lease time.Duration) (h QueueHold, refused, err error) {
	a, refused, err := s.admit(ctx, productID, Want{OrderNo: orderNo, Quantity: 1})
	h = QueueHold{ProductID: productID, OrderNo: orderNo, Gen: a.gen}
	if err != nil || refused != nil || a.gen == "" {
		return h, refused, err
	}
	g := s.gateKeys(productID)
	err = queueHold.Run(ctx, s.rdb, g[1:3], orderNo, a.gen, lease.Milliseconds()).Err()
	return h, nil, err
}

// SettleQueued ends a queued order's hold: sold keeps the unit (the order
// exists), otherwise it goes back to the gate. Settling twice, or a hold
// already reaped, is harmless (the gate's settle decides per generation).
func (s *Service) SettleQueued(ctx context.Context, h QueueHold, sold bool) {
	s.settle(ctx, h.ProductID, admission{Want: Want{OrderNo: h.OrderNo, Quantity: 1}, gen: h.Gen}, sold)
}
