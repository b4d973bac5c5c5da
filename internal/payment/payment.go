// Package payment is the shop's money path: wallets kept as an append-only
// ledger, and order payments that never charge twice. The account lock makes
// the balance check and the debit one step; the payments table, written in
// the same transaction as the debit and unique per request and per order, is
// the idempotency record that outlives Redis; guarded (versioned) updates
// decide every race with the sweeper, a cancel or a second payment.
package payment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/order"
)

// Errors the HTTP layer maps to problem codes. Orders that are not the
// caller's are order.ErrNotFound; cancelled ones order.ErrInvalidState.
var (
	ErrInsufficientFunds = errors.New("wallet balance is below the order amount")
	// ErrAlreadyPaid: the order was paid by another request (another key).
	ErrAlreadyPaid = errors.New("order already paid")
	// ErrBusy: the account lock was not obtained in time, or was lost before
	// the transaction committed; nothing was changed.
	ErrBusy = errors.New("account busy, retry later")
	// errConflict: a guarded update matched no row. The transaction is
	// rolled back and the next attempt re-reads to decide the outcome.
	errConflict = errors.New("payment: concurrent change, re-reading")
)

// Wallet ledger reasons.
const (
	ReasonCredit  = "credit"
	ReasonPayment = "payment"
)

// maxAttempts bounds the re-read-and-decide loop of one request.
const maxAttempts = 5

