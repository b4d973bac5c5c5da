// Package order creates orders (seckill and regular) exactly once, and moves
// them through pending -> paid | cancelled with guarded updates. Stock comes
// from inventory; duplicates are stopped by a processed marker in Redis (fast)
// and by the unique order number derived from the business key (final).
package order

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
)

// Errors the HTTP layer maps to problem codes.
var (
	ErrNotFound     = errors.New("order not found")
	ErrInvalidState = errors.New("order is not in a state that allows this")
	// ErrRequestMismatch: the business key was used before for a different
	// request (the database's answer when Redis forgot the idempotency record).
	ErrRequestMismatch = errors.New("idempotency key reused with a different request")
)

// Kinds and statuses.
const (
	KindSeckill = "seckill"
	KindRegular = "regular"

	StatusPending   = "pending"
	StatusPaid      = "paid"
	StatusCancelled = "cancelled"
)

// Order is a row of orders.
type Order struct {
	ID          int64 `gorm:"primaryKey"`
	OrderNo     string
	UserID      int64
	ProductID   int64
	Quantity    int64
	AmountCents int64
	Kind        string
	Status      string
	Version     int64
	IdemKey     *string
	RequestHash string
	CreatedAt   time.Time
	PaidAt      *time.Time
	CancelledAt *time.Time
	UpdatedAt   time.Time
}

// Now is the service clock: UTC at the microsecond the database keeps, so a
// response rendered now and one rendered from the row later are identical.
func Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// Config tunes the service.
type Config struct {
	MarkerPrefix string
	MarkerTTL    time.Duration
	// NoIdempotency is a LAB switch: random order numbers, no marker, so
	// retries create duplicates the audit must catch.
	NoIdempotency bool
}

// Service is the order book.
type Service struct {
	db      *gorm.DB
	inv     *inventory.Service
	markers *idem.Markers
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
}

// New builds the service.
func New(db *gorm.DB, inv *inventory.Service, markers *idem.Markers, cfg Config, m *Metrics, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{db: db, inv: inv, markers: markers, cfg: cfg, log: log, metrics: m}
}

// existing carries an order found by the "check again" step out of Deduct.
type existing struct{ o Order }

func (existing) Error() string { return "order exists" }

func randomNo(prefix string) string {
	return prefix + "X" + rand.Text()
}

// Seckill places the user's one flash-sale order for productID. A repeat, in
// any interleaving, returns the first order with created false. The flow is
// the seed's: processed marker -> lock -> check again -> transaction -> mark
// -> release.
func (s *Service) Seckill(ctx context.Context, userID, productID int64) (Order, bool, error) {
	uid, pid := strconv.FormatInt(userID, 10), strconv.FormatInt(productID, 10)
	no := idem.OrderNo("S", uid, pid)
	marker := "seckill:" + uid + ":" + pid
	if s.cfg.NoIdempotency {
		no = randomNo("S")
	} else if v, ok, err := s.markers.Get(ctx, marker); err == nil && ok {
		if o, err := s.byNo(ctx, v); err == nil {
			s.metrics.replayed(KindSeckill)
			return o, false, nil
		}
	}
	o, created, err := s.create(ctx, inventory.Deduction{ProductID: productID, Quantity: 1, OrderNo: no},
		Order{OrderNo: no, UserID: userID, ProductID: productID, Quantity: 1, Kind: KindSeckill}, "", false)
	if (errors.Is(err, inventory.ErrSoldOut) || errors.Is(err, inventory.ErrBusy)) && !s.cfg.NoIdempotency {
		// A buyer's repeat gets its order even after the sale ended, while
		// the lock is contended, and when Redis lost the marker: one point
		// read on the unique index, no lock.
		if prev, err2 := s.byNo(context.WithoutCancel(ctx), no); err2 == nil {
			o, created, err = prev, false, nil
		}
	}
	if err != nil {
		return Order{}, false, err
	}
	if !s.cfg.NoIdempotency {
		if err := s.markers.Mark(context.WithoutCancel(ctx), marker, o.OrderNo); err != nil {
			s.log.Warn("processed marker not written (the unique order number still guards)", "err", err)
		}
	}
	return o, created, nil
}

