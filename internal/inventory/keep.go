package inventory

import (
	"context"
	"time"

	"github.com/seckill-lab/shop/internal/grace"
	"github.com/seckill-lab/shop/internal/tracing"
)

// A Keeper is a batch leader's hold of a hot product kept from one batch to
// the next. Taking and releasing the product lock is two Redis round trips
// per batch, twice the database's one (order's packet); while the
// leader has more buyers queued it keeps the lock instead, and the next
// batch's Next reuses the hold (the fenced UPDATE accepts repeat writes by
// the same holder, so the fence guards every batch of a kept hold as it
// guards one).
//
// A hold is kept only when it is safe and fair to:
//   - by lock-fence or redis-gate, on a product held in one row (a walk
//     over stock buckets keeps its order of keys), without the lab's pause;
//   - after a batch whose transaction committed, and that left stock;
//   - for at most Config.KeepBatches batches and Config.KeepFor since it
//     was taken, so restocks, cancels, the gate's seed and other instances
//     get their turn;
//   - while nobody else asked for the lock: an attempt that finds it held
//     marks it wanted (lockx), and the check runs beside each batch's
//     transaction, not before it (a check not answered within wantedWait
//     after the transaction keeps nothing);
//   - while the lease holds: a hold lost, or valid for less than half its
//     TTL, is released and taken afresh before the next BEGIN.
//
// A kept hold outlives the batch that took it, so its context is not that
// batch's (under), and each batch keeps its own deadline for its wait, its
// transaction and the release of a hold it does not keep.
type Keeper struct {
	s   *Service
	id  int64
	ctx context.Context // the leader's: bounds the release of a hold kept when it goes idle

	held    *hold     // kept from the last batch; nil: none
	since   time.Time // when the hold in use or kept was taken
	batches int       // batches it ran
}

// Keeper returns the keeper of productID's holds for one leader, running
// under ctx. Release it when the leader ends or goes idle.
func (s *Service) Keeper(ctx context.Context, productID int64) *Keeper {
	return &Keeper{s: s, id: productID, ctx: context.WithoutCancel(ctx)}
}

// Deduct is Service.Deduct for the keeper's product, whose hold it may take
// from the last batch and keep for the next.
func (k *Keeper) Deduct(ctx context.Context, wants []Want) *Deduction {
	return k.s.deduct(ctx, k.id, wants, k)
}

// Release releases a kept hold; the leader calls it when no buyer waits.
func (k *Keeper) Release() {
	if k.held != nil {
		k.drop(k.held)
		k.held = nil
	}
}

// drop releases h, whose batches committed, within grace.Hold.
func (k *Keeper) drop(h *hold) {
	ctx, cancel := context.WithTimeout(k.ctx, grace.Hold)
	defer cancel()
	h.bound = ctx
	_ = h.release(nil) // a lease lost since its last batch is counted there
}

// keeps reports whether holds of claim c by strategy st may be kept.
func (k *Keeper) keeps(st strategy, c claim) bool {
	return k != nil && st.keeps && c == oneBucket(0, true) && k.s.cfg.KeepBatches > 1 && k.s.cfg.PauseAfterLock <= 0
}

// reuse hands over the kept hold for a batch that needs claim c while it is
// good for one more batch (not lost, valid for over half its TTL); else it
// releases it and returns nil.
func (k *Keeper) reuse(c claim) *hold {
	h := k.held
	if h == nil {
		return nil
	}
	k.held = nil
	l := h.locks[0]
	if h.claim == c && h.ctx.Err() == nil && time.Until(l.ValidUntil()) > l.TTL()/2 {
		return h
	}
	k.drop(h)
	return nil
}

// under is the context a hold the keeper may keep is taken under: not
// cancelled with the batch that takes it (a batch's context ends with it),
// but over grace.Hold after that batch's deadline, as HoldPast: a Redis or
// database gone silent cannot keep it for ever. stop ends it; the hold's
// release calls it.
func (k *Keeper) under(batch context.Context) (ctx context.Context, stop context.CancelFunc) {
	ctx = context.WithoutCancel(batch) // (its values: the batch's span and timings)
	if dl, ok := batch.Deadline(); ok {
		return context.WithDeadline(ctx, dl.Add(grace.Hold))
	}
	return context.WithCancel(ctx)
}

// resume starts the turn of a batch under the kept hold h: its own
// inventory.lock span under the batch's, and a lock wait of nothing.
func (k *Keeper) resume(h *hold, batch context.Context) {
	h.turn, h.span = tracing.Start(batch, "inventory.lock")
	h.span.Int("shop.product.id", k.id)
	h.span.Int("shop.lock.bucket", int64(h.claim.first))
	h.span.Int("shop.lock.fence", h.locks[0].Fence().Number)
	h.span.Int("shop.lock.kept", 1)
	_, wait := tracing.Begin(h.turn, tracing.LockWait)
	wait.End(nil)
}

// took starts counting a hold just taken.
func (k *Keeper) took() { k.since, k.batches = time.Now(), 0 }

// watch starts the check whether someone else asked for h's lock, beside
// the batch's transaction; keep reads its answer.
func (k *Keeper) watch(h *hold) {
	ch := make(chan bool, 1)
	h.wanted = ch
	ctx, l := context.WithoutCancel(h.ctx), h.locks[0] // (read here: a release may clear h.locks meanwhile)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, grace.Hold)
		defer cancel()
		wanted, err := l.Wanted(ctx)
		ch <- wanted || err != nil // an error: hand it over; the release tells more
	}()
}

// wantedWait bounds how long keep waits for the check's answer: it was
// sent beside the transaction, so it is normally there already.
const wantedWait = 20 * time.Millisecond

// keep keeps h, whose batch committed and left stock, when the bounds allow
// one more batch and nobody else asked for the lock; false: the caller
// releases it.
func (k *Keeper) keep(h *hold) bool {
	if h.wanted == nil {
		return false
	}
	k.batches++
	if k.batches >= k.s.cfg.KeepBatches || time.Since(k.since) >= k.s.cfg.KeepFor {
		return false
	}
	select {
	case wanted := <-h.wanted:
		h.wanted = nil
		if wanted {
			k.s.metrics.handedOver()
			return false
		}
	case <-time.After(wantedWait): // Redis is slow: keep nothing
		return false
	}
	if h.ctx.Err() != nil {
		return false
	}
	h.span.End(nil) // this batch's turn
	k.held = h
	return true
}
