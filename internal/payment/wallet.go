package payment

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/lockx"
)

// MaxCreditCents is the largest single credit (docs/api.md).
const MaxCreditCents = 1_000_000_000

// Credit adds amount cents to the user's wallet, creating it if missing.
// ref (see CreditRef) is the credit's ledger ref, unique per reason, so a
// retried credit adds nothing even when Redis forgot its idempotency record:
// it returns the wallet with replayed true (idem.ErrFingerprintMismatch when the
// earlier credit under ref was a different request, by hash).
func (s *Service) Credit(ctx context.Context, userID, amount int64, ref, hash string) (w Wallet, replayed bool, err error) {
	defer func() { s.metrics.credit(creditOutcome(replayed, err)) }()
	if userID <= 0 || amount < 1 || amount > MaxCreditCents || ref == "" {
		return Wallet{}, false, fmt.Errorf("payment: credit of %d cents to user %d (ref %q) is out of range", amount, userID, ref)
	}
	ctx, cancel := detach(ctx)
	defer cancel()
	if w, ok, err := s.credited(s.db.WithContext(ctx), userID, ref, hash); ok || err != nil {
		return w, ok, err
	}
	err = s.locked(ctx, userID, func(lctx context.Context, _ lockx.Fence) error {
		return rerun(lctx, "wallet "+strconv.FormatInt(userID, 10), func() (err error) {
			w, replayed, err = s.creditOnce(lctx, userID, amount, ref, hash)
			return err
		})
	})
	if errors.Is(err, errLockLost) {
		if w, ok, err2 := s.credited(s.db.WithContext(ctx), userID, ref, hash); ok || err2 != nil {
			return w, ok, err2
		}
	}
	return w, replayed, err
}

// creditOnce is one transaction of Credit.
func (s *Service) creditOnce(ctx context.Context, userID, amount int64, ref, hash string) (w Wallet, replayed bool, err error) {
	err = s.tx(ctx, func(tx *gorm.DB) error {
		// Insert first: on MySQL the snapshot of the reads below then starts
		// after the row exists, whoever inserted it.
		if err := ensureWallet(tx, userID); err != nil {
			return err
		}
		var err error
		if w, replayed, err = s.credited(tx, userID, ref, hash); replayed || err != nil {
			return err
		}
		if err := tx.Where("user_id = ?", userID).Take(&w).Error; err != nil {
			return err
		}
		now := dbx.Now()
		if err := tx.Create(&LedgerRow{UserID: userID, Delta: amount, Reason: ReasonCredit, Ref: ref, RequestHash: hash, CreatedAt: now}).Error; err != nil {
			return err // a duplicate: this credit committed meanwhile; the next attempt replays it
		}
		upd := tx.Model(&Wallet{}).Where("user_id = ? AND version = ?", userID, w.Version).
			Updates(map[string]any{"balance_cents": gorm.Expr("balance_cents + ?", amount), "version": gorm.Expr("version + 1"), "updated_at": now})
		if upd.Error != nil {
			return upd.Error
		}
		if dbx.CheckRows(upd.RowsAffected) != nil {
			return errConflict
		}
		return tx.Where("user_id = ?", userID).Take(&w).Error
	})
	if err != nil {
		return Wallet{}, false, lockAware(ctx, err)
	}
	return w, replayed, nil
}

// credited reports whether the credit under ref was made already, and if so
// returns the wallet as it is now.
func (s *Service) credited(db *gorm.DB, userID int64, ref, hash string) (Wallet, bool, error) {
	var l LedgerRow
	err := db.Where("reason = ? AND ref = ?", ReasonCredit, ref).Take(&l).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Wallet{}, false, nil
	}
	if err != nil {
		return Wallet{}, false, err
	}
	if l.UserID != userID || (hash != "" && l.RequestHash != "" && l.RequestHash != hash) {
		return Wallet{}, false, idem.ErrFingerprintMismatch
	}
	var w Wallet
	if err := db.Where("user_id = ?", userID).Take(&w).Error; err != nil {
		return Wallet{}, false, err
	}
	s.metrics.creditReplay()
	return w, true, nil
}

// ensureWallet inserts the user's empty wallet unless it exists; safe when
// two requests race (INSERT ... ON DUPLICATE KEY UPDATE / ON CONFLICT DO
// NOTHING).
func ensureWallet(tx *gorm.DB, userID int64) error {
	now := dbx.Now()
	return tx.Clauses(clause.OnConflict{DoNothing: true}).
		Create(&Wallet{UserID: userID, CreatedAt: now, UpdatedAt: now}).Error
}

func creditOutcome(replayed bool, err error) string {
	switch {
	case err == nil && replayed:
		return "replayed"
	case err == nil:
		return "credited"
	case errors.Is(err, idem.ErrFingerprintMismatch):
		return "key_reused"
	case errors.Is(err, ErrBusy):
		return "busy"
	default:
		return "error"
	}
}
