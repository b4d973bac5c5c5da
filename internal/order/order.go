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
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/tracing"
)

// Errors the HTTP layer maps to problem codes.
var (
	ErrNotFound     = errors.New("order not found")
	ErrInvalidState = errors.New("order is not in a state that allows this")
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

// Config tunes the service.
type Config struct {
	// BatchMax caps how many orders of one product share a lock hold and a
	// transaction; 1 turns coalescing off (each order takes the lock itself).
	BatchMax int
	// BatchWindow is an optional wait before a batch is taken, so more
	// orders can join it; 0 (the default) batches only what queued while
	// the previous batch was in flight.
	BatchWindow time.Duration
	// SoldOutBuyers caps the buyers a sold-out product's list keeps in
	// memory (0: 100,000); the database answers for the others.
	SoldOutBuyers int
	// UnpaidLimit caps the units one user may hold in pending orders
	// (ErrUnpaidLimit beyond it); 0: no cap.
	UnpaidLimit int64
	// NoIdempotency is a LAB switch: random order numbers, no marker, so
	// retries create duplicates the audit must catch.
	NoIdempotency bool
	// Packets, when set, commits a batch in one round trip where it can
	// (packet.go); nil: every batch runs its statements one by one.
	Packets *dbx.Writer
}

// Service places orders and moves them through their states.
type Service struct {
	db      *gorm.DB
	inv     *inventory.Service
	markers *idem.Markers
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	bg      context.Context // batches run on it, not on a request's context
	batches *coalescer
	buyers  *buyerLists
}

// New builds the service. Run inventory's Follow to hear of stock returned
// in other instances, and Wait before closing the database.
func New(db *gorm.DB, inv *inventory.Service, markers *idem.Markers, cfg Config, m *Metrics, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.BatchMax = max(cfg.BatchMax, 1)
	s := &Service{db: db, inv: inv, markers: markers, cfg: cfg, log: log, metrics: m,
		bg: context.Background(), buyers: newBuyerLists()}
	s.batches = newCoalescer(cfg.BatchMax, cfg.BatchWindow, s.leadBatches)
	return s
}

// Wait returns when no batch is running (call it after the HTTP server
// stopped taking requests).
func (s *Service) Wait() { s.batches.wait() }

func randomNo(prefix string) string {
	return prefix + "X" + rand.Text()
}

// Regular places an order for quantity units under the client's business
// key (user + Idempotency-Key, or user + form token), whose derived order
// number is unique. A request whose key was already used returns that order
// (created false) when hash matches, idem.ErrFingerprintMismatch when not.
func (s *Service) Regular(ctx context.Context, userID, productID, quantity int64, key, hash string) (Order, bool, error) {
	chk := s.inv.Check(ctx, productID) // inventory's check, asked once, up front
	no := RegularNo(userID, key)
	if s.cfg.NoIdempotency {
		no = randomNo("R")
	} else {
		// A retry, or a key reused for another request, is answered before
		// any stock is touched, from the database alone.
		prev, err := s.byNo(ctx, no)
		if err == nil {
			r := repeat(prev, hash)
			if r.err == nil {
				s.metrics.replayed(KindRegular)
			}
			return r.o, false, r.err
		}
		if !errors.Is(err, ErrNotFound) {
			return Order{}, false, err
		}
		if chk.SoldOut {
			s.metrics.fastPath()
			return Order{}, false, inventory.ErrSoldOut
		}
	}
	k := key
	return s.place(ctx, Order{OrderNo: no, UserID: userID, ProductID: productID, Quantity: quantity, Kind: KindRegular, IdemKey: &k, RequestHash: hash}, chk.Locks)
}

// place creates o in a batch of its product (alone when coalescing is off
// or, locks false, the product's strategy takes no lock) and waits for the
// batch's answer, whatever ctx does: the batch runs to its end either way.
func (s *Service) place(ctx context.Context, o Order, locks bool) (Order, bool, error) {
	r := &request{o: o, done: make(chan result, 1), rider: tracing.Board(ctx)}
	r.deadline, _ = ctx.Deadline()
	if s.cfg.BatchMax <= 1 || !locks || !s.batches.submit(r) {
		s.markAll(s.answerBatch(nil, o.ProductID, []*request{r}))
	}
	res := s.await(ctx, r)
	switch {
	case res.err != nil:
		return Order{}, false, res.err
	case res.created:
		s.metrics.created(o.Kind)
	default:
		s.metrics.replayed(o.Kind)
	}
	return res.o, res.created, nil
}

// await is r's result. A request whose deadline passes while it still
// queues behind other batches is taken out of the queue and answered busy
// (nothing changed); one already in a batch gets that batch's outcome,
// which its deadline bounds too (see earliestDeadline). So a client waits
// at most its request timeout plus one transaction, even while Redis fails
// over and every batch waits out the lock.
func (s *Service) await(ctx context.Context, r *request) result {
	select {
	case res := <-r.done:
		return res
	case <-ctx.Done():
	}
	if s.batches.withdraw(r) {
		r.rider.Leave(context.Cause(ctx))
		return result{err: fmt.Errorf("%w: the request's deadline passed while batches before it held the product lock: %w", inventory.ErrBusy, context.Cause(ctx))}
	}
	return <-r.done
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
