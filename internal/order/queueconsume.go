package order

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"gorm.io/gorm/clause"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/inventory"
)

// The consumer's side of the queued mode. A message is delivered at least
// once: a consumer that dies, or loses its link, before acknowledging has
// it delivered again, possibly after its order was committed. So a message
// is handled as a repeat may be: the order number decides. Placed already
// (the batch's check of the unique order number finds it): a replay;
// rejected already (its seckill_rejections row): nothing to do. Either
// way the message is acknowledged only after the database has its fate:
// an order COMMITted, or its rejection.

// consumeTimeout bounds one message's placing; past it the message goes
// back to the queue (the batch runs to its end either way).
const consumeTimeout = 30 * time.Second

// Take handles one delivered message: places its order through the batch
// path (coalesced with the other messages of its product, fenced), or
// records it rejected, then settles its gate unit. done: the message may be
// acknowledged; false: it must be delivered again (the database, Redis or
// the product lock could not answer).
func (q *Queued) Take(ctx context.Context, body []byte, redelivered bool) (done bool) {
	if redelivered {
		q.metrics.redelivered()
	}
	var r queuedRecord
	if err := json.Unmarshal(body, &r); err != nil || r.OrderNo == "" {
		// Nothing that Accept publishes: nobody was promised it.
		q.s.log.Error("queued order: a message that is no order is dropped", "err", err, "body", string(body))
		q.metrics.consumed("malformed")
		return true
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), consumeTimeout)
	defer cancel()
	rejected, err := q.rejected(ctx, r.OrderNo)
	if err != nil {
		q.metrics.consumed("retried")
		return false
	}
	if rejected {
		q.s.inv.SettleQueued(ctx, r.Hold, false)
		q.metrics.consumed("rejected")
		return true
	}
	no := r.OrderNo
	if q.cfg.NoOrderNo {
		no = randomNo("S")
	}
	_, created, err := q.s.place(ctx, Order{OrderNo: no, UserID: r.UserID, ProductID: r.ProductID, Quantity: 1, Kind: KindSeckill},
		q.s.inv.Check(ctx, r.ProductID).Locks)
	if reason, never := rejection(err); never {
		return q.reject(ctx, r, reason)
	}
	if err != nil {
		q.s.log.Warn("queued order not placed yet; delivered again", "order_no", r.OrderNo, "err", err)
		q.metrics.consumed("retried")
		return false
	}
	q.s.inv.SettleQueued(ctx, r.Hold, true)
	q.rdb.Del(ctx, q.queuedKey(r.OrderNo))
	if created {
		q.metrics.consumed("placed")
		q.metrics.lag(time.Since(time.UnixMilli(r.AcceptedAt)))
	} else {
		q.metrics.consumed("replayed")
	}
	return true
}

// rejection says whether err means the order can never be placed, and why.
func rejection(err error) (reason string, never bool) {
	switch {
	case errors.Is(err, inventory.ErrSoldOut), errors.Is(err, inventory.ErrInsufficientStock):
		return ReasonSoldOut, true
	case errors.Is(err, ErrUnpaidLimit):
		return ReasonUnpaidLimit, true
	}
	return "", false
}

// reject records r's order rejected for reason (once: a redelivery finds
// the row), gives its unit back to the gate and tells the buyer's record.
func (q *Queued) reject(ctx context.Context, r queuedRecord, reason string) bool {
	row := Rejection{OrderNo: r.OrderNo, UserID: r.UserID, ProductID: r.ProductID, Reason: reason, CreatedAt: dbx.Now()}
	if err := q.s.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&row).Error; err != nil {
		q.s.log.Warn("queued order rejection not recorded yet; delivered again", "order_no", r.OrderNo, "err", err)
		q.metrics.consumed("retried")
		return false
	}
	q.s.inv.SettleQueued(ctx, r.Hold, false)
	r.State, r.Reason = StatusRejected, reason
	rec, _ := json.Marshal(r)
	if err := q.rdb.Set(ctx, q.queuedKey(r.OrderNo), rec, q.cfg.RejectedRetention).Err(); err != nil {
		q.s.log.Warn("queued record not marked rejected (the database answers)", "order_no", r.OrderNo, "err", err)
	}
	q.metrics.consumed("rejected")
	return true
}

// rejected reports whether the order number was rejected already.
func (q *Queued) rejected(ctx context.Context, no string) (bool, error) {
	var n int64
	err := q.s.db.WithContext(ctx).Model(&Rejection{}).Where("order_no = ?", no).Count(&n).Error
	return n > 0, err
}
