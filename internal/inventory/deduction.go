package inventory

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/tracing"
)

// Deduction is one batch's guarded deduction of a product's stock: the
// gate's admission of its wants (redis-gate), then the holds the product's
// strategy needs, taken one at a time, each handed to the caller for one
// transaction, then the gate's settlement. The caller reads it as a loop,
// with no callback:
//
//	d := inv.Deduct(ctx, productID, wants)
//	defer d.Close()
//	refused := d.Refused() // the gate's refusals, per want
//	for d.Next() {
//		d.Done(runTx(d.Context(), d.Take())) // DeductTx(tx, d.Take(), wants) inside
//	}
//	err := d.Err()
//
// The holds, by strategy:
//
//   - lock-fence, redis-gate and the lab's lock and lock-conditional: the
//     product lock, once; Take().Fence is its fencing token.
//   - the lock-free lab strategies (naive, conditional): no lock, once;
//     the zero Fence.
//   - a product held in stock buckets (buckets.go): the home bucket's lock,
//     then each next bucket not known empty while wants are left open,
//     then every bucket's lock for the tally.
//
// A write refused for a stale fence (Redis lost the fence counter) raises
// the counter to what the database last accepted and hands the same hold
// again, new, up to three times. A deduction that left the product sold
// out puts it in the sold-out book once its last hold was released
// (SoldOut).
//
// A deadline on ctx (the batch's most pressed request) bounds each wait
// for a lock, not the holds: a hold whose context ended would stop its
// watchdog while the transaction still runs (see HoldPast).
type Deduction struct {
	s         *Service
	productID int64
	strategy  string          // resolved once, for the whole batch
	buckets   int             // the product's K
	ctx       context.Context // the caller's: its deadline bounds the waits
	hold      context.Context // the holds' (HoldPast)
	cancel    context.CancelFunc
	deadline  time.Time // ctx's; zero: none
	start     time.Time

	// The gate's part (redis-gate): what it took for each want, its
	// refusals (per want), and the order numbers whose units a committed
	// transaction sold, for the settlement in Close.
	admitted []admission
	refused  []error
	sold     map[string]bool

	next   step // what Next takes
	stale  int  // holds of next refused for a stale fence so far
	held   *held
	take   *Take
	err    error
	closed bool // nothing more to take

	// The walk of a product held in buckets: the buckets known empty when
	// it began, and the empty book's generation then.
	empty, gen uint64

	soldOut bool // the deduction left the product sold out
	version int64
}

// step is a hold Next takes: one bucket's lock (bucket 0: the product
// lock), or every bucket's (all).
type step struct {
	bucket int
	all    bool
}

// held is the hold handed to the caller: the locks taken (none for the
// lock-free strategies; one per bucket, in order, for all), each with the
// context it was taken under, and the context the work runs on.
type held struct {
	locks  []*lockx.Lock
	under  []context.Context
	work   context.Context
	paused bool
	span   tracing.Span // the hold's, ended by its release
}

// Deduct starts the deduction of a batch of wants for productID, all of
// one product, in arrival order: it resolves the product's strategy once
// for the batch and, for redis-gate, lets each want through the gate
// (Refused says which were turned away); nothing is held until Next.
// Close it when done with it.
func (s *Service) Deduct(ctx context.Context, productID int64, wants []Want) *Deduction {
	d := &Deduction{s: s, productID: productID, strategy: s.StrategyOf(productID), ctx: ctx, hold: ctx, start: time.Now()}
	if dl, ok := ctx.Deadline(); ok {
		d.deadline = dl
		d.hold, d.cancel = HoldPast(ctx, dl)
	}
	k, err := s.bucketsOf(ctx, productID)
	if err != nil {
		d.end(err) // nothing admitted, nothing held
		return d
	}
	if d.buckets = k; k > 1 {
		d.strategy = LockFence // the only strategy that walks buckets
		d.empty, d.gen = s.empty.get(productID)
		d.next = d.bucketAfter(-1)
	}
	if d.strategy == RedisGate && len(wants) > 0 {
		d.admit(wants)
	}
	return d
}

