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
	"gorm.io/gorm/clause"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/ride"
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
}

// Service is the order book.
type Service struct {
	db      *gorm.DB
	inv     *inventory.Service
	markers *idem.Markers
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
	bg      context.Context // batches run on it, not on a request's context
	batches *coalescer
	buyers  *buyerBook
}

// New builds the service. Run inventory's Follow to hear of stock returned
// in other instances, and Wait before closing the database.
func New(db *gorm.DB, inv *inventory.Service, markers *idem.Markers, cfg Config, m *Metrics, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.BatchMax = max(cfg.BatchMax, 1)
	s := &Service{db: db, inv: inv, markers: markers, cfg: cfg, log: log, metrics: m,
		bg: context.Background(), buyers: newBuyerBook()}
	s.batches = newCoalescer(cfg.BatchMax, cfg.BatchWindow, s.runBatch)
	return s
}

// Wait returns when no batch is running (call it after the HTTP server
// stopped taking requests).
func (s *Service) Wait() { s.batches.wait() }

func randomNo(prefix string) string {
	return prefix + "X" + rand.Text()
}

func markerKey(userID, productID int64) string {
	return "seckill:" + strconv.FormatInt(userID, 10) + ":" + strconv.FormatInt(productID, 10)
}

// Seckill places the user's one flash-sale order for productID. A repeat, in
// any interleaving, returns the first order with created false. It is the
// two halves below, one after the other; the HTTP handler calls them itself,
// to rate limit between them what the check did not answer.
func (s *Service) Seckill(ctx context.Context, userID, productID int64) (Order, bool, error) {
	return s.PlaceSeckill(ctx, s.CheckSeckill(ctx, userID, productID))
}

// SeckillCheck is a seckill request and what its check, asked once, up
// front, found: what inventory knows of the product (its sold-out book, and
// whether its wants share a lock hold), and, for a product sold out, the
// answer of the buyers book.
type SeckillCheck struct {
	userID, productID int64
	inv               inventory.Check
	answered          bool // o, err are the request's answer
	o                 Order
	err               error
	// marker is the processed-marker read, built for a product not sold
	// out, riding along (its ride) with the rate limiter's trip when the
	// handler makes one with Along's context.
	marker idem.MarkerRead
	ride   *ride.Ride
}

// Along returns ctx carrying the request's processed-marker read: a Redis
// call made with it that shares round trips (the rate limiter's) takes the
// read into its own trip, and PlaceSeckill reads the marker from there
// instead of making a trip of its own. Without such a call, PlaceSeckill
// reads the marker itself.
func (c SeckillCheck) Along(ctx context.Context) context.Context { return ride.With(ctx, c.ride) }

// SoldOut reports whether the check found the product sold out here: the
// request is answered from memory (409 sold_out, or the buyer's order),
// cheap, so it is not rate limited.
func (c SeckillCheck) SoldOut() bool { return c.inv.SoldOut }

// CheckSeckill is the first half of Seckill: inventory's check, asked once;
// for a product sold out, the buyers book answers (buyers.go), or, when its
// buyers could not be read, leaves the request to PlaceSeckill.
func (s *Service) CheckSeckill(ctx context.Context, userID, productID int64) SeckillCheck {
	c := SeckillCheck{userID: userID, productID: productID, inv: s.inv.Check(ctx, productID)}
	switch {
	case s.cfg.NoIdempotency:
	case c.inv.SoldOut:
		c.o, c.answered, c.err = s.fromBook(ctx, userID, productID, c.inv.Version)
	default:
		c.marker = s.markers.Prepare(ctx, markerKey(userID, productID))
		c.ride = ride.New(c.marker.Cmd())
	}
	return c
}

// PlaceSeckill is the second half of Seckill, for a request its check did
// not answer. The flow of the seed: the processed marker (Redis), then the
// batch (place): the product lock, the batch's own check of the order
// numbers (the database, the one that decides), one transaction, the
// answer, the release.
func (s *Service) PlaceSeckill(ctx context.Context, c SeckillCheck) (Order, bool, error) {
	if c.answered {
		return c.o, false, c.err
	}
	userID, productID := c.userID, c.productID
	no := SeckillNo(userID, productID)
	if s.cfg.NoIdempotency {
		no = randomNo("S")
	} else if o, ok := s.fromMarker(ctx, c); ok {
		return o, false, nil
	}
	o, created, err := s.place(ctx, Order{OrderNo: no, UserID: userID, ProductID: productID, Quantity: 1, Kind: KindSeckill}, c.inv.Locks)
	if err != nil && !s.cfg.NoIdempotency {
		// The batch failed (lock busy, Redis or the database could not
		// answer), or the gate (redis-gate) refused it (a repeat whose
		// marker Redis lost): a buyer's repeat still gets its order, by
		// one point read on the unique index. Once the sold-out book knows
		// the product, refusals stop coming here. The read may outlive the
		// request's deadline (a busy answer is often that deadline), but
		// briefly: the client is owed its answer.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fallbackReadTimeout)
		prev, err2 := s.byNo(rctx, no)
		cancel()
		if err2 == nil {
			s.metrics.replayed(KindSeckill)
			return prev, false, nil
		}
	}
	return o, created, err
}

// fallbackReadTimeout bounds Seckill's look-up of a repeat's order after its
// batch failed.
const fallbackReadTimeout = 500 * time.Millisecond

// fromMarker answers a repeat whose processed marker is in Redis, read on
// the check's ride or, when it did not travel, now, with a read of its own
// (not the ride's command: a ride taken and not answered may still be
// written by its taker). A marker that cannot be read is no answer: the
// batch's own check decides.
func (s *Service) fromMarker(ctx context.Context, c SeckillCheck) (Order, bool) {
	var v string
	var ok bool
	var err error
	if c.ride.Replied() {
		v, ok, err = c.marker.Result()
	} else {
		v, ok, err = s.markers.Get(ctx, markerKey(c.userID, c.productID))
	}
	if err != nil || !ok {
		return Order{}, false
	}
	o, err := s.byNo(ctx, v)
	if err != nil {
		return Order{}, false
	}
	s.metrics.replayed(KindSeckill)
	return o, true
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
		s.markAll(s.answerBatch(o.ProductID, []*request{r}))
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
			s.inv.Returned(ctx, productID, units)
		}
		return err
	})
	if err == nil {
		s.metrics.cancelled(reason, len(done))
	}
	return done, err
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
