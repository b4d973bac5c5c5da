package order

import (
	"slices"
	"sync"
	"time"

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

// open reports whether r is no answer yet: nothing decided it (a
// deduction's next hold may).
func (r result) open() bool {
	return r.err == nil && r.o.OrderNo == ""
}

func anyOpen(res []result) bool {
	return slices.ContainsFunc(res, result.open)
}

// coalescer keeps, per product, the requests waiting for the product lock,
// and runs one leader goroutine per product with requests waiting.
type coalescer struct {
	max    int
	window time.Duration
	lead   func(productID int64) leader // a leader's own state, for its batches

	mu      sync.Mutex
	queues  map[int64][]*request // a key is present while its leader runs
	closing bool                 // wait was called: no new leaders
	wg      sync.WaitGroup
}

// A leader runs one product's batches one after another; idle is called
// when none is queued, before the leader ends or waits for more (a kept
// product hold is released there).
type leader interface {
	run(batch []*request)
	idle()
}

func newCoalescer(max int, window time.Duration, lead func(int64) leader) *coalescer {
	return &coalescer{max: max, window: window, lead: lead, queues: map[int64][]*request{}}
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
		go c.drain(id)
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

// drain leads id's queue batch by batch and ends when it is empty, after
// the leader went idle.
func (c *coalescer) drain(id int64) {
	defer c.wg.Done()
	l := c.lead(id)
	for {
		if c.window > 0 {
			time.Sleep(c.window)
		}
		c.mu.Lock()
		q := c.queues[id]
		if len(q) == 0 {
			c.mu.Unlock()
			l.idle() // (a Redis call: not under mu)
			c.mu.Lock()
			if len(c.queues[id]) > 0 {
				c.mu.Unlock()
				continue // more came meanwhile: lead on
			}
			delete(c.queues, id)
			c.mu.Unlock()
			return
		}
		n := min(len(q), c.max)
		batch := q[:n:n]
		c.queues[id] = q[n:]
		c.mu.Unlock()
		l.run(batch)
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
