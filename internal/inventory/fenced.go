package inventory

import (
	"context"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Want is one order's claim on a product's stock.
type Want struct {
	OrderNo  string
	Quantity int64
}

// Taken is what one transaction's deduction decided.
type Taken struct {
	// PriceCents is the product's unit price, for the orders.
	PriceCents int64
	// Refused holds, per want, nil when its units were taken, else
	// ErrSoldOut (nothing was left for it) or ErrInsufficientStock (some
	// was, not enough); or, for a want this transaction left to the
	// deduction's next hold, a refusal that Open reports.
	Refused []error
	// SoldOut: the product is known to have no stock left after the take.
	// (A take that fitted whole is written without reading the row, so
	// the stock left is then not known and SoldOut false.)
	SoldOut bool

	granted []string // the order numbers served (the gate's settlement)
	walked  walked   // what a bucket of the walk found
}

// Granted is how many wants got their units.
func (t Taken) Granted() int {
	n := 0
	for _, err := range t.Refused {
		if err == nil {
			n++
		}
	}
	return n
}

// Open reports whether want k is undecided: the deduction's next hold
// decides it (a product held in buckets offers it to the next bucket).
func (t Taken) Open(k int) bool { return t.Refused[k] == errOpen }

// allocate serves wants in order from stock; it returns the refusals and
// the units taken.
func allocate(stock int64, wants []Want) (refused []error, total int64) {
	refused = make([]error, len(wants))
	for i, w := range wants {
		switch {
		case w.Quantity <= stock-total:
			total += w.Quantity
		case stock-total <= 0:
			refused[i] = ErrSoldOut
		default:
			refused[i] = ErrInsufficientStock
		}
	}
	return refused, total
}

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

func (f *fenced) prepare(ctx context.Context, h *hold) error {
	h.labPause(ctx)
	return nil
}

func (f *fenced) deductTx(tx *gorm.DB, h *hold, wants []Want) (Taken, error) {
	return f.take(tx, h.fence(0), h.fence(0), wants)
}

func (f *fenced) close(context.Context) {}

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

// units is the sum of the wants' quantities.
func units(wants []Want) int64 {
	var n int64
	for _, w := range wants {
		n += w.Quantity
	}
	return n
}
