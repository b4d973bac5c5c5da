package inventory

import (
	"context"
	"errors"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/tracing"
)

// Deduction is one batch's guarded deduction of a product's stock, by the
// product's strategy (resolved once, when it starts): the holds the
// strategy needs, taken one at a time, each handed to the caller for one
// transaction. The caller reads it as a loop, with no callback:
//
//	d := inv.Deduct(ctx, productID, wants)
//	defer d.Close()
//	refused := d.Refused() // the gate's refusals, per want
//	for d.Next() {
//		taken, err := runTx(d.Context()) // d.DeductTx(tx, wants) inside
//		d.Done(taken, err)               // the committed transaction's Taken
//	}
//	err := d.Err()
//
// The holds, by strategy: the product lock, once (lock-fence, redis-gate,
// and the lab's lock and lock-conditional); no lock, once (the lab's naive
// and conditional); for a product held in stock buckets, one bucket's lock
// per bucket tried, then every bucket's for the tally (walk.go). A write
// refused for a stale fence gets the same hold again, new, as
// staleFenceRetry says. A deduction that left the product sold out puts it
// in the sold-out book once its last hold was released (SoldOut).
//
// A deadline on ctx (the batch's most pressed request) bounds each wait
// for a lock, not the holds: a hold whose context ended would stop its
// watchdog while the transaction still runs (see HoldPast).
type Deduction struct {
	s        *Service
	id       int64
	strategy string
	deductor deductor
	refused  []error
	ctx      context.Context // the caller's: its deadline bounds the waits
	holdCtx  context.Context // the holds' (HoldPast), and their releases'
	cancel   context.CancelFunc
	start    time.Time

	st      strategy
	keeper  *Keeper // nil: every hold is released after its transaction
	keeping bool    // the hold Next took may be kept (Keeper.keeps)
	trips   int     // Redis round trips of its holds so far

	claim  claim // what Next takes
	held   *hold
	stale  int // holds of claim refused for a stale fence in a row
	err    error
	closed bool // nothing more to take

	soldOut bool // the deduction left the product sold out
	version int64
}

// Deduct starts the deduction of a batch of wants for productID, all of
// one product, in arrival order: it resolves the product's strategy once
// for the batch and, for redis-gate, lets each want through the gate
// (Refused says which were turned away); nothing is held until Next.
// Close it when done with it.
func (s *Service) Deduct(ctx context.Context, productID int64, wants []Want) *Deduction {
	return s.deduct(ctx, productID, wants, nil)
}

// deduct is Deduct, whose holds keeper (nil: none) may keep.
func (s *Service) deduct(ctx context.Context, productID int64, wants []Want, keeper *Keeper) *Deduction {
	d := &Deduction{s: s, id: productID, strategy: s.StrategyOf(productID), ctx: ctx, holdCtx: ctx, start: time.Now(), keeper: keeper}
	if dl, ok := ctx.Deadline(); ok {
		d.holdCtx, d.cancel = HoldPast(ctx, dl)
	}
	k, err := s.bucketsOf(ctx, productID)
	if err != nil {
		d.end(err) // nothing admitted, nothing held
		return d
	}
	st := resolve(d.strategy, k)
	d.strategy, d.st = st.name, st
	d.deductor, d.refused, err = st.start(ctx, s, productID, k, wants)
	if err != nil {
		d.end(err)
		return d
	}
	d.advance(nil)
	return d
}

// Refused is, per want of Deduct, the gate's refusal (redis-gate: ErrSoldOut,
// ErrInsufficientStock or ErrBusy), nil for a want let through; nil for
// strategies without a gate. A refused want must not be deducted.
func (d *Deduction) Refused() []error { return d.refused }

// Next takes the next hold and reports whether the caller is to run its
// transaction under it; false when the deduction is over (Err says how).
func (d *Deduction) Next() bool {
	if d.closed {
		return false
	}
	h, err := d.take()
	if err != nil {
		d.end(err)
		return false
	}
	d.held = h
	if err := d.deductor.prepare(h.ctx, h); err != nil {
		d.Done(Taken{}, err)
		return false
	}
	h.labPause(h.ctx)
	return true
}

