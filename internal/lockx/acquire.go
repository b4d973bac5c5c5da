package lockx

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"sync/atomic"
	"time"
)

// testHookObtained, when set, runs after an attempt obtained the lock and
// before Acquire checks ctx (tests use it to cancel ctx in that window).
var testHookObtained atomic.Pointer[func()]

// cleanupWait bounds how long Acquire waits for the release of a hold it
// obtained but cannot hand out (ctx ended, or the outcome is unknown).
const (
	cleanupWait    = 25 * time.Millisecond
	cleanupTimeout = 2 * time.Second
)

func acquire(ctx context.Context, e engine, key string, o AcquireOptions) (*Lock, error) {
	cfg := e.conf()
	k, err := cfg.keys(key)
	if err != nil {
		return nil, err
	}
	ttl := o.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("lockx: acquire %q: ttl %v below 1ms", key, ttl)
	}
	select {
	case <-e.done():
		return nil, ErrClosed
	default:
	}
	if parent := heldFrom(ctx, e, k.lock); parent != nil && !parent.isReleased() {
		return reenter(ctx, e, parent, ttl, o)
	}

	if err := ctx.Err(); err != nil {
		return nil, giveUp(cfg, k, time.Now(), ctx, nil, atOnce)
	}
	start := time.Now()
	token := newToken()
	l, a, err := tryOnce(ctx, ctx, e, k, token, ttl, o, start)
	if l != nil {
		cfg.m.acquired(resultObtained, start)
		return l, nil
	}
	if o.Wait == 0 || ctx.Err() != nil {
		return nil, giveUp(cfg, k, start, ctx, err, atOnce)
	}
	w := &waitLoop{ctx: ctx, e: e, cfg: cfg, k: k, token: token, ttl: ttl, o: o, start: start, lastErr: err}
	return w.run(a, err)
}

// waitLoop is Acquire's wait for a lock that was held at the first attempt:
// it registers for release messages first and then tries again once the
// subscription is live, so that no release between the failed attempt and
// the subscription goes unseen; between releases it retries with backoff.
// Attempts run in their own goroutine so that Acquire returns as soon as ctx
// ends or the wait is over, even with Redis slow to answer; an attempt left
// behind releases whatever it obtained.
type waitLoop struct {
	ctx     context.Context // the caller's: the hold, once obtained, lives under it
	waitCtx context.Context // ctx bounded by o.Wait: bounds the attempts
	e       engine
	cfg     *config
	k       keySet
	token   string
	ttl     time.Duration
	o       AcquireOptions
	start   time.Time
	lastErr error // latest transport error not caused by the wait deadline

	results  chan attemptResult
	inFlight bool // an attempt is running
	again    bool // a wake-up came during it: go again as soon as it is back
	retries  int
}

type attemptResult struct {
	l   *Lock
	a   attempt
	err error
}

// run waits, first for the backoff after the first attempt (a, err).
func (w *waitLoop) run(a attempt, err error) (*Lock, error) {
	waitCtx, cancel := w.ctx, context.CancelFunc(func() {})
	if w.o.Wait > 0 {
		waitCtx, cancel = context.WithTimeout(w.ctx, w.o.Wait)
	}
	defer cancel()
	w.waitCtx = waitCtx
	wk := &waiter{notify: make(chan struct{}, 1)}
	ready, unwatch := w.e.watch(w.k, wk)
	obtained := false
	defer func() { unwatch(obtained) }()

	bo := backoff{min: w.cfg.minBackoff, max: w.cfg.maxBackoff}
	retry := time.NewTimer(bo.after(a, err))
	defer retry.Stop()
	defer func() { w.cfg.m.waited(w.ctx, w.start, w.retries) }()
	w.results = make(chan attemptResult, 1)
	for {
		select {
		case <-waitCtx.Done():
			w.abandon()
			return nil, giveUp(w.cfg, w.k, w.start, w.ctx, w.lastErr, afterWait)
		case <-w.e.done():
			w.abandon()
			w.cfg.m.acquired(resultError, w.start)
			return nil, ErrClosed
		case <-ready:
			ready = nil
		case <-wk.notify:
		case <-retry.C:
		case r := <-w.results:
			w.inFlight = false
			if r.l != nil {
				obtained = true
				w.cfg.m.acquired(resultObtained, w.start)
				return r.l, nil
			}
			if r.err == nil || waitCtx.Err() == nil {
				w.lastErr = r.err
			}
			if !w.again {
				retry.Reset(bo.after(r.a, r.err))
				continue
			}
		}
		if w.inFlight {
			// A wake-up during an attempt: the attempt may predate the
			// release, so go again as soon as it is back.
			w.again = true
			continue
		}
		w.attempt()
	}
}

// attempt starts one attempt. It is bounded by the wait; the hold, once
// obtained, lives under ctx (waitCtx is cancelled when Acquire returns).
func (w *waitLoop) attempt() {
	w.again = false
	w.retries++
	w.inFlight = true
	go func() {
		l, a, err := tryOnce(w.waitCtx, w.ctx, w.e, w.k, w.token, w.ttl, w.o, time.Now())
		w.results <- attemptResult{l, a, err}
	}()
}

// abandon leaves a running attempt behind: whatever it obtains is released.
func (w *waitLoop) abandon() {
	if !w.inFlight {
		return
	}
	go func() {
		if r := <-w.results; r.l != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), cleanupTimeout)
			defer cancel()
			_ = r.l.Release(rctx)
		}
	}()
}