// admit takes each want's units from the gate (admitAll). A want turned
// away is refused; when none is left, the deduction is over with nothing
// held. A gate that cannot answer ends it (the units taken so far go back
// in Close).
func (d *Deduction) admit(wants []Want) {
	taken, refused, err := d.s.admitAll(d.ctx, d.productID, wants)
	d.refused = refused
	d.admitted = make([]admission, 0, len(wants))
	for i, a := range taken {
		if refused[i] == nil && a.gen != "" {
			d.admitted = append(d.admitted, a)
		}
	}
	switch {
	case err != nil:
		d.end(err)
	case !slices.Contains(refused, nil):
		d.end(nil)
	}
}

// Refused is, per want of Deduct, the gate's refusal (redis-gate: ErrSoldOut,
// ErrInsufficientStock or ErrBusy), nil for a want let through; nil for
// strategies without a gate. A refused want must not be deducted.
func (d *Deduction) Refused() []error { return d.refused }

// bucketAfter is the walk's step after the i-th bucket tried from home
// (-1: none yet): the next bucket not known empty, else the tally.
func (d *Deduction) bucketAfter(i int) step {
	k := d.buckets
	home := d.s.home % k
	for i++; i < k; i++ {
		if b := (home + i) % k; d.empty&(1<<b) == 0 {
			return step{bucket: b}
		}
	}
	return step{all: true}
}

// Next takes the next hold and reports whether the caller is to run its
// transaction under it; false when the deduction is over (Err says how).
func (d *Deduction) Next() bool {
	if d.closed {
		return false
	}
	s := d.s
	walks := d.buckets > 1
	switch {
	case !walks || d.stale > 0: // a stale-fence retry is no new step
	case d.next.all:
		s.metrics.bucketTally()
	case d.next.bucket != s.home%d.buckets:
		s.metrics.bucketMove()
	}
	h, err := d.acquire()
	if err != nil {
		d.end(err)
		return false
	}
	d.held = h
	t := &Take{ProductID: d.productID, strategy: d.strategy, gated: len(d.admitted) > 0}
	if walks {
		t.buckets = d.buckets
		t.bucket, t.all = d.next.bucket, d.next.all
	}
	if len(h.locks) > 0 {
		t.Fence = h.locks[0].Fencing()
	}
	if t.all {
		t.fences = make([]Fence, len(h.locks))
		for b, l := range h.locks {
			t.fences[b] = l.Fencing()
		}
	} else if err := s.prepare(h.work, t); err != nil {
		d.Done(err)
		return false
	}
	d.take = t
	return true
}

// Context is the context of the hold Next took: cancelled when a lock of
// it is lost, so a transaction on it rolls back.
func (d *Deduction) Context() context.Context { return d.held.work }

// Take is the hold's deduction, for DeductTx in the caller's transaction.
func (d *Deduction) Take() *Take { return d.take }

// Done ends the hold Next took, with the outcome of the caller's work under
// it (nil: its transaction committed), and decides what Next takes next.
func (d *Deduction) Done(err error) {
	if d.held == nil {
		return
	}
	s, t := d.s, d.take
	err = d.release(err)
	d.held, d.take = nil, nil
	if errors.Is(err, errStaleFence) {
		s.metrics.staleFence()
		if err := d.raiseFence(); err != nil {
			d.end(err)
			return
		}
		if d.stale++; d.stale == 3 {
			d.end(ErrBusy)
		}
		return // the same hold again, under a raised fence
	}
	if err != nil {
		d.end(err)
		return
	}
	d.stale = 0
	if t.gated {
		if d.sold == nil {
			d.sold = make(map[string]bool, len(t.granted))
		}
		for _, no := range t.granted {
			d.sold[no] = true
		}
	}
	id := d.productID
	switch {
	case d.buckets <= 1:
		d.soldOut = t.soldOut
	case d.next.all:
		if t.tallied {
			s.empty.set(id, d.gen, t.left)
		}
		d.soldOut = t.soldOut
	default:
		if t.emptied {
			s.empty.add(id, d.gen, 1<<d.next.bucket)
		}
		if t.open > 0 {
			d.next = d.bucketAfter((d.next.bucket - s.home%d.buckets + d.buckets) % d.buckets)
			return
		}
	}
	d.end(nil)
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
// a panic), ends the deduction and settles the gate's admissions: the
// units of a want whose order a committed transaction created stay sold,
// the others go back to the gate (the first want of an order number is the
// one that created it; a twin of it in the batch gives its share back). It
// may be called more than once.
func (d *Deduction) Close() {
	if d.held != nil {
		d.Done(errClosed)
	}
	d.end(errClosed)
	for _, a := range d.admitted {
		sold := d.sold[a.OrderNo]
		delete(d.sold, a.OrderNo)
		d.s.settle(d.ctx, d.productID, a, sold)
	}
	d.admitted = nil
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
		d.version, d.soldOut = d.s.learnSoldOut(d.ctx, d.productID)
	}
}

