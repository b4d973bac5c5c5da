package order

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/inventory"
)

// The queued seckill mode (SHOP_SECKILL_MODE=queue, docs/api.md "Queued
// seckill"): the route admits the buyer (the sold-out book, the processed
// marker, the buyer's queued record, the gate's unit), publishes the order
// to a durable queue under its order number and answers 202 once the broker
// confirmed it; a consumer (consume.go) places it later through the same
// coalesced, fenced batches as the synchronous mode.
//
// What the buyer can read before the order exists lives in Redis, in the
// order's queued record (queuedKey): "publishing" while the route waits for
// the confirm (a repeat then is busy), "accepted" once confirmed, until the
// consumer placed it (then the orders row answers) or rejected it (then the
// seckill_rejections row answers, and the record says so too). The
// database never sees an order before its consumer: a lost record only
// costs a repeat its replay until the order is placed (docs/api.md).

// Statuses of the queued mode, before an order row exists.
const (
	StatusQueued   = "queued"
	StatusRejected = "rejected"
)

// Rejection reasons: why an accepted order can never be placed.
const (
	ReasonSoldOut     = "sold_out"
	ReasonUnpaidLimit = "unpaid_limit"
)

// ErrNotAccepted is an order the broker did not confirm in time: nothing
// is promised, its gate unit was given back (503 unavailable).
var ErrNotAccepted = errors.New("the order was not accepted: the queue did not confirm it")

// Publisher puts a message on the durable queue; nil only once the broker
// confirmed it.
type Publisher interface {
	Publish(ctx context.Context, id string, body []byte) error
}

// QueuedConfig tunes the queued mode.
type QueuedConfig struct {
	// Lease is how long an accepted order's gate unit and queued record
	// outlive the queue's lag: a message older than that may find its unit
	// reaped and be rejected if the gate has none left.
	Lease time.Duration
	// ConfirmTimeout bounds the wait for the broker's confirm (503 after).
	ConfirmTimeout time.Duration
	// RejectedRetention is how long a rejected order's record stays in
	// Redis (the database keeps the rejection for good).
	RejectedRetention time.Duration
	KeyPrefix         string
	// NoOrderNo is a LAB switch: the consumer places each message under a
	// random order number (a plain INSERT), so a redelivered message makes
	// a second order.
	NoOrderNo bool
}

// Queued is the order book's queued mode, over its Service.
type Queued struct {
	s       *Service
	pub     Publisher
	rdb     redis.UniversalClient
	cfg     QueuedConfig
	metrics *QueueMetrics
}

// Queued returns the queued mode of s, publishing with pub.
func (s *Service) Queued(pub Publisher, rdb redis.UniversalClient, cfg QueuedConfig, m *QueueMetrics) *Queued {
	return &Queued{s: s, pub: pub, rdb: rdb, cfg: cfg, metrics: m}
}

// Ticket is a seckill order as its buyer reads it in the queued mode: the
// order once placed; before that its number, buyer and product with status
// queued, or rejected with Reason.
type Ticket struct {
	Order
	Reason string
}

// queuedRecord is the order's queued record in Redis, and the body of its
// message.
type queuedRecord struct {
	State      string              `json:"state"` // publishing, accepted, rejected
	OrderNo    string              `json:"order_no"`
	UserID     int64               `json:"user_id"`
	ProductID  int64               `json:"product_id"`
	AcceptedAt int64               `json:"accepted_at"` // unix ms
	Reason     string              `json:"reason,omitempty"`
	Hold       inventory.QueueHold `json:"hold"`
}

func (r queuedRecord) ticket() Ticket {
	status := StatusQueued
	if r.State == StatusRejected {
		status = StatusRejected
	}
	return Ticket{Order: Order{OrderNo: r.OrderNo, UserID: r.UserID, ProductID: r.ProductID, Quantity: 1,
		Kind: KindSeckill, Status: status, CreatedAt: time.UnixMilli(r.AcceptedAt).UTC()}, Reason: r.Reason}
}

func (q *Queued) queuedKey(no string) string { return q.cfg.KeyPrefix + "queued:" + no }

//go:embed queued.lua
var queuedReleaseLua string

var queuedRelease = redis.NewScript(queuedReleaseLua)

// Accept admits userID's one seckill order for productID into the queue.
// accepted: it was published and confirmed now (202); otherwise t is the
// buyer's earlier order (placed, queued or rejected: 200), or err says why
// not (sold out, busy, ErrNotAccepted, a dependency down).
func (q *Queued) Accept(ctx context.Context, userID, productID int64) (t Ticket, accepted bool, err error) {
	no := SeckillNo(userID, productID)
	c := q.s.CheckSeckill(ctx, userID, productID)
	if c.answered {
		if errors.Is(c.err, inventory.ErrSoldOut) {
			// Sold out in the database: an accepted order of this buyer
			// may still wait in the queue (to be rejected).
			if r, ok, _ := q.record(ctx, no); ok && r.State != "publishing" {
				return r.ticket(), false, nil
			}
		}
		return Ticket{Order: c.o}, false, c.err
	}
	if o, ok := q.s.fromMarker(ctx, c); ok {
		return Ticket{Order: o}, false, nil
	}
	r, ok, err := q.record(ctx, no)
	switch {
	case err != nil:
		return Ticket{}, false, err
	case ok && r.State == "publishing":
		return Ticket{}, false, fmt.Errorf("%w: this buyer's first request is still being queued", inventory.ErrBusy)
	case ok:
		return r.ticket(), false, nil
	}
	return q.admit(ctx, queuedRecord{State: "publishing", OrderNo: no, UserID: userID, ProductID: productID, AcceptedAt: time.Now().UnixMilli()})
}

