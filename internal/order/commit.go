package order

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/grace"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/tracing"
)

// batchLeader leads one product's batches in this instance: they share
// the product hold its Keeper keeps from one batch to the next while
// buyers queue, released when none does.
type batchLeader struct {
	s      *Service
	id     int64
	keeper *inventory.Keeper
}

func (s *Service) leadBatches(productID int64) leader {
	return &batchLeader{s: s, id: productID, keeper: s.inv.Keeper(s.bg, productID)}
}

// run is a leader's turn: place the batch, answer each request, and write
// the processed markers off the leader's path, so the next batch does not
// wait for Redis. (Only leaders call it: a leader holds a count of the
// coalescer's WaitGroup, so this Go happens before any Wait can return.)
func (l *batchLeader) run(batch []*request) {
	res := l.s.answerBatch(l.keeper, l.id, batch)
	l.s.batches.wg.Go(func() { l.s.markAll(res) })
}

func (l *batchLeader) idle() { l.keeper.Release() }

// answerBatch places a batch and answers each of its requests: as soon as
// its transaction committed (the lock's release, a Redis call that may be
// slow in a failover, does not change the outcome), else with the error.
// A leader's answers are sent off its path: waking 32 goroutines is work
// the next batch, which may already hold the lock, does not wait for.
// k is the leader's keeper; nil for a request placed alone.
func (s *Service) answerBatch(k *inventory.Keeper, productID int64, batch []*request) []result {
	s.metrics.batched(len(batch))
	var once sync.Once
	send := func(res []result) {
		for i, r := range batch {
			r.done <- res[i]
		}
	}
	answer := func(res []result) {
		once.Do(func() {
			if k == nil { // a request placed alone, outside any leader
				send(res)
				return
			}
			s.batches.wg.Go(func() { send(res) })
		})
	}
	res := s.placeSafely(k, productID, batch, answer)
	answer(res)
	return res
}

// batchAttempts bounds how often one batch's transaction runs; the last
// failure answers ErrBusy (nothing changed, retry).
const batchAttempts = 5

// batchTxTimeout bounds a batch's transaction, which runs on a context of
// its own (not the lock's), when no request of the batch has a deadline.
const batchTxTimeout = 30 * time.Second

// placeSafely is placeBatch with a panic turned into every request's error:
// a leader runs outside any request, where no HTTP recovery would catch it,
// and its waiting requests must still be answered.
func (s *Service) placeSafely(k *inventory.Keeper, productID int64, batch []*request, committed func([]result)) (res []result) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("order batch panicked; its requests are answered with an error", "product_id", productID, "panic", fmt.Sprint(p))
			res = make([]result, len(batch))
			for i := range res {
				res[i] = result{err: fmt.Errorf("order batch: panic: %v", p)}
			}
		}
	}()
	ctx, span := tracing.Batch(s.bg, batch, func(r *request) *tracing.Rider { return &r.rider })
	span.Int("shop.product.id", productID)
	defer span.End(nil)
	if d, ok := earliestDeadline(batch); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d)
		defer cancel()
	}
	return s.placeBatch(ctx, k, productID, batch, committed)
}

// earliestDeadline is the deadline of the batch's most pressed request: it
// is owed an answer then (busy or unavailable, if the lock did not come
// free), so the batch waits no longer for the lock.
func earliestDeadline(batch []*request) (time.Time, bool) {
	var d time.Time
	for _, r := range batch {
		if r.deadline.IsZero() {
			continue
		}
		if d.IsZero() || r.deadline.Before(d) {
			d = r.deadline
		}
	}
	return d, !d.IsZero()
}

