package order

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/tracing"
)

// A hot product's turn is the time its lock is held per batch, and most of
// it is round trips. The common batch therefore goes to the database as
// one packet (dbx.Packet), after one read for the unpaid cap: the fenced
// conditional UPDATE of the whole batch as the packet's guard, the ledger
// rows and the orders written only if it matched, and the COMMIT. The
// fence stays the last line of defence: a holder whose lease ran out
// writes nothing, exactly as in the transaction it replaces.
//
// The packet reads nothing first. Repeats are filtered before the batch
// (the processed marker, the sold-out buyers), and the orders' unique
// order number decides the rest: a duplicate rolls the packet back, and
// the batch runs as a transaction with the reads (commitTx). The unpaid
// cap is a condition of the guard (capGuard). So a batch whose guard
// missed (too little stock for all, a buyer near the cap) is decided want
// by want by commitTx, and so is one whose strategy writes no packet.

// commitPacket tries the batch as one packet under d's hold. done is false
// when the packet wrote nothing (not applicable, its guard missed, a
// duplicate order number, or any refusal of the database): the caller then
// runs commitTx. done is true when it committed (res filled) or is in doubt
// and was resolved as landed, or not resolved (err).
func (s *Service) commitPacket(ctx context.Context, d *inventory.Deduction, productID int64, batch []*request, res []result, end txEnds) (taken inventory.Taken, done bool, err error) {
	got := slices.Clone(res)
	first, _ := firstOfEach(batch, got)
	wants, asked := wantsOf(batch, first, nil, got)
	capped, capArgs, fits := s.capGuard(batch, wants, asked)
	if len(wants) == 0 || !fits {
		return inventory.Taken{}, false, nil
	}
	p, taken, ok := d.Packet(wants, capped, capArgs...)
	if !ok {
		return inventory.Taken{}, false, nil
	}
	orders := newOrders(batch, asked, taken, got)
	p.Insert("orders", orderColumns, orderRows(orders))
	answerCreated(asked, taken, orders, got)
	answerRepeats(batch, first, got)

	pctx, span := tracing.Start(ctx, "sql.packet")
	span.Str("db.query.text", p.Describe())
	err = s.cfg.Packets.Commit(pctx, p)
	span.End(err)
	switch {
	case err == nil:
		s.metrics.packet("committed")
	case dbx.ConnLost(err) || ctx.Err() != nil:
		// Sent, and its answer lost or cut at end.tx: in doubt, like any
		// COMMIT, and decided by what the database holds.
		rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), end.inDoubt)
		landed, rerr := s.resolveInDoubt(rctx, productID, got, err)
		cancel()
		if rerr != nil {
			return inventory.Taken{}, true, rerr
		}
		if !landed {
			s.metrics.packet("rolled_back")
			return inventory.Taken{}, false, nil
		}
		// Its orders are there, but a packet reads nothing first: an order
		// of the same number may have been there before it (a buyer's
		// earlier request whose own outcome was unknown). Each request is
		// answered from the order the database holds.
		rctx, cancel = context.WithDeadline(context.WithoutCancel(ctx), end.inDoubt)
		err = s.answerFromOrders(rctx, batch, got)
		cancel()
		if err != nil {
			return inventory.Taken{}, true, &OutcomeUnknownError{OrderNos: createdNos(got), Lost: err, Lookup: err}
		}
		s.metrics.packet("committed")
	case errors.Is(err, dbx.ErrGuardMissed):
		s.metrics.packet("guard_missed")
		return inventory.Taken{}, false, nil
	default:
		s.metrics.packet("refused")
		return inventory.Taken{}, false, nil
	}
	copy(res, got)
	return taken, true, nil
}

// capGuard is the unpaid cap (capUnpaid) as a condition of the packet's
// guard, so the packet needs no read before it: no buyer of the batch
// holds more than the cap less the most units one buyer of the batch asks
// for, in pending orders. A batch that passes fits every buyer's cap; one
// that does not (a buyer near the cap) writes nothing and is decided want
// by want by commitTx, exactly. fits is false when one buyer asks for more
// than the cap (commitTx refuses them); cond is "" with no cap.
func (s *Service) capGuard(batch []*request, wants []inventory.Want, asked []int) (cond string, args []any, fits bool) {
	if s.cfg.UnpaidLimit <= 0 || len(wants) == 0 {
		return "", nil, true
	}
	asks := make(map[int64]int64, len(asked))
	for k, i := range asked {
		asks[batch[i].o.UserID] += wants[k].Quantity
	}
	most := int64(0)
	for u, q := range asks {
		most = max(most, q)
		args = append(args, u)
	}
	if most > s.cfg.UnpaidLimit {
		return "", nil, false
	}
	cond = "NOT EXISTS (SELECT 1 FROM orders WHERE user_id IN (?" + strings.Repeat(", ?", len(asks)-1) + ") AND status = ? GROUP BY user_id HAVING SUM(quantity) > ?)"
	return cond, append(args, StatusPending, s.cfg.UnpaidLimit-most), true
}

// answerFromOrders answers each request of got that a packet in doubt
// created with the order the database holds under its number: created,
// when it is the packet's own (its creation instant), else as a repeat
// would be (a key used for another request is refused).
func (s *Service) answerFromOrders(ctx context.Context, batch []*request, got []result) error {
	nos := createdNos(got)
	var found []Order
	if err := s.db.WithContext(ctx).Where("order_no IN ?", nos).Find(&found).Error; err != nil {
		return err
	}
	byNo := make(map[string]Order, len(found))
	for _, o := range found {
		byNo[o.OrderNo] = o
	}
	for i, r := range got {
		if !r.created || r.err != nil {
			continue
		}
		// The packet's own order carries the instant it stamped (to the
		// microsecond); an earlier one of the number does not.
		if o, ok := byNo[r.o.OrderNo]; ok && o.CreatedAt.Equal(r.o.CreatedAt) {
			got[i] = result{o: o, created: true}
			continue
		}
		got[i] = repeat(byNo[r.o.OrderNo], batch[i].o.RequestHash)
	}
	return nil
}

// createdNos are the order numbers of the requests of res whose orders a
// transaction created.
func createdNos(res []result) []string {
	var nos []string
	for _, r := range res {
		if r.created && r.err == nil {
			nos = append(nos, r.o.OrderNo)
		}
	}
	return nos
}
