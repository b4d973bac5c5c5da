package inventory

import (
	"context"
	"errors"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-lab/shop/internal/dbx"
)

// Want is one order's claim on a product's stock.
type Want struct {
	OrderNo  string
	Quantity int64
}

// Take is one hold's deduction of a product's stock, handed by a
// Deduction (Take) to the caller's transaction for DeductTx.
type Take struct {
	ProductID int64
	// Fence is the product lock's fencing token; zero = none.
	Fence Fence

	strategy string   // the Deduction's, resolved once per batch
	seen     *Product // prepare's read, for the read-modify-write lab strategies
	soldOut  bool     // the last DeductTx left the product known to be sold out

	// gated: the wants came through the gate, whose settlement needs the
	// order numbers the last DeductTx granted.
	gated   bool
	granted []string

	// A product held in buckets (buckets.go): K, and either the one bucket
	// this hold deducts from or, all, every bucket under fences (indexed
	// by bucket).
	buckets int
	bucket  int
	all     bool
	fences  []Fence
	// What the last DeductTx of a bucket found: wants it left open
	// (ErrElsewhere), whether it left the bucket empty, and, for all,
	// the buckets it left empty (tallied: it ran).
	open    int
	emptied bool
	tallied bool
	left    uint64
}

// Restart forgets what an earlier run of the caller's transaction found:
// call it at the start of each run. A run that rolled back and is run again
// may call no DeductTx (its wants refused or found committed before it),
// and the Deduction must not walk on, mark buckets empty or learn a sold-out from
// what the rolled-back run saw.
func (t *Take) Restart() {
	t.soldOut, t.open, t.emptied, t.tallied, t.left = false, 0, false, false, 0
	t.granted = t.granted[:0]
}

// prepare is the part of a deduction that runs before the caller opens its
// transaction (in Deduction.Next): the lab pause, which stands
// in for a holder stopped between taking the lock and writing, and, for the
// read-modify-write lab strategies, their read of the stock row, as such
// code usually reads: outside the transaction that writes.
//
// naive then spends naiveWork before it writes, as real code does between
// its read and its write (a price rule, a call to another service). The
// lost updates it shows then happen under any concurrent load, not only
// when the scheduler happens to interleave two reads (the demo's SQLite has
// one connection, which otherwise serialises most of them).
func (s *Service) prepare(ctx context.Context, t *Take) error {
	switch t.strategy {
	case Naive, Lock:
		p, err := readProduct(s.db.WithContext(ctx), t.ProductID)
		if err != nil {
			return err
		}
		t.seen = &p
		if t.Fence.Number > 0 {
			s.labPause(ctx)
		}
		if t.strategy == Naive {
			sleep(ctx, naiveWork)
		}
		return nil
	}
	if t.Fence.Number > 0 {
		s.labPause(ctx)
	}
	return nil
}

// naiveWork is the naive strategy's time between its read and its write.
const naiveWork = 5 * time.Millisecond