// Regular places an order for quantity units under the client's business
// key (user + Idempotency-Key, or user + form token), whose derived order
// number is unique. A request whose key was already used returns that order
// (created false) when hash matches, ErrRequestMismatch when not.
func (s *Service) Regular(ctx context.Context, userID, productID, quantity int64, key, hash string) (Order, bool, error) {
	no := idem.OrderNo("R", strconv.FormatInt(userID, 10), key)
	if s.cfg.NoIdempotency {
		no = randomNo("R")
	}
	k := key
	return s.create(ctx, inventory.Deduction{ProductID: productID, Quantity: quantity, OrderNo: no},
		Order{OrderNo: no, UserID: userID, ProductID: productID, Quantity: quantity, Kind: KindRegular, IdemKey: &k, RequestHash: hash}, hash, true)
}

// create runs one deduction whose transaction inserts o; the check again
// and a unique-index violation both resolve to the order already there.
// early adds a lock-free look-up first (regular orders: a retry, or a key
// reused for another request, is answered before any stock is touched;
// seckill relies on its marker instead, keeping the sold-out path cheap).
func (s *Service) create(ctx context.Context, d inventory.Deduction, o Order, hash string, early bool) (Order, bool, error) {
	check := func(ctx context.Context) error {
		prev, err := s.byNo(ctx, o.OrderNo)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return existing{prev}
	}
	if !s.cfg.NoIdempotency {
		d.Recheck = check
		if early {
			if err := check(ctx); err != nil {
				return s.resolve(err, hash)
			}
		}
	}
	d.Insert = func(tx *gorm.DB, p inventory.Product) error {
		o.ID = 0 // a rerun transaction must not reuse the rolled-back id
		now := Now()
		o.AmountCents = p.PriceCents * o.Quantity
		o.Status = StatusPending
		o.CreatedAt, o.UpdatedAt = now, now
		return tx.Create(&o).Error
	}
	_, err := s.inv.Deduct(ctx, d)
	if err == nil {
		s.metrics.created(o.Kind)
		return o, true, nil
	}
	if dbx.IsDuplicate(err) {
		// Lost the race to a twin on the unique order number: its order wins.
		if twin := check(context.WithoutCancel(ctx)); twin != nil {
			err = twin
		}
	}
	return s.resolve(err, hash)
}

func (s *Service) resolve(err error, hash string) (Order, bool, error) {
	var ex existing
	if !errors.As(err, &ex) {
		return Order{}, false, err
	}
	if hash != "" && ex.o.RequestHash != "" && ex.o.RequestHash != hash {
		return Order{}, false, ErrRequestMismatch
	}
	s.metrics.replayed(ex.o.Kind)
	return ex.o, false, nil
}

func (s *Service) byNo(ctx context.Context, no string) (Order, error) {
	var o Order
	err := s.db.WithContext(ctx).Where("order_no = ?", no).Take(&o).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return o, ErrNotFound
	}
	return o, err
}

// Get returns the user's order; another user's order is ErrNotFound.
func (s *Service) Get(ctx context.Context, userID int64, no string) (Order, error) {
	o, err := s.byNo(ctx, no)
	if err == nil && o.UserID != userID {
		return Order{}, ErrNotFound
	}
	return o, err
}

// ListCursor is the position after the last order of a page.
type ListCursor struct {
	CreatedAt time.Time
	OrderNo   string
}

