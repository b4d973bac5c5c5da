package order

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-lab/shop/internal/dbx"
)

// inDoubtTimeout bounds resolveInDoubt's look-ups when no request of the
// batch has a deadline; with one, they end grace.InDoubt after it (A1). A
// look-up still unanswered then leaves the commit unresolved: 503
// outcome_unknown (docs/api.md), and the buyer's retry finds the order or
// places it once.
const inDoubtTimeout = 10 * time.Second

// resolveInDoubt decides a batch transaction whose COMMIT lost its
// connection (lost, the driver's error): did it land? got is what the
// transaction computed; the orders it created are looked up by their
// unique order numbers, with a locking read, which waits while the old
// transaction still holds their rows on the server (a COMMIT in progress
// there, or a connection the server has not yet seen die), so the answer is
// the final one. All there: landed, got stands. None there: it rolled back
// (landed false, nil: run it again). A transaction that created no order
// wrote nothing that matters, so got stands either way. A look-up that
// fails (or finds a part) leaves it in doubt: an *OutcomeUnknownError (503
// outcome_unknown, nothing is recorded as done, and the client's retry is
// answered by the database).
func (s *Service) resolveInDoubt(ctx context.Context, productID int64, got []result, lost error) (landed bool, err error) {
	nos := createdNos(got)
	if len(nos) == 0 {
		s.metrics.inDoubt("landed")
		return true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, inDoubtTimeout)
	defer cancel()
	var found int64
	// The database that lost the COMMIT may be failing over: until a
	// writer answers, the look-up is tried again. Answering before it is
	// resolved would tell a buyer "nothing was done" of an order that may
	// exist.
	for attempt := 1; ; attempt++ {
		err = dbx.TxOnce(ctx, s.db, func(tx *gorm.DB) error {
			return tx.Model(&Order{}).Clauses(clause.Locking{Strength: "UPDATE"}).Where("order_no IN ?", nos).Count(&found).Error
		})
		if err == nil || !dbx.Unavailable(err) || !dbx.Sleep(ctx, min(time.Duration(attempt)*50*time.Millisecond, 500*time.Millisecond)) {
			break
		}
	}
	switch {
	case err != nil:
		s.metrics.inDoubt("unresolved")
		s.log.Warn("order batch commit in doubt and not resolved", "product_id", productID, "orders", len(nos), "err", err)
		return false, &OutcomeUnknownError{OrderNos: nos, Lost: lost, Lookup: err}
	case found == int64(len(nos)):
		s.metrics.inDoubt("landed")
		s.log.Warn("order batch commit in doubt: it landed", "product_id", productID, "orders", len(nos))
		return true, nil
	case found == 0:
		s.metrics.inDoubt("rolled_back")
		s.log.Warn("order batch commit in doubt: it did not land; running it again", "product_id", productID, "orders", len(nos))
		return false, nil
	}
	s.metrics.inDoubt("unresolved")
	return false, &OutcomeUnknownError{OrderNos: nos, Lost: lost, Lookup: fmt.Errorf("%d of its %d orders are there", found, len(nos))}
}
