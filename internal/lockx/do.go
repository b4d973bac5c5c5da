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
// hold was gone at release; or the acquire's own error.
func (c *Client) Do(ctx context.Context, key string, o AcquireOptions, fn func(ctx context.Context, fence int64) error) (err error) {
	l, err := c.Acquire(ctx, key, o)
	if err != nil {
		return err
	}
	defer func() {
		rerr := l.Release(context.WithoutCancel(ctx))
		if rerr != nil && err == nil {
			err = fmt.Errorf("%w: %w", ErrLostBeforeRelease, rerr)
		}
	}()
	err = fn(l.Context(), l.Fence())
	if err != nil && errors.Is(context.Cause(l.Context()), ErrNotHeld) {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	return err
}