// placeBatch is the collaboration flow, once for the whole batch: (the
// processed marker was checked before queueing) -> lock -> check again (one
// SELECT of the batch's order numbers) -> one transaction (stock, ledger,
// orders) -> commit -> release. Stock is served in arrival order, by the
// strategy inventory resolves once for the batch. ctx bounds the wait for
// the lock and the reads before BEGIN; committed gets the results as soon
// as the transaction committed.
//
// Inventory's Deduction is the batch's one conversation with inventory:
// the gate's admission of its wants first (redis-gate: a want turned away
// is answered with the refusal), the gate's settlement in Close. It hands
// the holds: one for a product held in one
// row; for one held in stock buckets, one per bucket tried, each one
// transaction for the requests still open. A request is answered once,
// when none is left open (or the deduction failed: the open ones get its
// error, the ones an earlier bucket's transaction committed keep their
// result).
func (s *Service) placeBatch(ctx context.Context, k *inventory.Keeper, productID int64, batch []*request, committed func([]result)) []result {
	res := make([]result, len(batch))
	end := txEnds{tx: time.Now().Add(batchTxTimeout), inDoubt: time.Now().Add(batchTxTimeout + inDoubtTimeout)}
	if dl, ok := ctx.Deadline(); ok {
		// A COMMIT under way at the deadline gets to finish, and a database
		// that went silent (a black-holed connection, which no error ends)
		// costs the client its deadline plus less than a second (A1), not
		// batchTxTimeout. A COMMIT cut there is in doubt and looked up like
		// one whose connection broke.
		end = txEnds{tx: dl.Add(grace.Commit), inDoubt: dl.Add(grace.InDoubt)}
	}
	wants := make([]inventory.Want, len(batch))
	for i, r := range batch {
		wants[i] = inventory.Want{OrderNo: r.o.OrderNo, Quantity: r.o.Quantity}
	}
	var d *inventory.Deduction
	if k != nil {
		d = k.Deduct(ctx, wants)
	} else {
		d = s.inv.Deduct(ctx, productID, wants)
	}
	defer d.Close()
	for i, err := range d.Refused() {
		if err != nil {
			res[i] = result{err: err} // the gate turned it away
		}
	}
	for redis := 0; d.Next(); redis = d.RedisTrips() {
		start, db := time.Now(), &dbx.Trips{}
		taken, err := s.commitHeld(d, db, productID, batch, res, end)
		if err == nil && !taken.SoldOut && !anyOpen(res) {
			// Answered now: the release that follows is a Redis call, slow
			// in a failover. A batch that sold the product out answers once
			// the sold-out book and the buyer lists learned it (below), so
			// its refused buyers' repeats
			// find it.
			committed(res)
		}
		d.Done(taken, err)
		s.metrics.turned(len(batch), time.Since(start), db.N(), d.RedisTrips()-redis)
	}
	err := d.Err()
	for i := range res {
		switch {
		case err != nil && res[i].open():
			res[i] = result{err: err}
		case res[i].open(): // inventory decides every want; never expected
			res[i] = result{err: fmt.Errorf("%w: no stock bucket decided the order", inventory.ErrBusy)}
		}
	}
	if version, soldOut := d.SoldOut(); soldOut {
		// Inventory put the product in its sold-out book (after the
		// release); read the buyers once, so a repeat buyer is answered
		// from memory.
		s.buyersOf(ctx, productID, version)
	}
	return res
}

// txEnds are when a batch's transaction must end (tx) and its in-doubt
// look-up (inDoubt).
type txEnds struct{ tx, inDoubt time.Time }

// commitHeld runs the batch's transaction under the hold d took, for the
// requests still open, retrying what may be retried, and copies its results
// into res once it committed. taken is what its deduction took, the zero
// Taken when the transaction that committed deducted nothing.
//
// Checked once before BEGIN; from here the fence (or, without a lock, the
// conditional update) guards the write. A hold lost or a deadline passed
// does not cancel the transaction midway: it runs until the deadline plus
// grace.Commit (A1), and a COMMIT cut there is in doubt like one whose
// connection broke, and looked up.
func (s *Service) commitHeld(d *inventory.Deduction, trips *dbx.Trips, productID int64, batch []*request, res []result, end txEnds) (taken inventory.Taken, err error) {
	ctx := d.Context()
	if err := ctx.Err(); err != nil {
		return inventory.Taken{}, err
	}
	ctx, cancel := context.WithDeadline(dbx.CountTrips(context.WithoutCancel(ctx), trips), end.tx)
	defer cancel()
	ctx, span := tracing.Begin(ctx, tracing.Tx)
	span.Int("shop.batch.size", int64(len(batch)))
	span.Int("shop.lock.fence", d.Fence().Number)
	defer func() { span.End(err) }()
	if s.cfg.Packets != nil {
		span.Int("shop.tx.packet", 1)
		if taken, done, err := s.commitPacket(ctx, d, productID, batch, res, end); done {
			return taken, err
		}
		span.Int("shop.tx.packet", 0) // written one statement at a time below
	}
	var got []result // this transaction's results; res once it committed
	for attempt := 1; ; attempt++ {
		span.Int("shop.tx.attempts", int64(attempt))
		committing := false
		err = dbx.TxOnce(ctx, s.db, func(tx *gorm.DB) error {
			got = slices.Clone(res)
			taken, err = s.commitTx(tx, d, batch, got)
			committing = err == nil
			return err
		})
		if committing && (dbx.ConnLost(err) || ctx.Err() != nil) {
			// COMMIT was sent and its answer lost, or cut at end.tx: in
			// doubt. Decided by what the database holds, not guessed.
			var landed bool
			rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), end.inDoubt)
			landed, err = s.resolveInDoubt(rctx, productID, got, err)
			cancel()
			if landed || err != nil {
				break
			}
			err = errRolledBack // it did not land: run it again
		}
		// One retry layer: a deadlock victim, a COMMIT that did not
		// land, or a twin committed by a writer that holds no product
		// lock (the lock-free lab strategies), whose rerun's check then
		// finds it.
		if !dbx.Retryable(err) && !dbx.IsDuplicate(err) && !errors.Is(err, errRolledBack) {
			break
		}
		if attempt == batchAttempts || !dbx.Pause(ctx, attempt) {
			if !dbx.Retryable(err) { // a deadlock or lock wait (1213, 1205) stays itself: 503 unavailable (docs/api.md)
				err = fmt.Errorf("%w: the batch kept meeting concurrent writers: %w", inventory.ErrBusy, err)
			}
			break
		}
	}
	if err != nil {
		return inventory.Taken{}, err
	}
	copy(res, got)
	return taken, nil
}

// errRolledBack is a batch transaction whose COMMIT was in doubt and did
// not land: nothing changed, so it runs again.
var errRolledBack = errors.New("order batch: the commit did not land")
