package order

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-lab/shop/internal/dbx"
)

// ErrOutcomeUnknown is a commit whose outcome the database did not tell
// before the request's deadline plus its grace: its orders may exist or
// not. It is the one failure that does not promise "nothing changed"
// (docs/api.md, 503 outcome_unknown): a retry of the same request finds
// the order by its number or places it once, never twice.
var ErrOutcomeUnknown = errors.New("order: the commit's outcome is unknown")

// OutcomeUnknownError is ErrOutcomeUnknown for one batch: the order numbers
// its transaction would have created (each may exist or not), the error
// that lost the COMMIT's answer, and the error that ended the look-up.
type OutcomeUnknownError struct {
	OrderNos []string
	Lost     error // the COMMIT's: a broken connection, or its deadline
	Lookup   error // the in-doubt look-up's, nil when it answered a part of them
}

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("order: the outcome of the commit of %d orders (%s) is unknown: commit: %v; look-up: %v",
		len(e.OrderNos), strings.Join(e.OrderNos, ", "), e.Lost, e.Lookup)
}

// Unwrap is ErrOutcomeUnknown only: the lost connection's error is not the
// answer (it would read as "unavailable", which promises nothing changed).
func (e *OutcomeUnknownError) Unwrap() error { return ErrOutcomeUnknown }

// Landed reports whether the order numbered no exists, by a locking read:
// it waits while a transaction still holds the number (a COMMIT under way,
// or a connection the server has not yet seen die), so its answer is the
// final one. The HTTP layer asks it to learn an outcome it answered as
// unknown, before it frees the request's idempotency claim.
func (s *Service) Landed(ctx context.Context, no string) (bool, error) {
	var found int64
	err := dbx.TxOnce(ctx, s.db, func(tx *gorm.DB) error {
		return tx.Model(&Order{}).Clauses(clause.Locking{Strength: "UPDATE"}).Where("order_no = ?", no).Count(&found).Error
	})
	return found > 0, err
}