// acquire takes the hold of d.next: nothing for the lock-free strategies,
// else the step's lock, or every bucket's in bucket order (0, 1, ...,
// K-1; deductions hold one bucket lock at a time, so taking them in order
// cannot deadlock with anything), each under the one before it.
func (d *Deduction) acquire() (*held, error) {
	s, id := d.s, d.productID
	if !locks(d.strategy) && d.buckets <= 1 {
		return &held{work: d.ctx}, nil
	}
	wait := s.cfg.LockWait
	if !d.deadline.IsZero() {
		wait = max(0, min(wait, time.Until(d.deadline)))
	}
	paused := !d.next.all && s.cfg.PauseAfterLock > 0
	opts := lockx.AcquireOptions{TTL: s.cfg.LockTTL, Wait: wait, Watchdog: !paused}
	first, last := d.next.bucket, d.next.bucket
	if d.next.all {
		first, last = 0, d.buckets-1
	}
	h := &held{paused: paused}
	h.work, h.span = tracing.Start(d.hold, "inventory.lock")
	h.span.Int("shop.product.id", id)
	h.span.Int("shop.lock.bucket", int64(first))
	_, waiting := tracing.Begin(h.work, tracing.LockWait)
	for b := first; b <= last; b++ {
		l, err := s.locks.Acquire(h.work, bucketKey(id, b), opts)
		if err != nil {
			err = s.holdErr(id, paused, err)
			waiting.End(err)
			d.releaseAll(h, err)
			return nil, err
		}
		h.locks, h.under = append(h.locks, l), append(h.under, h.work)
		h.work = l.Context()
	}
	waiting.End(nil)
	h.span.Int("shop.lock.fence", h.locks[0].Fencing().Number)
	if paused {
		// The lab pause stands in for a stop-the-world pause: no
		// renewal could run during one either, and the work runs on the
		// hold's context, so the fence alone must stop a stale write.
		h.work = d.hold
	}
	return h, nil
}

// release ends d.held's locks, innermost first, with the work's outcome,
// and reports it as holding would.
func (d *Deduction) release(err error) error {
	return d.releaseAll(d.held, err)
}

func (d *Deduction) releaseAll(h *held, err error) error {
	rctx, release := tracing.Start(h.work, "inventory.lock.release")
	for i := len(h.locks) - 1; i >= 0; i-- {
		err = d.s.holdErr(d.productID, h.paused, d.s.locks.End(tracing.Within(h.under[i], rctx), h.locks[i], err))
	}
	release.End(err)
	h.span.End(err)
	return err
}

// raiseFence raises the fence counter of every lock of d.next to the
// fence its row last accepted.
func (d *Deduction) raiseFence() error {
	if !d.next.all {
		return d.s.raiseFence(d.ctx, d.productID, d.next.bucket)
	}
	for b := range d.buckets {
		if err := d.s.raiseFence(d.ctx, d.productID, b); err != nil {
			return err
		}
	}
	return nil
}