// take takes the hold of d.claim: the one the keeper kept from the last
// batch, when it is still good, else a new one.
func (d *Deduction) take() (*hold, error) {
	d.keeping = d.keeper.keeps(d.st, d.claim)
	if !d.keeping {
		if d.keeper != nil {
			d.keeper.Release() // (a strategy switched by the lab)
		}
		ctx := d.holdCtx
		if !d.claim.locks() {
			ctx = d.ctx // nothing to renew: the work keeps the caller's deadline
		}
		d.trips += d.claim.last - d.claim.first + 1
		return d.s.acquire(ctx, d.id, d.claim, d.lockWait())
	}
	h := d.keeper.reuse(d.claim)
	if h != nil {
		d.s.metrics.keptHold()
		d.keeper.resume(h, d.ctx)
	} else {
		var err error
		d.trips++
		ctx, stop := d.keeper.under(d.ctx)
		if h, err = d.s.acquire(ctx, d.id, d.claim, d.lockWait()); err != nil {
			stop()
			return nil, err
		}
		h.stop = stop
		d.keeper.took()
	}
	d.trips++ // beside the transaction
	d.keeper.watch(h)
	return h, nil
}

// lockWait is how long Next waits for a lock: the configured wait, and no
// longer than ctx's deadline.
func (d *Deduction) lockWait() time.Duration {
	wait := d.s.cfg.LockWait
	if dl, ok := d.ctx.Deadline(); ok {
		wait = max(0, min(wait, time.Until(dl)))
	}
	return wait
}

// Context is the context of the hold Next took: cancelled when a lock of
// it is lost before the caller's transaction begins, so no BEGIN follows
// (a kept hold: lost by the time Next handed it over).
// A transaction already begun is guarded by the fence, not by this context
// (order runs it on a context of its own until the deadline).
func (d *Deduction) Context() context.Context {
	h := d.held
	if !d.keeping || h.ctx.Err() != nil {
		return h.ctx
	}
	// A kept hold's context was taken under an earlier batch's: this
	// batch's values (its timings), under this turn's span.
	return tracing.Within(context.WithoutCancel(d.ctx), h.turn)
}

// RedisTrips is how many Redis round trips the holds of d made so far: an
// acquire or a release per lock, and a kept hold's check beside each
// transaction (the lock's waits may add retries, not counted).
func (d *Deduction) RedisTrips() int { return d.trips }

// Fence is the fencing token of the hold Next took (its first lock's; the
// zero Fence without a lock).
func (d *Deduction) Fence() Fence { return d.held.fence(d.claim.first) }

// DeductTx takes stock for wants, in arrival order, inside the caller's
// transaction, under the hold Next took: a want is served while enough is
// left, so the first buyers get the last units and the rest get the exact
// refusal. It appends one ledger row per served want; the caller inserts the
// orders in the same transaction. It may run again in a rerun of the
// transaction; Done takes the Taken of the run that committed.
//
// Errors: ErrNotFound, errStaleFence (Done takes the hold again), ErrBusy,
// or the database's.
func (d *Deduction) DeductTx(tx *gorm.DB, wants []Want) (Taken, error) {
	return d.deductor.deductTx(tx, d.held, wants)
}