// Wallet is a row of wallets: balance_cents is the sum of the user's ledger,
// version changes on every update so a guarded update can tell.
type Wallet struct {
	UserID       int64 `gorm:"primaryKey;autoIncrement:false"`
	BalanceCents int64
	Version      int64
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// LedgerRow is a row of the append-only wallet ledger. Ref is the order
// number of a payment or the request id of a credit; (reason, ref) is unique.
type LedgerRow struct {
	ID          int64 `gorm:"primaryKey"`
	UserID      int64
	Delta       int64
	Reason      string
	Ref         string
	RequestHash string
	CreatedAt   time.Time
}

// TableName maps LedgerRow to wallet_ledger.
func (LedgerRow) TableName() string { return "wallet_ledger" }

// Payment is a row of payments: the transactional idempotency record of one
// paid order (request_id and order_no are both unique).
type Payment struct {
	ID          int64 `gorm:"primaryKey"`
	RequestID   string
	OrderNo     string
	UserID      int64
	AmountCents int64
	RequestHash string
	Fence       int64
	CreatedAt   time.Time
}

// Config tunes the service.
type Config struct {
	LockTTL  time.Duration // lease of the account lock (renewed by the watchdog)
	LockWait time.Duration // how long a request waits for it before ErrBusy
	// SlowPayment is a LAB switch: each payment sleeps this long inside its
	// locked section, before COMMIT, so the watchdog's renewals show.
	SlowPayment time.Duration
}

// Service is the wallet book.
type Service struct {
	db      *gorm.DB
	locks   *lockx.Client
	cfg     Config
	log     *slog.Logger
	metrics *Metrics
}

// New builds the service.
func New(db *gorm.DB, locks *lockx.Client, cfg Config, m *Metrics, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.SlowPayment > 0 {
		log.Warn("!!! LAB: SLOW PAYMENTS: every payment holds its account lock and transaction open this much longer !!!", "lab_slow_payment", cfg.SlowPayment)
	}
	return &Service{db: db, locks: locks, cfg: cfg, log: log, metrics: m}
}

// AccountLockKey is the lock every balance change of userID is made under.
func AccountLockKey(userID int64) string { return "account:" + strconv.FormatInt(userID, 10) }

// RequestID derives a payment's request id from its idempotency scope: the
// user, the order (the concrete path) and the client's key.
func RequestID(userID int64, orderNo, key string) string {
	return idem.Ref("Y", strconv.FormatInt(userID, 10), orderNo, key)
}

// CreditRef derives a credit's ledger ref from its idempotency scope: the
// principal, the wallet (the concrete path) and the client's key.
func CreditRef(principal string, userID int64, key string) string {
	return idem.Ref("C", principal, strconv.FormatInt(userID, 10), key)
}

// PayRequest is one attempt to pay an order.
type PayRequest struct {
	UserID  int64
	OrderNo string
	Key     string // the client's Idempotency-Key
	// RequestHash fingerprints the request; a key seen before with another
	// hash is idem.ErrFingerprintMismatch. Empty skips the comparison.
	RequestHash string
}

// Result is a payment and the order it paid. Replayed is true when the
// payment was made by an earlier request with the same key.
type Result struct {
	Order    order.Order
	Payment  Payment
	Replayed bool
}

// Pay pays the user's pending order from the wallet, exactly once per order
// and per request: under the account lock, one transaction re-reads the
// order, checks the balance, writes the payment and the ledger row, debits
// the wallet and marks the order paid, the last two with guarded updates.
// A retry of a request that committed is answered from the payments table.
func (s *Service) Pay(ctx context.Context, r PayRequest) (res Result, err error) {
	defer func() { s.metrics.payment(outcomeOf(res, err)) }()
	if r.UserID <= 0 || r.OrderNo == "" || r.Key == "" {
		return Result{}, errors.New("payment: user, order and key are required")
	}
	// Once started, a payment runs to its end even if the client goes away,
	// so that its retry finds a decided outcome; but not past its deadline
	// by more than a grace (see detach).
	ctx, cancel := detach(ctx)
	defer cancel()
	rid := RequestID(r.UserID, r.OrderNo, r.Key)
	if res, ok, err := s.replay(s.db.WithContext(ctx), rid, r); ok || err != nil {
		return res, err
	}
	err = s.locked(ctx, r.UserID, func(lctx context.Context, fence lockx.Fence) error {
		return rerun(lctx, "order "+r.OrderNo, func() (err error) {
			res, err = s.payOnce(lctx, fence, rid, r)
			return err
		})
	})
	if errors.Is(err, errLockLost) {
		// The transaction did not commit unless COMMIT raced the loss:
		// decide by re-reading.
		if res, ok, err2 := s.replay(s.db.WithContext(ctx), rid, r); ok || err2 != nil {
			return res, err2
		}
		return Result{}, err
	}
	return res, err
}

// payOnce is one transaction of Pay.
func (s *Service) payOnce(ctx context.Context, fence lockx.Fence, rid string, r PayRequest) (res Result, err error) {
	err = s.tx(ctx, func(tx *gorm.DB) error {
		var done bool
		var err error
		if res, done, err = s.replay(tx, rid, r); done || err != nil {
			return err
		}
		o, err := order.GetTx(tx, r.OrderNo)
		if err != nil {
			return err
		}
		if o.UserID != r.UserID {
			return order.ErrNotFound // never reveal another user's order
		}
		switch o.Status {
		case order.StatusPending:
		case order.StatusPaid:
			return ErrAlreadyPaid // not by this request: replay found none
		case order.StatusCancelled:
			return order.ErrInvalidState
		default:
			return fmt.Errorf("order %s: unknown status %q", o.OrderNo, o.Status)
		}
		w, err := walletTx(tx, r.UserID, o.AmountCents == 0)
		if err != nil {
			return err
		}
		if w.BalanceCents < o.AmountCents {
			return ErrInsufficientFunds
		}
		now := dbx.Now()
		p := Payment{RequestID: rid, OrderNo: o.OrderNo, UserID: r.UserID, AmountCents: o.AmountCents,
			RequestHash: r.RequestHash, Fence: fence.Number, CreatedAt: now}
		if err := tx.Create(&p).Error; err != nil {
			return err // a duplicate: another request paid; the next attempt sees it
		}
		if err := tx.Create(&LedgerRow{UserID: r.UserID, Delta: -o.AmountCents, Reason: ReasonPayment,
			Ref: o.OrderNo, RequestHash: r.RequestHash, CreatedAt: now}).Error; err != nil {
			return err
		}
		upd := tx.Model(&Wallet{}).Where("user_id = ? AND version = ? AND balance_cents >= ?", r.UserID, w.Version, o.AmountCents).
			Updates(map[string]any{"balance_cents": gorm.Expr("balance_cents - ?", o.AmountCents), "version": gorm.Expr("version + 1"), "updated_at": now})
		if upd.Error != nil {
			return upd.Error
		}
		if dbx.CheckRows(upd.RowsAffected) != nil {
			return errConflict
		}
		paid, err := order.MarkPaidTx(tx, o, now)
		if errors.Is(err, order.ErrInvalidState) {
			return errConflict // cancelled (sweeper, user) or changed since read
		}
		if err != nil {
			return err
		}
		if err := s.labSlow(ctx, o.OrderNo); err != nil {
			return err
		}
		res = Result{Order: paid, Payment: p}
		return nil
	})
	if err != nil {
		return Result{}, lockAware(ctx, err)
	}
	return res, nil
}

// replay answers a request from the payments table: ok when a payment with
// request id rid exists (the same request: the result again), or
// idem.ErrFingerprintMismatch when the key was used for something else.
func (s *Service) replay(db *gorm.DB, rid string, r PayRequest) (Result, bool, error) {
	var p Payment
	err := db.Where("request_id = ?", rid).Take(&p).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Result{}, false, nil
	}
	if err != nil {
		return Result{}, false, err
	}
	if p.UserID != r.UserID || p.OrderNo != r.OrderNo ||
		(r.RequestHash != "" && p.RequestHash != "" && p.RequestHash != r.RequestHash) {
		return Result{}, false, idem.ErrFingerprintMismatch
	}
	o, err := order.GetTx(db, p.OrderNo)
	if err != nil {
		return Result{}, false, err
	}
	s.metrics.dbReplay()
	return Result{Order: o, Payment: p, Replayed: true}, true, nil
}