// Taken is what a Take got.
type Taken struct {
	// PriceCents is the product's unit price, for the orders.
	PriceCents int64
	// Refused holds, per want, nil when its units were taken, else
	// ErrSoldOut (nothing was left for it) or ErrInsufficientStock (some
	// was, not enough).
	Refused []error
	// SoldOut: the product is known to have no stock left after the take.
	// (A take that fitted whole is written without reading the row, so
	// the stock left is then not known and SoldOut false.)
	SoldOut bool
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

// DeductTx takes stock for wants, in arrival order, inside the caller's
// transaction, with the Deduction's Take: a want is served while enough is
// left, so the first buyers get the last units and the rest get the exact
// refusal. It appends one ledger row per served want; the caller inserts the
// orders in the same transaction. How the stock row is written depends on
// the admission's strategy:
//
//   - lock-fence, redis-gate: one fenced conditional UPDATE for the whole
//     batch; a holder whose lease ran out writes nothing (errStaleFence).
//   - lock-conditional (LAB): the same UPDATE without the fence, so a
//     holder whose lease ran out still writes (the conditional decrement
//     keeps the stock exact all the same).
//   - conditional: one guarded UPDATE per want, no lock.
//   - lock, naive (LAB, unsafe): read, compute, write the number back.
//
// Errors: ErrNotFound, errStaleFence (the Deduction takes its hold again), or the database's.
func (s *Service) DeductTx(tx *gorm.DB, t *Take, wants []Want) (taken Taken, err error) {
	switch {
	case t.all:
		taken, err = s.fromAll(tx, t, wants)
	case t.buckets > 1:
		taken, err = s.fromBucket(tx, t, wants)
	case t.strategy == Naive || t.strategy == Lock:
		taken, err = s.readModifyWrite(tx, t, wants)
	case t.strategy == Conditional:
		taken, err = s.conditional(tx, t, wants)
	case t.strategy == LockConditional:
		taken, err = s.fenced(tx, t, wants, Fence{})
	default:
		taken, err = s.fenced(tx, t, wants, t.Fence)
	}
	t.soldOut = err == nil && taken.SoldOut
	if t.gated && err == nil {
		t.granted = t.granted[:0]
		for k, w := range wants {
			if taken.Refused[k] == nil {
				t.granted = append(t.granted, w.OrderNo)
			}
		}
	}
	return taken, err
}

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

// fenced is the safe strategy's write, checked against fence (t.Fence; the
// zero Fence for lock-conditional, whose ledger rows still record t.Fence).
// The row is read with a locking read (MySQL: FOR UPDATE, so it is the
// latest committed row, not the transaction's snapshot); the UPDATE repeats
// both conditions, so the database stays the last line of defence even if
// the read were wrong.
func (s *Service) fenced(tx *gorm.DB, t *Take, wants []Want, fence Fence) (Taken, error) {
	if out, ok, err := s.fencedWhole(tx, t, wants, fence); ok || err != nil {
		return out, err
	}
	p, err := readProduct(tx.Clauses(clause.Locking{Strength: "UPDATE"}), t.ProductID)
	if err != nil {
		return Taken{}, err
	}
	if p.refuses(fence) {
		return Taken{}, errStaleFence
	}
	s.prices.Store(p.ID, p.PriceCents)
	refused, total := allocate(p.Stock, wants)
	out := Taken{PriceCents: p.PriceCents, Refused: refused, SoldOut: p.Stock-total <= 0}
	if total == 0 {
		return out, nil
	}
	res := moveStock(tx, t.ProductID, -total, fence)
	if res.Error != nil {
		return Taken{}, res.Error
	}
	if res.RowsAffected != 1 {
		// The row moved between the locking read and the write (SQLite has
		// no row lock; a writer that holds no lock): decide by re-reading.
		if now, err := readProduct(tx, t.ProductID); err == nil && now.refuses(fence) {
			return Taken{}, errStaleFence
		}
		return Taken{}, ErrBusy
	}
	return out, s.ledger(tx, t, wants, refused)
}

// fencedWhole is the common case of a sale in progress: the whole batch
// fits. One fenced conditional UPDATE for all of it, no read first (the
// price, which never changes, is remembered from an earlier read). ok is
// false when the product's price is not known yet, or the UPDATE matched no
// row (not enough stock for all, or a fence it refuses): the caller then
// reads the row and decides want by want.
func (s *Service) fencedWhole(tx *gorm.DB, t *Take, wants []Want, fence Fence) (out Taken, ok bool, err error) {
	price, known := s.prices.Load(t.ProductID)
	if !known {
		return Taken{}, false, nil
	}
	var total int64
	for _, w := range wants {
		total += w.Quantity
	}
	res := moveStock(tx, t.ProductID, -total, fence)
	if res.Error != nil || res.RowsAffected != 1 {
		return Taken{}, false, res.Error
	}
	out = Taken{PriceCents: price.(int64), Refused: make([]error, len(wants))}
	return out, true, s.ledger(tx, t, wants, out.Refused)
}

// conditional is the lock-free strategy: one guarded UPDATE per want
// decides; nothing is read first.
func (s *Service) conditional(tx *gorm.DB, t *Take, wants []Want) (Taken, error) {
	out := Taken{Refused: make([]error, len(wants))}
	for i, w := range wants {
		res := moveStock(tx, t.ProductID, -w.Quantity, Fence{})
		if res.Error != nil {
			return Taken{}, res.Error
		}
		if res.RowsAffected == 0 {
			out.Refused[i] = ErrSoldOut // refined below, once the row is read
		}
	}
	// A locking read: the row as committed now, not the transaction's
	// snapshot (MySQL's REPEATABLE READ), to tell sold out from not enough.
	p, err := readProduct(tx.Clauses(clause.Locking{Strength: "UPDATE"}), t.ProductID)
	if err != nil {
		return Taken{}, err
	}
	out.PriceCents, out.SoldOut = p.PriceCents, p.Stock <= 0
	for i, err := range out.Refused {
		if err != nil && p.Stock > 0 {
			out.Refused[i] = ErrInsufficientStock
		}
	}
	return out, s.ledger(tx, t, wants, out.Refused)
}

// moveStock is the one stock write but the lab's read-modify-write: the
// stock moves by delta (negative takes) and the version moves on. A take
// happens only while the stock covers it. With a fence, also only while the
// row takes that fence (Product.refuses says the same), and the fence and
// its holder are recorded. RowsAffected says whether it happened.
func moveStock(tx *gorm.DB, id, delta int64, fence Fence) *gorm.DB {
	q, args := "UPDATE products SET stock = stock + ?, version = version + 1, updated_at = ?", []any{delta, dbx.Now()}
	q, args = guardedMove(q, args, " WHERE id = ?", []any{id}, delta, fence)
	return tx.Exec(q, args...)
}

// guardedMove completes a stock row's UPDATE (set, then where) with the
// fence it records and the conditions moveStock states.
func guardedMove(q string, args []any, where string, whereArgs []any, delta int64, fence Fence) (string, []any) {
	if fence.Number > 0 {
		q, args = q+", fence = ?, fence_holder = ?", append(args, fence.Number, fence.Holder)
	}
	q, args = q+where, append(args, whereArgs...)
	if delta < 0 {
		q, args = q+" AND stock >= ?", append(args, -delta)
	}
	if fence.Number > 0 {
		q, args = q+" AND (fence < ? OR (fence = ? AND fence_holder = ?))", append(args, fence.Number, fence.Number, fence.Holder)
	}
	return q, args
}

// refuses says whether the row takes no write under fence: a newer fence
// has written, or the same fence from another holder (the fence counter
// lost its last INCR in a failover and handed the number out twice). The
// holder that wrote a fence may write again under it; the zero Fence (no
// lock, or lock-conditional) is never refused.
func (p Product) refuses(fence Fence) bool {
	if fence.Number <= 0 {
		return false
	}
	return p.Fence > fence.Number || (p.Fence == fence.Number && p.FenceHolder != fence.Holder)
}

// readModifyWrite is the unsafe classic (LAB): read the stock (Prepare,
// before the transaction), compute, write the number back. Without a lock
// (naive) concurrent buyers overwrite each other; with a lock but no fence
// (lock) a holder paused past its TTL does.
func (s *Service) readModifyWrite(tx *gorm.DB, t *Take, wants []Want) (Taken, error) {
	p := *t.seen
	refused, total := allocate(p.Stock, wants)
	out := Taken{PriceCents: p.PriceCents, Refused: refused, SoldOut: p.Stock-total <= 0}
	if total == 0 {
		return out, nil
	}
	left := p.Stock - total
	if err := tx.Exec("UPDATE products SET stock = ?, version = version + 1, updated_at = ? WHERE id = ?", left, dbx.Now(), t.ProductID).Error; err != nil {
		return Taken{}, err
	}
	return out, s.ledger(tx, t, wants, refused)
}

// ledger appends one row per served want, in one INSERT.
func (s *Service) ledger(tx *gorm.DB, t *Take, wants []Want, refused []error) error {
	rows := make([]LedgerRow, 0, len(wants))
	now := dbx.Now()
	for i, w := range wants {
		if refused[i] == nil {
			no := w.OrderNo
			rows = append(rows, LedgerRow{ProductID: t.ProductID, Delta: -w.Quantity, Reason: ReasonOrder, OrderNo: &no, Fence: t.Fence.Number, Bucket: t.bucket, CreatedAt: now})
		}
	}
	if len(rows) == 0 {
		return nil
	}
	return tx.Create(&rows).Error
}

func readProduct(db *gorm.DB, id int64) (Product, error) {
	var p Product
	err := db.Take(&p, id).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return p, ErrNotFound
	}
	return p, err
}
