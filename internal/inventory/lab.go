package inventory

import (
	"context"
	"math/rand/v2"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-lab/shop/internal/dbx"
)

// LAB: the strategies that are unsafe on their own, and the pause that
// shows why the fence matters. They exist so the harness can show what
// each missing piece costs; none is a default.

// readModifyWrite is the unsafe classic, naive (no lock) and lock (the
// product lock, no fence): read the stock before the transaction, as such
// code usually reads, compute, write the number back. Without a lock
// concurrent buyers overwrite each other; with a lock but no fence a holder
// paused past its TTL does.
type readModifyWrite struct {
	s     *Service
	id    int64
	locks bool
	seen  Product // prepare's read, for deductTx
}

func startNaive(_ context.Context, s *Service, id int64, _ int, _ []Want) (deductor, []error, error) {
	return &readModifyWrite{s: s, id: id}, nil, nil
}

func startLocked(_ context.Context, s *Service, id int64, _ int, _ []Want) (deductor, []error, error) {
	return &readModifyWrite{s: s, id: id, locks: true}, nil, nil
}

func (r *readModifyWrite) next(last *Taken) (claim, bool) {
	if !r.locks {
		return noLock(), last == nil
	}
	return oneBucket(0, true), last == nil
}

// prepare reads the row (the lock's holder may then be paused, in Next)
// and, naive, spends naiveWork before it writes, as real code does between its read
// and its write (a price rule, a call to another service). The lost
// updates it shows then happen under any concurrent load, not only when
// the scheduler happens to interleave two reads (the demo's SQLite has one
// connection, which otherwise serialises most of them).
func (r *readModifyWrite) prepare(ctx context.Context, h *hold) error {
	p, err := readProduct(r.s.db.WithContext(ctx), r.id)
	if err != nil {
		return err
	}
	r.seen = p
	if !r.locks {
		sleep(ctx, naiveWork)
	}
	return nil
}

// naiveWork is the naive strategy's time between its read and its write.
const naiveWork = 5 * time.Millisecond

func (r *readModifyWrite) deductTx(tx *gorm.DB, h *hold, wants []Want) (Taken, error) {
	p := r.seen
	refused, total := allocate(p.Stock, wants)
	out := Taken{PriceCents: p.PriceCents, Refused: refused, SoldOut: p.Stock-total <= 0}
	if total == 0 {
		return out, nil
	}
	left := p.Stock - total
	if err := tx.Exec("UPDATE products SET stock = ?, version = version + 1, updated_at = ? WHERE id = ?", left, dbx.Now(), r.id).Error; err != nil {
		return Taken{}, err
	}
	return out, ledger(tx, r.id, 0, h.fence(0), wants, refused)
}

func (r *readModifyWrite) close(context.Context) {}

// lockConditional is lock-fence without the fence: its UPDATE carries no
// fence (its ledger rows still record the hold's), so a holder whose lease
// ran out still writes; the conditional decrement keeps the stock exact
// all the same.
type lockConditional struct{ fenced }

func startLockConditional(_ context.Context, s *Service, id int64, _ int, _ []Want) (deductor, []error, error) {
	return &lockConditional{fenced{s: s, id: id}}, nil, nil
}

func (l *lockConditional) deductTx(tx *gorm.DB, h *hold, wants []Want) (Taken, error) {
	return l.take(tx, Fence{}, h.fence(0), wants)
}

// conditional is the lock-free strategy: one guarded UPDATE per want
// decides; nothing is read first.
type conditional struct {
	s  *Service
	id int64
}

func startConditional(_ context.Context, s *Service, id int64, _ int, _ []Want) (deductor, []error, error) {
	return &conditional{s: s, id: id}, nil, nil
}

func (c *conditional) next(last *Taken) (claim, bool)       { return noLock(), last == nil }
func (c *conditional) prepare(context.Context, *hold) error { return nil }
func (c *conditional) close(context.Context)                {}

func (c *conditional) deductTx(tx *gorm.DB, _ *hold, wants []Want) (Taken, error) {
	out := Taken{Refused: make([]error, len(wants))}
	for i, w := range wants {
		res := moveBucket(tx, c.id, 0, -w.Quantity, Fence{})
		if res.Error != nil {
			return Taken{}, res.Error
		}
		if res.RowsAffected == 0 {
			out.Refused[i] = ErrSoldOut // refined below, once the row is read
		}
	}
	// A locking read: the row as committed now, not the transaction's
	// snapshot (MySQL's REPEATABLE READ), to tell sold out from not enough.
	p, err := readProduct(tx.Clauses(clause.Locking{Strength: "UPDATE"}), c.id)
	if err != nil {
		return Taken{}, err
	}
	out.PriceCents, out.SoldOut = p.PriceCents, p.Stock <= 0
	for i, err := range out.Refused {
		if err != nil && p.Stock > 0 {
			out.Refused[i] = ErrInsufficientStock
		}
	}
	return out, ledger(tx, c.id, 0, Fence{}, wants, out.Refused)
}

// labPause is the lab's stop-the-world pause of a holder (Config's
// PauseAfterLock, with PauseProbability), applied by Deduction.Next to a
// pausable hold once the strategy prepared under it: after the lab's read,
// where such a pause hurts a read-modify-write most.
func (h *hold) labPause(ctx context.Context) {
	cfg := h.s.cfg
	if !h.pausable || rand.Float64() >= cfg.PauseProbability {
		return
	}
	h.s.metrics.labPause()
	h.s.log.Warn("LAB: pausing a lock holder", "pause", cfg.PauseAfterLock)
	sleep(ctx, cfg.PauseAfterLock)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