// List returns the user's orders newest first (ties: greater order number
// first), after the cursor when one is given.
func (s *Service) List(ctx context.Context, userID int64, after *ListCursor, limit int) ([]Order, error) {
	q := s.db.WithContext(ctx).Where("user_id = ?", userID)
	if after != nil {
		q = q.Where("(created_at < ? OR (created_at = ? AND order_no < ?))", after.CreatedAt, after.CreatedAt, after.OrderNo)
	}
	var out []Order
	err := q.Order("created_at DESC, order_no DESC").Limit(limit).Find(&out).Error
	return out, err
}

// Cancel cancels the user's pending order and gives its stock back exactly
// once. Cancelling a cancelled order returns it unchanged; a paid one is
// ErrInvalidState.
func (s *Service) Cancel(ctx context.Context, userID int64, no string) (Order, error) {
	o, err := s.Get(ctx, userID, no)
	if err != nil {
		return o, err
	}
	o, _, err = s.cancel(ctx, o, "user", false)
	return o, err
}

// cancel moves o to cancelled with a guarded update and returns its stock in
// the same transaction, under the product lock. won reports whether this
// call made the transition (false: someone else already had). tryOnce
// gives up at once when the product lock is taken (ErrBusy).
func (s *Service) cancel(ctx context.Context, o Order, reason string, tryOnce bool) (out Order, won bool, err error) {
	switch o.Status {
	case StatusCancelled:
		return o, false, nil
	case StatusPaid:
		return o, false, ErrInvalidState
	}
	err = s.inv.WithProductLock(ctx, o.ProductID, tryOnce, func(ctx context.Context) error {
		err := dbx.Tx(ctx, s.db, func(tx *gorm.DB) error {
			won = false
			now := Now()
			for range 5 {
				res := tx.Model(&Order{}).Where("order_no = ? AND status = ? AND version = ?", o.OrderNo, StatusPending, o.Version).
					Updates(map[string]any{"status": StatusCancelled, "cancelled_at": now, "updated_at": now, "version": gorm.Expr("version + 1")})
				if res.Error != nil {
					return res.Error
				}
				if res.RowsAffected == 1 {
					won = true
					if err := s.inv.ReturnTx(tx, o.ProductID, o.Quantity, o.OrderNo); err != nil {
						return err
					}
					return tx.Where("order_no = ?", o.OrderNo).Take(&out).Error
				}
				// 0 rows: decide by re-reading, never by assuming.
				if err := tx.Where("order_no = ?", o.OrderNo).Take(&o).Error; err != nil {
					return err
				}
				switch o.Status {
				case StatusCancelled:
					out = o
					return nil
				case StatusPaid:
					return ErrInvalidState
				}
			}
			return fmt.Errorf("order %s: version kept moving", o.OrderNo)
		})
		if err == nil && won {
			// Committed, and still under the product lock.
			s.inv.Returned(ctx, o.ProductID, o.Quantity)
		}
		return err
	})
	if err == nil && won {
		s.metrics.cancelled(reason)
	}
	return out, won, err
}

// MarkPaidTx moves a pending order to paid inside the caller's transaction
// (the payment's). It returns ErrInvalidState when the guarded update finds
// the order no longer pending at that version; the caller rolls back.
func MarkPaidTx(tx *gorm.DB, o Order, at time.Time) (Order, error) {
	res := tx.Model(&Order{}).Where("order_no = ? AND status = ? AND version = ?", o.OrderNo, StatusPending, o.Version).
		Updates(map[string]any{"status": StatusPaid, "paid_at": at, "updated_at": at, "version": gorm.Expr("version + 1")})
	if res.Error != nil {
		return o, res.Error
	}
	if res.RowsAffected != 1 {
		return o, ErrInvalidState
	}
	err := tx.Where("order_no = ?", o.OrderNo).Take(&o).Error
	return o, err
}

// GetTx reads an order inside a transaction (payment re-reads it there).
func GetTx(tx *gorm.DB, no string) (Order, error) {
	var o Order
	err := tx.Where("order_no = ?", no).Take(&o).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return o, ErrNotFound
	}
	return o, err
}