// tryOnce runs one attempt. A hold obtained while the caller's ctx ended, or
// an attempt whose outcome is unknown (transport error), is released again so
// that no key outlives the call. The Lock's context derives from holdCtx;
// its validity counts from start, taken before the attempt was sent.
func tryOnce(ctx, holdCtx context.Context, e engine, k keySet, token string, ttl time.Duration, o AcquireOptions, start time.Time) (*Lock, attempt, error) {
	a, err := e.tryAcquire(ctx, k, token, ttl, newHold)
	if err != nil {
		cleanup(ctx, e, k, token)
		return nil, a, err
	}
	if a.count <= 0 {
		return nil, a, nil
	}
	if h := testHookObtained.Load(); h != nil {
		(*h)()
	}
	if ctx.Err() != nil {
		cleanup(ctx, e, k, token)
		return nil, a, nil
	}
	cfg := e.conf()
	ls := newLease(cfg, k.user, ttl, start, start.Add(ttl-cfg.drift(ttl)))
	return newLock(holdCtx, e, k, token, a.fence, ttl, 1, ls, o), a, nil
}

func cleanup(ctx context.Context, e engine, k keySet, token string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if _, err := e.release(cctx, k, token); err != nil {
			e.conf().log.Debug("lockx: cleanup release failed", "key", k.user, "err", err)
		}
	}()
	t := time.NewTimer(cleanupWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// gaveUp says when an acquisition gave up: at once (no wait, or its ctx
// had ended), or after waiting.
type gaveUp bool

const (
	atOnce    gaveUp = false
	afterWait gaveUp = true
)

// giveUp builds the error of an acquisition that did not obtain the lock:
// a transport error stays a transport error; otherwise ErrNotObtained, joined
// with the ctx cause when the caller's ctx ended.
func giveUp(cfg *config, k keySet, start time.Time, ctx context.Context, lastErr error, waited gaveUp) error {
	if ctx.Err() != nil {
		cfg.m.acquired(resultNotObtained, start)
		return fmt.Errorf("%w: %q: %w", ErrNotObtained, k.user, context.Cause(ctx))
	}
	if lastErr != nil {
		cfg.m.acquired(resultError, start)
		return fmt.Errorf("lockx: acquire %q: %w", k.user, lastErr)
	}
	cfg.m.acquired(resultNotObtained, start)
	if waited {
		return fmt.Errorf("%w: %q still held after %v", ErrNotObtained, k.user, time.Since(start).Round(time.Millisecond))
	}
	return fmt.Errorf("%w: %q is held", ErrNotObtained, k.user)
}

func reenter(ctx context.Context, e engine, parent *Lock, ttl time.Duration, o AcquireOptions) (*Lock, error) {
	k := parent.keys
	if parent.lease.isLost() {
		return nil, fmt.Errorf("%w: re-entering %q: the outer hold was lost", ErrNotHeld, k.user)
	}
	start := time.Now()
	a, err := e.tryAcquire(ctx, k, parent.token, ttl, reentry)
	if err != nil {
		if a.count > 0 {
			// The script ran (WaitReplicas came up short): take back this
			// entry's count, or one Release would leave the lock held.
			cleanup(ctx, e, k, parent.token)
		}
		return nil, fmt.Errorf("lockx: re-enter %q: %w", k.user, err)
	}
	if a.count < 0 {
		err := fmt.Errorf("%w: re-entering %q: expired or taken over", ErrNotHeld, k.user)
		parent.lease.markLost(err)
		return nil, err
	}
	if a.count == 0 { // not expected from the scripts; be strict
		return nil, fmt.Errorf("%w: re-entering %q", ErrNotObtained, k.user)
	}
	cfg := e.conf()
	parent.lease.setUntil(start.Add(ttl-cfg.drift(ttl)), onlyForward)
	l := newLock(ctx, e, k, parent.token, parent.fence, ttl, parent.depth+1, parent.lease, o)
	if l.lease.isLost() {
		return nil, fmt.Errorf("%w: re-entering %q: the outer hold was lost", ErrNotHeld, k.user)
	}
	return l, nil
}

func newLock(ctx context.Context, e engine, k keySet, token string, fence int64, ttl time.Duration, depth int, ls *lease, o AcquireOptions) *Lock {
	l := &Lock{
		eng: e, keys: k, token: token, fence: fence, ttl: ttl, depth: depth,
		lease: ls, parent: ctx, onRenew: o.OnRenew,
	}
	if o.Watchdog {
		l.Context() // the watchdog runs until it ends
		l.wdDone = make(chan struct{})
		go l.watchdog()
	}
	return l
}

// backoff is the fallback re-try schedule while waiting: jittered exponential,
// and never longer than the holder's remaining TTL (an expiring lock sends no
// message).
type backoff struct {
	min, max time.Duration
	n        int
}

func (b *backoff) after(a attempt, err error) time.Duration {
	d := b.min << min(b.n, 20)
	if d <= 0 || d > b.max {
		d = b.max
	}
	b.n++
	d = d/2 + mrand.N(d/2+1) // jitter in [d/2, d]
	if err == nil && a.pttl > 0 && a.pttl+time.Millisecond < d {
		d = a.pttl + time.Millisecond
	}
	return d
}
