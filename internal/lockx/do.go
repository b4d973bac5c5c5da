package lockx

import (
	"context"
	"errors"
	"fmt"
)

// ErrLostBeforeRelease: Do's work returned nil, but the hold had already
// ended when Do released it. Work that a fencing token guarded stands;
// unfenced work may have overlapped another holder.
var ErrLostBeforeRelease = errors.New("lockx: the hold ended before release")

// Do is the one way to run work under a lock: it acquires key with o, runs
// fn with the lock's context (cancelled when the hold is lost) and fencing
// token, and releases after fn returned, so fn's transaction has committed
// or rolled back before anyone else can hold the lock.
//
// Errors: ErrNotObtained when the lock did not come free within o.Wait; fn's
// error wrapped together with ErrNotHeld when the hold was lost while fn
// ran (its work must be presumed undone: a transaction on the lock's context
// rolled back); fn's error; ErrLostBeforeRelease when fn succeeded but the
// hold was gone at release; or the acquire's own error. A release that
// fails on the transport is tried once more; if that fails too, fn's result
// stands and the key ends with its TTL.
func (c *Client) Do(ctx context.Context, key string, o AcquireOptions, fn func(ctx context.Context, fence int64) error) (err error) {
	l, err := c.Acquire(ctx, key, o)
	if err != nil {
		return err
	}
	defer func() {
		rerr := l.Release(context.WithoutCancel(ctx))
		if rerr != nil && !errors.Is(rerr, ErrNotHeld) {
			// A transport error leaves the Lock releasable: one more try,
			// or the key stays held until its TTL and waiters get busy.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			rerr = l.Release(rctx)
			cancel()
		}
		switch {
		case rerr == nil || err != nil:
		case errors.Is(rerr, ErrNotHeld):
			err = fmt.Errorf("%w: %w", ErrLostBeforeRelease, rerr)
		default: // fn's work stands; the key ends with its TTL
			c.cfg.log.Warn("lockx: release failed twice; the lock ends with its TTL", "key", key, "err", rerr)
		}
	}()
	err = fn(l.Context(), l.Fence())
	if err != nil && errors.Is(context.Cause(l.Context()), ErrNotHeld) {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	return err
}
