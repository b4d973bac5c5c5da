package inventory

import (
	"context"
	"errors"
	"time"

	"github.com/seckill-lab/shop/internal/grace"
	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/tracing"
)

// A hold is the one way inventory holds a product's stock: every write to
// a product's stock rows (deductions, restocks, returns) runs under one,
// and so does the gate's seed, which must not miss a restock. A claim says which locks it takes: none (the lock-free
// lab strategies), one stock bucket's (bucket 0 is the products row, whose
// lock is the product's own), or every bucket's. Locks are taken in bucket
// order, each under the one before it, so holders never deadlock; a
// deduction holds one bucket lock at a time, the tally and restocks all
// of them.
//
// The work under a hold runs on the hold's context, cancelled when any of
// its locks is lost, and the hold is released after the work returned
// (its transaction committed or rolled back). A write the database refused
// for a stale fence is answered by one policy, staleFenceRetry.

// claim is what a hold takes: the locks of buckets first..last of a
// product, in bucket order; none when last < first.
type claim struct {
	first, last int
	// pausable: the lab's pause after lock may stop the holder (deductions
	// only), so the watchdog is off (no renewal could run during such a
	// pause either) and the work runs on the context the hold was taken
	// under, not the lock's: the fence alone must stop a stale write.
	pausable bool
}

// noLock is the claim of the lock-free lab strategies.
func noLock() claim { return claim{first: 0, last: -1} }

// oneBucket is the claim of bucket b's lock (0: the product's).
func oneBucket(b int, pausable bool) claim { return claim{first: b, last: b, pausable: pausable} }

// allBuckets is the claim of every bucket's lock of a product held in k.
func allBuckets(k int) claim { return claim{first: 0, last: k - 1} }

func (c claim) locks() bool { return c.last >= c.first }

// hold is a claim's locks, taken.
type hold struct {
	s        *Service
	id       int64
	claim    claim
	locks    []*lockx.Lock     // bucket first+i's lock
	under    []context.Context // the context each lock was taken under, for its release
	ctx      context.Context   // the work's
	pausable bool              // the lab's pause may stop it: no watchdog (claim.pausable)
	span     tracing.Span      // the hold's, ended by its release (a kept hold's: its batch's turn)
	turn     context.Context   // carries span: the hold's spans go under it
	// bound, when set, bounds the release instead of under: a hold kept
	// across batches (keep.go) was taken under the leader's context.
	bound  context.Context
	wanted chan bool          // a kept hold's: whether someone asked for the lock (Keeper.watch)
	stop   context.CancelFunc // a kept hold's: ends the context it was taken under (Keeper.under)
}

// acquire takes c's locks of product id, waiting up to wait for each, under
// ctx (a hold's context outlives its request: see HoldPast).
func (s *Service) acquire(ctx context.Context, id int64, c claim, wait time.Duration) (*hold, error) {
	h := &hold{s: s, id: id, claim: c, ctx: ctx, pausable: c.pausable && s.cfg.PauseAfterLock > 0}
	if !c.locks() {
		return h, nil
	}
	h.ctx, h.span = tracing.Start(ctx, "inventory.lock")
	h.turn = h.ctx
	h.span.Int("shop.product.id", id)
	h.span.Int("shop.lock.bucket", int64(c.first))
	base := h.ctx
	_, waiting := tracing.Begin(base, tracing.LockWait)
	opts := lockx.AcquireOptions{TTL: s.cfg.LockTTL, Wait: wait, Watchdog: !h.pausable}
	for b := c.first; b <= c.last; b++ {
		l, err := s.locks.Acquire(h.ctx, bucketKey(id, b), opts)
		if err != nil {
			err = s.holdErr(id, h.pausable, err)
			waiting.End(err)
			_ = h.release(err) // the locks taken so far; err stands
			return nil, err
		}
		h.locks, h.under = append(h.locks, l), append(h.under, h.ctx)
		h.ctx = l.Context()
	}
	waiting.End(nil)
	h.span.Int("shop.lock.fence", h.locks[0].Fence().Number)
	if h.pausable {
		h.ctx = base
	}
	return h, nil
}

// fence is bucket b's fencing token under h; the zero Fence without a lock
// of it.
func (h *hold) fence(b int) Fence {
	if i := b - h.claim.first; i >= 0 && i < len(h.locks) {
		return h.locks[i].Fence()
	}
	return Fence{}
}