// walletTx reads the user's wallet in tx; a user never credited has a zero
// wallet (no row), created here only when create is set.
func walletTx(tx *gorm.DB, userID int64, create bool) (Wallet, error) {
	var w Wallet
	err := tx.Where("user_id = ?", userID).Take(&w).Error
	if !errors.Is(err, gorm.ErrRecordNotFound) {
		return w, err
	}
	if !create {
		return Wallet{UserID: userID}, nil
	}
	if err := ensureWallet(tx, userID); err != nil {
		return w, err
	}
	err = tx.Where("user_id = ?", userID).Take(&w).Error
	return w, err
}

// Wallet returns the user's wallet; a user never credited has balance 0.
func (s *Service) Wallet(ctx context.Context, userID int64) (Wallet, error) {
	var w Wallet
	err := s.db.WithContext(ctx).Where("user_id = ?", userID).Take(&w).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Wallet{UserID: userID}, nil
	}
	return w, err
}

var errLockLost = fmt.Errorf("%w: the account lock was lost before COMMIT", ErrBusy)

// locked runs fn holding the user's account lock with the watchdog on, and
// releases it only after fn returned (after its transaction committed).
func (s *Service) locked(ctx context.Context, userID int64, fn func(ctx context.Context, fence lockx.Fence) error) error {
	err := s.locks.Do(ctx, AccountLockKey(userID), lockx.AcquireOptions{TTL: s.cfg.LockTTL, Wait: s.cfg.LockWait, Watchdog: true}, fn)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lockx.ErrNotObtained):
		s.metrics.busy()
		return ErrBusy
	case errors.Is(err, lockx.ErrLostBeforeRelease):
		s.log.Warn("account lock was lost before release (the payment committed; its guarded updates stand)", "user_id", userID, "err", err)
		return nil
	case errors.Is(err, lockx.ErrNotHeld):
		s.log.Error("account lock lost inside a payment; rolled back", "user_id", userID, "err", err)
		return errLockLost
	}
	return err
}