// admit claims the order's queued record, takes its unit at the gate,
// publishes it and records it accepted once confirmed. A step that fails
// undoes the ones before it: the unit goes back, the claim is given up.
func (q *Queued) admit(ctx context.Context, r queuedRecord) (Ticket, bool, error) {
	key := q.queuedKey(r.OrderNo)
	claim, _ := json.Marshal(r)
	won, err := q.rdb.SetNX(ctx, key, claim, q.cfg.ConfirmTimeout+claimSlack).Result()
	switch {
	case err != nil:
		return Ticket{}, false, err
	case !won:
		return Ticket{}, false, fmt.Errorf("%w: this buyer's first request is still being queued", inventory.ErrBusy)
	}
	release := func() { queuedRelease.Run(context.WithoutCancel(ctx), q.rdb, []string{key}, claim) }
	hold, refused, err := q.s.inv.AdmitQueued(ctx, r.ProductID, r.OrderNo, q.cfg.Lease)
	if err != nil || refused != nil {
		release()
		return Ticket{}, false, errors.Join(refused, err)
	}
	if hold.Gen == "" {
		// The gate knows the order was sold already.
		release()
		o, err := q.s.byNo(ctx, r.OrderNo)
		return Ticket{Order: o}, false, err
	}
	r.Hold = hold
	if err := q.publish(ctx, r); err != nil {
		q.s.inv.SettleQueued(ctx, hold, false)
		release()
		q.metrics.accepted("unconfirmed")
		return Ticket{}, false, err
	}
	r.State = "accepted"
	rec, _ := json.Marshal(r)
	if err := q.rdb.Set(context.WithoutCancel(ctx), key, rec, q.cfg.Lease).Err(); err != nil {
		// Accepted all the same: the message is in the queue. Only a
		// repeat's replay waits for the consumer.
		q.s.log.Warn("queued record not written (a repeat is answered once the order is placed)", "order_no", r.OrderNo, "err", err)
	}
	q.metrics.accepted("confirmed")
	return r.ticket(), true, nil
}

// claimSlack is how much longer than the confirm wait an order's claim
// lives: the gate's admission before the publish may wait for the product
// lock once (its seed). A claim that outlived its request (the process
// died) leaves the buyer's repeat busy that long at most.
const claimSlack = 10 * time.Second

// publish sends r (its message id the order number) and waits for the
// broker's confirm, ConfirmTimeout at most.
func (q *Queued) publish(ctx context.Context, r queuedRecord) error {
	r.State = "accepted"
	body, _ := json.Marshal(r)
	ctx, cancel := context.WithTimeout(ctx, q.cfg.ConfirmTimeout)
	defer cancel()
	if err := q.pub.Publish(ctx, r.OrderNo, body); err != nil {
		return fmt.Errorf("%w: %w", ErrNotAccepted, err)
	}
	return nil
}

// record reads the order's queued record (ok false: none).
func (q *Queued) record(ctx context.Context, no string) (r queuedRecord, ok bool, err error) {
	v, err := q.rdb.Get(ctx, q.queuedKey(no)).Bytes()
	if errors.Is(err, redis.Nil) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return r, false, fmt.Errorf("queued record of %s: %w", no, err)
	}
	return r, true, nil
}

// Get returns the user's order as the queued mode shows it: the placed
// order, else its rejection, else its queued record; ErrNotFound when none
// is the user's.
func (q *Queued) Get(ctx context.Context, userID int64, no string) (Ticket, error) {
	o, err := q.s.Get(ctx, userID, no)
	if !errors.Is(err, ErrNotFound) {
		return Ticket{Order: o}, err
	}
	var rej Rejection
	err = q.s.db.WithContext(ctx).Where("order_no = ?", no).Take(&rej).Error
	switch {
	case err == nil && rej.UserID == userID:
		return rej.ticket(), nil
	case err == nil:
		return Ticket{}, ErrNotFound
	case !errors.Is(err, gorm.ErrRecordNotFound):
		return Ticket{}, err
	}
	r, ok, err := q.record(ctx, no)
	switch {
	case err != nil:
		return Ticket{}, err
	case !ok || r.UserID != userID || r.State == "publishing":
		return Ticket{}, ErrNotFound
	}
	return r.ticket(), nil
}

// Rejection is a row of seckill_rejections: an accepted order that can
// never be placed.
type Rejection struct {
	OrderNo   string `gorm:"primaryKey"`
	UserID    int64
	ProductID int64
	Reason    string
	CreatedAt time.Time
}

// TableName is the rejections' table.
func (Rejection) TableName() string { return "seckill_rejections" }

func (r Rejection) ticket() Ticket {
	return Ticket{Order: Order{OrderNo: r.OrderNo, UserID: r.UserID, ProductID: r.ProductID, Quantity: 1,
		Kind: KindSeckill, Status: StatusRejected, CreatedAt: r.CreatedAt}, Reason: r.Reason}
}