// release ends h's locks, innermost first, after the work under them ended
// with err, and reports the outcome (holdErr).
func (h *hold) release(err error) error {
	if !h.claim.locks() {
		return err
	}
	rctx, release := tracing.Start(tracing.Within(h.ctx, h.turn), "inventory.lock.release")
	for i := len(h.locks) - 1; i >= 0; i-- {
		under := h.under[i]
		if h.bound != nil {
			under = h.bound
		}
		err = h.s.holdErr(h.id, h.pausable, h.s.locks.End(tracing.Within(under, rctx), h.locks[i], err))
	}
	h.locks = nil
	release.End(err)
	h.span.End(err)
	if h.stop != nil {
		h.stop()
	}
	return err
}

// run runs fn under h and releases h after it, also when fn panics.
func (h *hold) run(fn func(ctx context.Context, h *hold) error) (err error) {
	defer func() { err = h.release(err) }()
	return fn(h.ctx, h)
}

// withHold runs fn under a hold of c on product id, taken again after a
// stale fence as staleFenceRetry says.
func (s *Service) withHold(ctx context.Context, id int64, c claim, wait time.Duration, fn func(ctx context.Context, h *hold) error) error {
	for refusal := 1; ; refusal++ { // a hold after the first follows a refusal
		h, err := s.acquire(ctx, id, c, wait)
		if err != nil {
			return err
		}
		again, err := s.afterStale(ctx, id, c, refusal, h.run(fn))
		if !again {
			return err
		}
	}
}

// fenceRetry is what follows a write the database refused for a stale
// fence (Redis lost its fence counter and handed out a number the row had
// seen): the claim's counters are raised to what their rows last accepted
// and the same claim is held again, up to attempts holds in all; then the
// work is refused as busy (nothing was changed).
type fenceRetry struct{ attempts int }

// staleFenceRetry is the stale-fence policy of every hold.
var staleFenceRetry = fenceRetry{attempts: 3}

// again reports whether the refusal-th stale refusal in a row is followed
// by another hold.
func (r fenceRetry) again(refusal int) bool { return refusal < r.attempts }

// afterStale applies staleFenceRetry to the outcome err of a hold of c,
// which would be the refusal-th stale refusal in a row: again is true when
// the claim is to be held again (err was a stale fence, the counters are
// raised); else err is the outcome.
func (s *Service) afterStale(ctx context.Context, id int64, c claim, refusal int, err error) (again bool, _ error) {
	if !errors.Is(err, errStaleFence) {
		return false, err
	}
	s.metrics.staleFence()
	for b := c.first; b <= c.last; b++ {
		if err := s.raiseFence(ctx, id, b); err != nil {
			return false, err
		}
	}
	if !staleFenceRetry.again(refusal) {
		return false, ErrBusy
	}
	return true, nil
}

// raiseFence raises a bucket lock's fence counter to the fence its row last
// accepted.
func (s *Service) raiseFence(ctx context.Context, id int64, bucket int) error {
	r, err := readBucket(s.db.WithContext(context.WithoutCancel(ctx)), id, bucket)
	if err != nil {
		return err
	}
	s.log.Warn("stock write refused: stale fencing token; raising the fence and retrying", "product_id", id, "bucket", bucket, "db_fence", r.Fence)
	return s.locks.RaiseFence(ctx, bucketKey(id, bucket), r.Fence)
}

// holdErr is the outcome of a hold as inventory reports it, from lockx's:
// a lock not obtained is ErrBusy; a hold lost before its release after
// fenced work committed stands; a hold lost while the work ran wrote
// nothing (ErrBusy).
func (s *Service) holdErr(id int64, pausable bool, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, lockx.ErrNotObtained):
		s.metrics.busy()
		return ErrBusy
	case errors.Is(err, lockx.ErrLostBeforeRelease):
		// Committed, fenced: it stands. Counted, since it means the TTL is
		// too short for the work or the holder was paused.
		s.metrics.releaseFailed()
		s.log.Warn("product lock was lost before release", "product_id", id, "err", err)
		return nil
	case errors.Is(err, errStaleFence):
		return err
	case errors.Is(err, lockx.ErrNotHeld) && !pausable:
		s.log.Warn("product lock lost before commit; nothing was written", "product_id", id, "err", err)
		return ErrBusy
	}
	return err
}

// HoldPast is the context of a hold taken for a request whose deadline is
// dl: not cancelled with the request (a client gone away must not cut a
// COMMIT midway), but over grace.Hold after dl, so a database or Redis that
// went silent cannot keep the hold, and the client's answer, for ever.
func HoldPast(ctx context.Context, dl time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(context.WithoutCancel(ctx), dl.Add(grace.Hold))
}
