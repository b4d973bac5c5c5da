package inventory

import (
	"context"

	"github.com/seckill-lab/shop/internal/dbx"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// fenced is the safe strategy, lock-fence: one hold of the product lock,
// and one fenced conditional UPDATE for the whole batch; a holder whose
// lease ran out writes nothing (errStaleFence).
type fenced struct {
	s  *Service
	id int64
}

func startFenced(_ context.Context, s *Service, id int64, _ int, _ []Want) (deductor, []error, error) {
	return &fenced{s: s, id: id}, nil, nil
}

func (f *fenced) next(last *Taken) (claim, bool) { return oneBucket(0, true), last == nil }

func (f *fenced) prepare(context.Context, *hold) error { return nil }

func (f *fenced) deductTx(tx *gorm.DB, h *hold, wants []Want) (Taken, error) {
	return f.take(tx, h.fence(0), h.fence(0), wants)
}

func (f *fenced) close(context.Context) {}

// packet is the whole batch as one packet: the fenced conditional UPDATE
// as its guard, the ledger rows written only if it matched (takeWhole in
// one round trip, the caller's orders added to it). ok is false when the
// product's price is not known yet: the caller takes the read path. also
// is the caller's condition on the guard (Deduction.Packet).
func (f *fenced) packet(h *hold, wants []Want, also string, alsoArgs []any) (p *dbx.Packet, out Taken, ok bool) {
	price, known := f.s.prices.Load(f.id)
	if !known {
		return nil, Taken{}, false
	}
	fence := h.fence(0)
	q, args := moveSQL(f.id, 0, -units(wants), fence)
	if also != "" {
		q, args = q+" AND ("+also+")", append(args, alsoArgs...)
	}
	p = dbx.NewPacket(q, args...)
	packetLedger(p, f.id, 0, fence, wants)
	return p, Taken{PriceCents: price.(int64), Refused: make([]error, len(wants))}, true
}

// take is the batch's write, checked against fence (the zero Fence for
// lock-conditional), its ledger rows recording held (the hold's). The
// common case, a sale in progress, is one UPDATE (takeWhole); else the
// row is read with a locking read (MySQL: FOR UPDATE, so it is the latest
// committed row, not the transaction's snapshot) and the wants decided one
// by one; the UPDATE repeats both conditions, so the database stays the
// last line of defence even if the read were wrong.
func (f *fenced) take(tx *gorm.DB, fence, held Fence, wants []Want) (Taken, error) {
	if out, ok, err := f.takeWhole(tx, fence, held, wants); ok || err != nil {
		return out, err
	}
	p, err := readProduct(tx.Clauses(clause.Locking{Strength: "UPDATE"}), f.id)
	if err != nil {
		return Taken{}, err
	}
	if p.refuses(fence) {
		return Taken{}, errStaleFence
	}
	f.s.prices.Store(p.ID, p.PriceCents)
	refused, total := allocate(p.Stock, wants)
	out := Taken{PriceCents: p.PriceCents, Refused: refused, SoldOut: p.Stock-total <= 0}
	if total == 0 {
		return out, nil
	}
	if err := mustMove(tx, f.id, 0, -total, fence); err != nil {
		return Taken{}, err
	}
	return out, ledger(tx, f.id, 0, held, wants, refused)
}

// takeWhole is the whole batch in one fenced conditional UPDATE, no read
// first (the price, which never changes, is remembered from an earlier
// read). ok is false when the product's price is not known yet, or the
// UPDATE matched no row (not enough stock for all, or a fence it refuses):
// the caller then reads the row and decides want by want.
func (f *fenced) takeWhole(tx *gorm.DB, fence, held Fence, wants []Want) (out Taken, ok bool, err error) {
	price, known := f.s.prices.Load(f.id)
	if !known {
		return Taken{}, false, nil
	}
	res := moveBucket(tx, f.id, 0, -units(wants), fence)
	if res.Error != nil || res.RowsAffected != 1 {
		return Taken{}, false, res.Error
	}
	out = Taken{PriceCents: price.(int64), Refused: make([]error, len(wants))}
	return out, true, ledger(tx, f.id, 0, held, wants, out.Refused)
}
