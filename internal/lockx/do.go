package lockx

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrLostBeforeRelease: Do's work returned nil, but the hold had already
// ended when Do released it. Work that a fencing token guarded stands;
// unfenced work may have overlapped another holder.
var ErrLostBeforeRelease = errors.New("lockx: the hold ended before release")

// Fence is the fencing token of one hold: what a store needs to refuse a
// write from a hold that is no longer the current one.
//
// Number orders the holds of one key: each first entry's is greater than
// every earlier one's, as long as Redis keeps the counter. A failover or a
// restart that loses the counter's last INCR hands the same Number to a
// second hold; Holder, the hold's owner token, tells the two apart. So a
// store keeps both of the last write it accepted, and takes a write whose
// Number is greater, or equal with the same Holder (a later write of the
// same hold); it refuses every other:
//
//	UPDATE stock SET qty = qty - 1, fence = ?, fence_holder = ?
//	WHERE id = ? AND (fence < ? OR (fence = ? AND fence_holder = ?))
//
// A store reader who can also write to Redis could release the lock with
// Holder, which anyone who can write to Redis can do anyway.
type Fence struct {
	Number int64
	Holder string
}

// Do is the one way to run work under a lock: it acquires key with o, runs
// fn with the lock's context (cancelled when the hold is lost) and Fence,
// and releases after fn returned, so fn's transaction has committed or
// rolled back before anyone else can hold the lock.
//
// Errors: ErrNotObtained when the lock did not come free within o.Wait; fn's
// error wrapped together with ErrNotHeld when the hold was lost while fn
// ran (its work must be presumed undone: a transaction on the lock's context
// rolled back); fn's error; ErrLostBeforeRelease when fn succeeded but the
// hold was gone at release; or the acquire's own error. A release that
// fails on the transport is tried once more; if that fails too, fn's result
// stands and the key ends with its TTL. Do waits for the release until ctx's
// deadline at most; past it the release goes on without the caller (see
// releaseBounded), and fn's result stands.
func (c *Client) Do(ctx context.Context, key string, o AcquireOptions, fn func(ctx context.Context, fence Fence) error) (err error) {
	l, err := c.Acquire(ctx, key, o)
	if err != nil {
		return err
	}
	// Deferred, so a panicking fn still releases (End with nil: the
	// panic goes on).
	defer func() { err = c.End(ctx, l, err) }()
	return fn(l.Context(), l.Fence())
}

// End is the second half of Do for a caller that holds l without a
// closure (Acquire, the work on l.Context() with l.Fence(), then End):
// it releases l after the work under it returned err, and reports the
// outcome as Do does. ctx is the one given to Acquire; its deadline bounds
// the wait for the release. Call it exactly once per Acquire.
func (c *Client) End(ctx context.Context, l *Lock, err error) error {
	err = c.doneWith(l, err)
	done, rerr := releaseBounded(ctx, l)
	switch {
	case !done:
		c.cfg.log.Warn("lockx: release still under way at the deadline; it goes on without the caller", "key", l.Key())
	case rerr == nil || err != nil:
	case errors.Is(rerr, ErrNotHeld):
		err = fmt.Errorf("%w: %w", ErrLostBeforeRelease, rerr)
	default: // the work stands; the key ends with its TTL
		c.cfg.log.Warn("lockx: release failed twice; the lock ends with its TTL", "key", l.Key(), "err", rerr)
	}
	return err
}

// releaseBounded releases l, trying once more after a transport error. It
// waits for it until ctx's deadline at most (done false): the caller owes its
// own caller an answer by then, and a Redis gone silent (a partition)
// would keep it for the client's socket timeouts twice over. The release
// goes on without it, still after fn's work, and the key ends with the
// release or its TTL, as when a release fails.
func releaseBounded(ctx context.Context, l *Lock) (done bool, err error) {
	ch := make(chan error, 1)
	go func() {
		rerr := l.Release(context.WithoutCancel(ctx))
		if rerr != nil && !errors.Is(rerr, ErrNotHeld) {
			// A transport error leaves the Lock releasable: one more try,
			// or the key stays held until its TTL and waiters get busy.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			rerr = l.Release(rctx)
			cancel()
		}
		ch <- rerr
	}()
	dl, ok := ctx.Deadline()
	if !ok {
		return true, <-ch
	}
	t := time.NewTimer(max(0, time.Until(dl)))
	defer t.Stop()
	select {
	case err = <-ch:
		return true, err
	case <-t.C:
		return false, nil
	}
}

// doneWith is fn's error as Do reports it.
func (c *Client) doneWith(l *Lock, err error) error {
	if err != nil && errors.Is(context.Cause(l.Context()), ErrNotHeld) {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	return err
}
