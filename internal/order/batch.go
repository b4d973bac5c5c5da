package order

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/tracing"
)

// Orders for one product are coalesced: each instance queues them, and one
// leader per product takes the product lock once, drains what queued (up to
// a cap) and runs ONE transaction for the batch: one fenced conditional
// stock update, one multi-row INSERT of ledger rows and one of orders. One
// order per lock hold caps a hot product at 1 / hold time; a batch per
// hold lifts that cap by the batch size, at the cost of a request waiting
// for the batch in flight before it (no artificial wait by default).
//
// Every request is answered from its batch's committed result, never
// before; a batch runs on the service's own context, so a client that gave
// up still gets its order committed (and replayed when it asks again).

// request is one order waiting for its batch.
type request struct {
	o    Order // the order to create: number, user, product, quantity, kind, key, hash
	done chan result
	// deadline is the request's own (zero: none): its batch waits for the
	// product lock no longer than its oldest request may still wait.
	deadline time.Time
	rider    tracing.Rider // its queue wait, span and Server-Timing
}

// result is a request's answer.
type result struct {
	o       Order
	created bool
	err     error
}

// open reports whether r is no answer yet: nothing decided it, or the
// bucket tried last had not enough and another is still to be tried.
func (r result) open() bool {
	return (r.err == nil && r.o.OrderNo == "") || errors.Is(r.err, inventory.ErrElsewhere)
}

func anyOpen(res []result) bool {
	return slices.ContainsFunc(res, result.open)
}

// coalescer keeps, per product, the requests waiting for the product lock,
// and runs one leader goroutine per product with requests waiting.
type coalescer struct {
	max    int
	window time.Duration
	run    func(productID int64, batch []*request)

	mu      sync.Mutex
	queues  map[int64][]*request // a key is present while its leader runs
	closing bool                 // wait was called: no new leaders
	wg      sync.WaitGroup
}

func newCoalescer(max int, window time.Duration, run func(int64, []*request)) *coalescer {
	return &coalescer{max: max, window: window, run: run, queues: map[int64][]*request{}}
}

// submit queues r; r.done receives its result. It returns false, queueing
// nothing, once wait was called (a request that outlived the server's
// shutdown wait): the caller then places r alone.
func (c *coalescer) submit(r *request) bool {
	id := r.o.ProductID
	c.mu.Lock()
	defer c.mu.Unlock()
	q, leading := c.queues[id]
	if !leading && c.closing {
		return false
	}
	c.queues[id] = append(q, r)
	if !leading {
		c.wg.Add(1)
		go c.lead(id)
	}
	return true
}

// withdraw takes r out of its product's queue if no batch has taken it yet,
// and reports whether it did: a withdrawn request changed nothing.
func (c *coalescer) withdraw(r *request) bool {
	id := r.o.ProductID
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queues[id]
	i := slices.Index(q, r)
	if i < 0 {
		return false
	}
	c.queues[id] = slices.Delete(q, i, i+1)
	return true
}

// lead drains id's queue batch by batch and ends when it is empty.
func (c *coalescer) lead(id int64) {
	defer c.wg.Done()
	for {
		if c.window > 0 {
			time.Sleep(c.window)
		}
		c.mu.Lock()
		q := c.queues[id]
		if len(q) == 0 {
			delete(c.queues, id)
			c.mu.Unlock()
			return
		}
		n := min(len(q), c.max)
		batch := q[:n:n]
		c.queues[id] = q[n:]
		c.mu.Unlock()
		c.run(id, batch)
	}
}

// wait returns when every leader has finished; no new leader starts after
// it was called.
func (c *coalescer) wait() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.wg.Wait()
}

// runBatch is a leader's turn: place the batch, answer each request, and
// write the processed markers off the leader's path, so the next batch does
// not wait for Redis. (Only leaders call it: a leader holds a count of the
// coalescer's WaitGroup, so this Go happens before any Wait can return.)
func (s *Service) runBatch(productID int64, batch []*request) {
	res := s.answerBatch(productID, batch)
	s.batches.wg.Go(func() { s.markAll(res) })
}

// answerBatch places a batch and answers each of its requests: as soon as
// its transaction committed (the lock's release, a Redis call that may be
// slow in a failover, does not change the outcome), else with the error.
func (s *Service) answerBatch(productID int64, batch []*request) []result {
	s.metrics.batched(len(batch))
	var once sync.Once
	answer := func(res []result) {
		once.Do(func() {
			for i, r := range batch {
				r.done <- res[i]
			}
		})
	}
	res := s.placeSafely(productID, batch, answer)
	answer(res)
	return res
}