// lockAware turns the cancellation of a lock's context into errLockLost.
func lockAware(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, errLockLost) {
		return fmt.Errorf("%w (%v)", errLockLost, err)
	}
	return err
}

// labSlow is the LAB switch: hold the lock and the open transaction longer.
func (s *Service) labSlow(ctx context.Context, orderNo string) error {
	if s.cfg.SlowPayment <= 0 {
		return nil
	}
	s.metrics.labSlow()
	s.log.Warn("LAB: slow payment: holding the account lock and the open transaction", "order_no", orderNo, "for", s.cfg.SlowPayment)
	t := time.NewTimer(s.cfg.SlowPayment)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// retryable: the transaction rolled back on a race that a re-read decides.
func retryable(err error) bool {
	return errors.Is(err, errConflict) || dbx.IsDuplicate(err) || dbx.Retryable(err)
}

// rerun is the money path's one retry layer: it runs attempt (one
// transaction, see tx) again while it ends in a race a re-read decides (a
// guarded update that matched nothing, a duplicate, a deadlock victim), at
// most maxAttempts times in all, then gives up as ErrBusy (or, when the
// last attempt was a deadlock victim or a lock wait timeout, as that error:
// the database could not take the write, 503 unavailable). A deadlock victim
// waits a short jittered pause first, as dbx.Tx would.
func rerun(ctx context.Context, what string, attempt func() error) error {
	for i := 1; i <= maxAttempts; i++ {
		err := attempt()
		if !retryable(err) || ctx.Err() != nil || i == maxAttempts && dbx.Retryable(err) {
			return err // a deadlock or lock wait (1213, 1205) to the last: 503 unavailable (docs/api.md)
		}
		if dbx.Retryable(err) {
			t := time.NewTimer(time.Duration(i)*5*time.Millisecond + rand.N(5*time.Millisecond))
			select {
			case <-ctx.Done():
				t.Stop()
				return err
			case <-t.C:
			}
		}
	}
	return fmt.Errorf("%w: %s kept changing", ErrBusy, what)
}

// tx runs fn in one transaction, never again: rerun decides what is rerun.
// (dbx.Tx reruns deadlock victims itself; under rerun that would nest, up to
// 25 transactions under one account lock.)
func (s *Service) tx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return dbx.TxOnce(ctx, s.db, fn)
}

func outcomeOf(res Result, err error) string {
	switch {
	case err == nil && res.Replayed:
		return "replayed"
	case err == nil:
		return "paid"
	case errors.Is(err, ErrInsufficientFunds):
		return "insufficient_funds"
	case errors.Is(err, ErrAlreadyPaid):
		return "already_paid"
	case errors.Is(err, order.ErrInvalidState):
		return "invalid_state"
	case errors.Is(err, order.ErrNotFound):
		return "not_found"
	case errors.Is(err, idem.ErrFingerprintMismatch):
		return "key_reused"
	case errors.Is(err, ErrBusy):
		return "busy"
	default:
		return "error"
	}
}

// detachGrace is how long past the request's deadline a payment or credit
// may still run: with keeping its idempotency record (500 ms at most) the
// answer leaves within the deadline + 1 s (A1).
const detachGrace = 300 * time.Millisecond

// detach is ctx without its cancellation (a client that went away must not
// cut a payment midway), ending detachGrace after ctx's deadline if it has
// one: a database or Redis that went silent (a black-holed connection,
// which no error ends) costs the client its deadline plus the grace, never
// an unbounded wait. A payment cut there is in doubt to its client, whose
// retry with the same key is answered from the payments table.
func detach(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(context.WithoutCancel(ctx), dl.Add(detachGrace))
	}
	return context.WithCancel(context.WithoutCancel(ctx))
}