// Packet is DeductTx for the caller who commits in one round trip: the
// batch's take as a dbx.Packet, to which the caller adds its own writes
// (the orders) and which it commits on a dbx.Writer, under the hold Next
// took. Every want is served if the packet's guard (the fenced conditional
// UPDATE of the whole batch) matches, and nothing is written if it does
// not (dbx.ErrGuardMissed: too little stock for all, or a fence the row
// refuses); the caller then runs DeductTx in a transaction, which reads the
// row and decides want by want. also, when not empty, is the caller's own
// condition on the guard, with its arguments (order's unpaid cap): the
// packet writes nothing unless it holds too. ok is false when the strategy
// writes no packet (the lab's, a walk over stock buckets) or cannot yet
// (the product's price is not known before its first read).
func (d *Deduction) Packet(wants []Want, also string, args ...any) (p *dbx.Packet, taken Taken, ok bool) {
	pk, can := d.deductor.(packer)
	if !can {
		return nil, Taken{}, false
	}
	return pk.packet(d.held, wants, also, args)
}

// packer is a deductor that can write a batch's take as a packet.
type packer interface {
	packet(h *hold, wants []Want, also string, alsoArgs []any) (*dbx.Packet, Taken, bool)
}

// Done ends the hold Next took, with the outcome of the caller's work under
// it: taken is what its committed transaction's DeductTx returned (the zero
// Taken when it called none), err nil when it committed. It decides what
// Next takes next.
func (d *Deduction) Done(taken Taken, err error) {
	h := d.held
	if h == nil {
		return
	}
	d.held = nil
	if !d.keeping || err != nil || taken.SoldOut || !d.keeper.keep(h) {
		if d.keeping {
			h.bound = d.holdCtx // taken under the leader's context: released within the batch's bounds
		}
		d.trips += len(h.locks)
		err = h.release(err)
	}
	again, err := d.s.afterStale(d.ctx, d.id, d.claim, d.stale+1, err)
	switch {
	case again:
		d.stale++ // the same claim again, under raised fences
		return
	case err != nil:
		d.end(err)
		return
	}
	d.stale = 0
	d.soldOut = taken.SoldOut
	d.advance(&taken)
}

// advance asks the strategy for the hold after last (nil: the first).
func (d *Deduction) advance(last *Taken) {
	c, ok := d.deductor.next(last)
	if !ok {
		d.end(nil)
		return
	}
	d.claim = c
}

// Err is why the deduction ended without deciding every want: the lock did
// not come free (ErrBusy), the database or Redis failed, or the caller's
// work failed; nil when it ran to its end.
func (d *Deduction) Err() error { return d.err }

// SoldOut reports whether the deduction left the product sold out, and at
// which version of its row the sold-out book now has it (read after the
// last hold was released).
func (d *Deduction) SoldOut() (version int64, ok bool) { return d.version, d.soldOut }

// Close releases a hold still taken (the caller's work ended without Done,
// a panic), ends the deduction and lets the strategy settle (the gate: the
// units of a want whose order a committed transaction created stay sold,
// the others go back). It may be called more than once.
func (d *Deduction) Close() {
	if d.held != nil {
		d.Done(Taken{}, errClosed)
	}
	d.end(errClosed)
	if d.deductor != nil {
		d.deductor.close(d.ctx)
		d.deductor = nil
	}
	if d.cancel != nil {
		d.cancel()
	}
}

// errClosed is the work of a hold that Close released.
var errClosed = errors.New("inventory: deduction closed with a hold taken")

// end ends the deduction with err (the first one counts) and records it;
// a deduction that sold the product out then learns it, after the release:
// reading the row should not keep the next batch waiting, and a return
// that commits after it bumps the book's generation.
func (d *Deduction) end(err error) {
	if d.closed {
		return
	}
	d.closed, d.err = true, err
	d.s.metrics.deducted(d.strategy, err, time.Since(d.start))
	if err != nil {
		d.soldOut = false
		return
	}
	if d.soldOut {
		d.version, d.soldOut = d.s.learnSoldOut(d.ctx, d.id)
	}
}

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

	// What a strategy learns from its own committed transaction, handed
	// back to it through Done (next): the gate's served order numbers,
	// the walk's findings.
	granted []string
	walked  walked
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

// units is the sum of the wants' quantities.
func units(wants []Want) int64 {
	var n int64
	for _, w := range wants {
		n += w.Quantity
	}
	return n
}