// batchAttempts bounds how often one batch's transaction runs; the last
// failure answers ErrBusy (nothing changed, retry).
const batchAttempts = 5

// batchTxTimeout bounds a batch's transaction once it no longer runs on the
// lock's context, when no request of the batch has a deadline.
const batchTxTimeout = 30 * time.Second

// commitGrace and inDoubtGrace are how long after its most pressed
// request's deadline a batch's transaction may still run, and its in-doubt
// look-up: a COMMIT under way at the deadline gets to finish, and a
// database that went silent (a black-holed connection, which no error ends)
// costs the client its deadline plus less than a second, not the 30 s of
// batchTxTimeout (A1: answered within the request timeout + 1 s: the hold
// ends 300 ms after the deadline, see inventory.HoldPast, and keeping the
// idempotency record takes 500 ms at most). A COMMIT cut by it is in doubt
// and looked up like one whose connection broke.
const (
	commitGrace  = 200 * time.Millisecond
	inDoubtGrace = 300 * time.Millisecond
)

// placeSafely is placeBatch with a panic turned into every request's error:
// a leader runs outside any request, where no HTTP recovery would catch it,
// and its waiting requests must still be answered.
func (s *Service) placeSafely(productID int64, batch []*request, committed func([]result)) (res []result) {
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
	return s.placeBatch(ctx, productID, batch, committed)
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

// placeBatch is the flow of the seed, once for the whole batch: (the
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
func (s *Service) placeBatch(ctx context.Context, productID int64, batch []*request, committed func([]result)) []result {
	res := make([]result, len(batch))
	end := txEnds{tx: time.Now().Add(batchTxTimeout), inDoubt: time.Now().Add(batchTxTimeout + inDoubtTimeout)}
	if dl, ok := ctx.Deadline(); ok {
		end = txEnds{tx: dl.Add(commitGrace), inDoubt: dl.Add(inDoubtGrace)}
	}
	wants := make([]inventory.Want, len(batch))
	for i, r := range batch {
		wants[i] = inventory.Want{OrderNo: r.o.OrderNo, Quantity: r.o.Quantity}
	}
	d := s.inv.Deduct(ctx, productID, wants)
	defer d.Close()
	for i, err := range d.Refused() {
		if err != nil {
			res[i] = result{err: err} // the gate turned it away
		}
	}
	for d.Next() {
		soldOut, err := s.commitHeld(d.Context(), d.Take(), productID, batch, res, end)
		if err == nil && !soldOut && !anyOpen(res) {
			// Answered now: the release that follows is a Redis call, slow
			// in a failover. A batch that sold the product out answers once
			// the books learned it (below), so its refused buyers' repeats
			// find it.
			committed(res)
		}
		d.Done(err)
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

// txEnds are when a batch's transaction must end (txEnd) and its in-doubt
// look-up (inDoubt), see commitGrace.
type txEnds struct{ tx, inDoubt time.Time }

// commitHeld runs the batch's transaction under one hold of the product's
// stock (take, its context ctx), for the requests still open, retrying
// what may be retried, and copies its results into res once it committed.
// soldOut: the product is known to be sold out after it.
//
// Checked once before BEGIN; from here the fence (or, without a lock, the
// conditional update) guards the write. A hold lost or a deadline passed
// does not cancel the transaction midway: it runs until the deadline plus
// commitGrace (A1), and a COMMIT cut there is in doubt like one whose
// connection broke, and looked up.
func (s *Service) commitHeld(ctx context.Context, take *inventory.Take, productID int64, batch []*request, res []result, end txEnds) (soldOut bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), end.tx)
	defer cancel()
	ctx, span := tracing.Begin(ctx, tracing.Tx)
	span.Int("shop.batch.size", int64(len(batch)))
	span.Int("shop.lock.fence", take.Fence.Number)
	defer func() { span.End(err) }()
	var got []result // this transaction's results; res once it committed
	for attempt := 1; ; attempt++ {
		span.Int("shop.tx.attempts", int64(attempt))
		committing := false
		err = dbx.TxOnce(ctx, s.db, func(tx *gorm.DB) error {
			take.Restart()
			got = slices.Clone(res)
			soldOut, err = s.commitTx(tx, take, batch, got)
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
			err = fmt.Errorf("%w: the batch kept meeting concurrent writers: %w", inventory.ErrBusy, err)
			break
		}
	}
	if err != nil {
		return false, err
	}
	copy(res, got)
	return soldOut, nil
}

// errRolledBack is a batch transaction whose COMMIT was in doubt and did
// not land: nothing changed, so it runs again.
var errRolledBack = errors.New("order batch: the commit did not land")

// inDoubtTimeout bounds resolveInDoubt's look-ups when no request of the
// batch has a deadline; with one, they end inDoubtGrace after it (A1). A
// look-up still unanswered then leaves the commit unresolved: 503, and the
// order may exist (docs/api.md), which the buyer's retry finds.
const inDoubtTimeout = 10 * time.Second

// resolveInDoubt decides a batch transaction whose COMMIT lost its
// connection (lost, the driver's error): did it land? got is what the
// transaction computed; the orders it created are looked up by their
// unique order numbers, with a locking read, which waits while the old
// transaction still holds their rows on the server (a COMMIT in progress
// there, or a connection the server has not yet seen die), so the answer is
// the final one. All there: landed, got stands. None there: it rolled back
// (landed false, nil: run it again). A transaction that created no order
// wrote nothing that matters, so got stands either way. A look-up that
// fails leaves it in doubt: lost is returned (503 unavailable, nothing is
// recorded as done, and the client's retry is answered by the database).
func (s *Service) resolveInDoubt(ctx context.Context, productID int64, got []result, lost error) (landed bool, err error) {
	var nos []string
	for _, r := range got {
		if r.created && r.err == nil {
			nos = append(nos, r.o.OrderNo)
		}
	}
	if len(nos) == 0 {
		s.metrics.inDoubt("landed")
		return true, nil
	}
	ctx, cancel := context.WithTimeout(ctx, inDoubtTimeout)
	defer cancel()
	var found int64
	// The database that lost the COMMIT may be failing over: until a
	// writer answers, the look-up is tried again. Answering before it is
	// resolved would tell a buyer "nothing was done" of an order that may
	// exist.
	for attempt := 1; ; attempt++ {
		err = dbx.TxOnce(ctx, s.db, func(tx *gorm.DB) error {
			return tx.Model(&Order{}).Clauses(clause.Locking{Strength: "UPDATE"}).Where("order_no IN ?", nos).Count(&found).Error
		})
		if err == nil || !dbx.Unavailable(err) || !dbx.Sleep(ctx, min(time.Duration(attempt)*50*time.Millisecond, 500*time.Millisecond)) {
			break
		}
	}
	switch {
	case err != nil:
		s.metrics.inDoubt("unresolved")
		s.log.Warn("order batch commit in doubt and not resolved", "product_id", productID, "orders", len(nos), "err", err)
		return false, fmt.Errorf("%w (the batch's commit is in doubt: %v)", lost, err)
	case found == int64(len(nos)):
		s.metrics.inDoubt("landed")
		s.log.Warn("order batch commit in doubt: it landed", "product_id", productID, "orders", len(nos))
		return true, nil
	case found == 0:
		s.metrics.inDoubt("rolled_back")
		s.log.Warn("order batch commit in doubt: it did not land; running it again", "product_id", productID, "orders", len(nos))
		return false, nil
	}
	s.metrics.inDoubt("unresolved")
	return false, fmt.Errorf("%w (the batch's commit is in doubt: %d of its %d orders are there)", lost, found, len(nos))
}

// commitTx is one batch's transaction. It fills res and reports whether the
// product is known to be sold out after it.
func (s *Service) commitTx(tx *gorm.DB, take *inventory.Take, batch []*request, res []result) (soldOut bool, err error) {
	first := make(map[string]int, len(batch)) // order number -> its first open request in the batch
	nos := make([]string, 0, len(batch))
	for i, r := range batch {
		if !res[i].open() {
			continue // decided by an earlier bucket's transaction
		}
		if _, ok := first[r.o.OrderNo]; !ok {
			first[r.o.OrderNo] = i
			nos = append(nos, r.o.OrderNo)
		}
	}
	var found []Order
	if err := tx.Where("order_no IN ?", nos).Find(&found).Error; err != nil {
		return false, err
	}
	existing := make(map[string]Order, len(found))
	for _, o := range found {
		existing[o.OrderNo] = o
	}
	var wants []inventory.Want
	var asked []int // batch index of each want
	for i, r := range batch {
		if j, ok := first[r.o.OrderNo]; !ok || j != i {
			continue
		}
		if o, ok := existing[r.o.OrderNo]; ok {
			res[i] = repeat(o, r.o.RequestHash)
			continue
		}
		wants = append(wants, inventory.Want{OrderNo: r.o.OrderNo, Quantity: r.o.Quantity})
		asked = append(asked, i)
	}
	wants, asked, err = s.capUnpaid(tx, batch, wants, asked, res)
	if err != nil {
		return false, err
	}
	var taken inventory.Taken
	if len(wants) > 0 {
		var err error
		if taken, err = s.inv.DeductTx(tx, take, wants); err != nil {
			return false, err
		}
		if err := s.insert(tx, batch, asked, taken, res); err != nil {
			return false, err
		}
	}
	for i, r := range batch {
		if j, ok := first[r.o.OrderNo]; ok && j != i {
			res[i] = sameAs(res[j], r.o.RequestHash)
		}
	}
	return taken.SoldOut, nil
}

// capUnpaid refuses (ErrUnpaidLimit) the wants that would take their
// user's units in pending orders above Config.UnpaidLimit, counting earlier
// wants of the same batch; one grouped read for the whole batch. For a
// product held in one row it is exact for this product (the batch holds its
// lock). For a product held in K buckets it is exact per bucket lock only:
// batches holding different buckets at once (at most K) each count the
// pending orders committed before they read, so one user's orders that
// reach them at the same moment may each pass, the cap exceeded by what at
// most K-1 concurrent batches let through (each at most the cap). Across
// products it is soft: simultaneous orders of one user for different
// products may each pass and end a few units above the cap (the per-user
// rate limit slows both down).
func (s *Service) capUnpaid(tx *gorm.DB, batch []*request, wants []inventory.Want, asked []int, res []result) ([]inventory.Want, []int, error) {
	if s.cfg.UnpaidLimit <= 0 || len(wants) == 0 {
		return wants, asked, nil
	}
	users := make([]int64, 0, len(asked))
	for _, i := range asked {
		users = append(users, batch[i].o.UserID)
	}
	var rows []struct {
		UserID int64
		Held   int64
	}
	if err := tx.Model(&Order{}).Select("user_id, COALESCE(SUM(quantity), 0) AS held").
		Where("user_id IN ? AND status = ?", users, StatusPending).Group("user_id").Scan(&rows).Error; err != nil {
		return nil, nil, err
	}
	held := make(map[int64]int64, len(rows))
	for _, r := range rows {
		held[r.UserID] = r.Held
	}
	keptWants, keptAsked := wants[:0:0], asked[:0:0]
	for k, i := range asked {
		u := batch[i].o.UserID
		if held[u]+wants[k].Quantity > s.cfg.UnpaidLimit {
			res[i] = result{err: ErrUnpaidLimit}
			continue
		}
		held[u] += wants[k].Quantity
		keptWants, keptAsked = append(keptWants, wants[k]), append(keptAsked, i)
	}
	return keptWants, keptAsked, nil
}

// insert writes the served wants' orders in one INSERT and fills their
// results; refused wants get their refusal.
func (s *Service) insert(tx *gorm.DB, batch []*request, asked []int, taken inventory.Taken, res []result) error {
	orders := make([]Order, 0, taken.Granted())
	now := dbx.Now()
	for k, i := range asked {
		if err := taken.Refused[k]; err != nil {
			res[i] = result{err: err}
			continue
		}
		o := batch[i].o
		o.ID = 0 // a rerun transaction must not reuse a rolled-back id
		o.AmountCents = taken.PriceCents * o.Quantity
		o.Status = StatusPending
		o.CreatedAt, o.UpdatedAt = now, now
		orders = append(orders, o)
	}
	if len(orders) == 0 {
		return nil
	}
	if err := tx.Create(&orders).Error; err != nil {
		return err
	}
	j := 0
	for k, i := range asked {
		if taken.Refused[k] == nil {
			res[i] = result{o: orders[j], created: true}
			j++
		}
	}
	return nil
}

// repeat answers a request whose order number already has an order: the
// order (a replay), or idem.ErrFingerprintMismatch when the business key was used
// for a different request.
func repeat(o Order, hash string) result {
	if hash != "" && o.RequestHash != "" && o.RequestHash != hash {
		return result{err: idem.ErrFingerprintMismatch}
	}
	return result{o: o}
}

// sameAs answers a request that repeats an earlier one of its own batch.
func sameAs(first result, hash string) result {
	if first.err != nil {
		return result{err: first.err}
	}
	return repeat(first.o, hash)
}

// markAll writes the processed markers of a batch's seckill orders in one
// round trip, after the commit and the release.
func (s *Service) markAll(res []result) {
	if s.cfg.NoIdempotency {
		return
	}
	marks := make(map[string]string, len(res))
	for _, r := range res {
		if r.err == nil && r.o.Kind == KindSeckill {
			marks[markerKey(r.o.UserID, r.o.ProductID)] = r.o.OrderNo
		}
	}
	if err := s.markers.MarkAll(s.bg, marks); err != nil {
		s.log.Warn("processed markers not written (the unique order number still guards)", "err", err)
	}
}
