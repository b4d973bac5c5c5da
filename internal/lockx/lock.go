package lockx

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Lock is one hold of a lock key. Re-entering the key yields another Lock
// that shares the first one's token, fence and lease. Methods are safe for
// concurrent use.
type Lock struct {
	eng     engine
	keys    keySet
	token   string
	fence   int64
	ttl     time.Duration
	depth   int
	lease   *lease
	parent  context.Context // the ctx given to Acquire
	onRenew func(time.Time)
	wdDone  chan struct{} // closed when the watchdog exits; nil without one

	// Context is built on first use (most holds never ask for it).
	ctxMu    sync.Mutex
	ctx      context.Context
	cancel   context.CancelCauseFunc
	endCause error // why the hold ended, if it did before ctx was built

	relMu    sync.Mutex
	released bool
}

// Key is the key given to Acquire (without prefix or hash tag).
func (l *Lock) Key() string { return l.keys.user }

// RedisKey is the Redis key holding the lock, e.g. "lock:{product:7}".
func (l *Lock) RedisKey() string { return l.keys.lock }

// Token identifies the owner (128 random bits from crypto/rand).
func (l *Lock) Token() string { return l.token }

// Fence is the hold's fencing token: its Number, strictly greater than the
// Number of every earlier hold of this key while Redis keeps the counter
// (re-entries carry their first entry's), and its Holder, the owner token.
// Pass it to the resource you write to (Do hands it to its work) and have
// it refuse smaller numbers, and equal ones from another holder: that, not
// the lock, is what makes a paused holder harmless.
func (l *Lock) Fence() Fence { return Fence{Number: l.fence, Holder: l.token} }

// Depth is 1 for a first entry and n for the n-th nested re-entry.
func (l *Lock) Depth() int { return l.depth }

// TTL is the TTL the Lock was acquired with (and the watchdog renews to).
func (l *Lock) TTL() time.Duration { return l.ttl }

// ValidUntil is the local time until which the hold is guaranteed, assuming
// bounded clock drift: acquire or last renewal start + TTL - drift.
func (l *Lock) ValidUntil() time.Time { return l.lease.until() }

// Lost is closed once the hold is known or presumed gone without Release: a
// renewal or Refresh found another owner or no key, Release found it gone, or
// ValidUntil passed without renewal.
func (l *Lock) Lost() <-chan struct{} { return l.lease.lostChan() }

// Context is cancelled when the lock is lost (cause wraps ErrNotHeld), when
// this Lock is released (cause ErrReleased) or when the ctx given to Acquire
// ends. It carries the Lock, so an Acquire of the same key under it re-enters.
// Do the protected work under it, and check it right before each write.
func (l *Lock) Context() context.Context {
	l.ctxMu.Lock()
	if l.ctx != nil {
		defer l.ctxMu.Unlock()
		return l.ctx
	}
	lctx, cancel := context.WithCancelCause(l.parent)
	l.ctx, l.cancel = WithLock(lctx, l), cancel
	ended := l.endCause
	l.ctxMu.Unlock()
	if ended != nil {
		cancel(ended)
	} else if cause := l.lease.attach(l); cause != nil {
		cancel(cause)
	}
	return l.ctx
}

// end cancels Context with cause, or remembers cause for when it is built.
func (l *Lock) end(cause error) {
	l.ctxMu.Lock()
	if l.endCause == nil {
		l.endCause = cause
	}
	cancel := l.cancel
	l.ctxMu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

// WithLock returns a ctx under which Acquire of l's key on the same Client or
// Redlock re-enters l instead of waiting for itself.
func WithLock(ctx context.Context, l *Lock) context.Context {
	return context.WithValue(ctx, heldKey{eng: l.eng, lock: l.keys.lock}, l)
}

type heldKey struct {
	eng  engine
	lock string
}

func heldFrom(ctx context.Context, e engine, lock string) *Lock {
	l, _ := ctx.Value(heldKey{eng: e, lock: lock}).(*Lock)
	return l
}

// Refresh sets the TTL of the hold to ttl (the acquire TTL when ttl <= 0) if
// this owner still holds it. ErrNotHeld otherwise, and the Lock is marked lost.
// With a watchdog running, its next renewal restores the acquire TTL.
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if ttl <= 0 {
		ttl = l.ttl
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("lockx: refresh %q: ttl %v below 1ms", l.keys.user, ttl)
	}
	l.relMu.Lock()
	released := l.released
	l.relMu.Unlock()
	if released {
		return fmt.Errorf("%w: %q already released", ErrNotHeld, l.keys.user)
	}
	if l.lease.isLost() {
		return fmt.Errorf("%w: %q was lost", ErrNotHeld, l.keys.user)
	}
	start := time.Now()
	held, err := l.eng.refresh(ctx, l.keys, l.token, ttl)
	if err != nil {
		return fmt.Errorf("lockx: refresh %q: %w", l.keys.user, err)
	}
	if !held {
		err := fmt.Errorf("%w: %q expired or taken over before refresh", ErrNotHeld, l.keys.user)
		l.lease.markLost(err)
		return err
	}
	l.lease.setUntil(start.Add(ttl-l.eng.conf().drift(ttl)), anyway)
	return nil
}

// Release ends this hold: it stops the watchdog, cancels Context and deletes
// the key if this was the last nested hold, waking waiters. If the hold had
// already ended (expired, taken over, declared lost) it deletes nothing that
// belongs to anyone else and returns ErrNotHeld. A transport error leaves the
// Lock releasable again. Release holds in the reverse order of acquisition.
func (l *Lock) Release(ctx context.Context) error {
	l.relMu.Lock()
	defer l.relMu.Unlock()
	if l.released {
		return fmt.Errorf("%w: %q already released", ErrNotHeld, l.keys.user)
	}
	l.end(ErrReleased)
	if l.wdDone != nil {
		<-l.wdDone // no renewal may follow the release
	}
	wasLost := l.lease.isLost()
	n, err := l.eng.release(ctx, l.keys, l.token)
	if err != nil {
		return fmt.Errorf("lockx: release %q: %w", l.keys.user, err)
	}
	l.released = true
	switch {
	case n < 0:
		err := fmt.Errorf("%w: %q expired or taken over before release", ErrNotHeld, l.keys.user)
		l.lease.markLost(err)
		return err
	case wasLost:
		if n == 0 {
			l.lease.end()
		}
		return fmt.Errorf("%w: %q was lost before release (validity passed)", ErrNotHeld, l.keys.user)
	case n == 0:
		l.lease.end()
	}
	return nil
}

// Wanted reports whether an attempt to take l's key found it held during
// this hold: someone waits, or did. A holder that could keep the lock for
// more work (a batch leader) hands it over instead. ErrNotHeld when the
// hold is gone, and the Lock is marked lost.
func (l *Lock) Wanted(ctx context.Context) (bool, error) {
	n, err := l.eng.wanted(ctx, l.keys, l.token)
	switch {
	case err != nil:
		return false, fmt.Errorf("lockx: wanted %q: %w", l.keys.user, err)
	case n < 0:
		err := fmt.Errorf("%w: %q expired or taken over", ErrNotHeld, l.keys.user)
		l.lease.markLost(err)
		return false, err
	}
	return n == 1, nil
}

func (l *Lock) isReleased() bool {
	l.relMu.Lock()
	defer l.relMu.Unlock()
	return l.released
}

// watchdog renews the hold every TTL/3 until l.ctx ends (release, loss, or the
// holder's ctx). A renewal that finds the hold gone marks the lease lost at
// once; transport errors are retried faster and the lease's own timer marks it
// lost when its validity runs out.
func (l *Lock) watchdog() {
	defer close(l.wdDone)
	ctx := l.Context()
	cfg := l.eng.conf()
	interval := l.ttl / 3
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		held, err := l.eng.refresh(ctx, l.keys, l.token, l.ttl)
		if ctx.Err() != nil {
			return
		}
		next := interval
		switch {
		case err != nil:
			cfg.m.renewalFailed()
			cfg.log.Warn("lockx: renewal failed", "key", l.keys.user, "err", err)
			next = min(interval, max(time.Until(l.lease.until())/3, 5*time.Millisecond))
		case !held:
			cfg.m.renewalFailed()
			l.lease.markLost(fmt.Errorf("%w: %q expired or taken over (watchdog)", ErrNotHeld, l.keys.user))
			return
		default:
			until := start.Add(l.ttl - cfg.drift(l.ttl))
			l.lease.setUntil(until, anyway)
			cfg.m.renewed()
			if l.onRenew != nil {
				l.onRenew(until)
			}
		}
		t.Reset(next)
	}
}

// lease is the state shared by a first entry and its re-entries: validity,
// the Lost channel and the contexts to cancel on loss. The expiry timer and
// the Lost channel exist only once someone watches (Lost, Context, watchdog);
// otherwise expiry is noticed on the next call that asks (isLost).
type lease struct {
	cfg        *config
	key        string
	ttl        time.Duration
	acquiredAt time.Time

	mu      sync.Mutex
	valid   time.Time
	timer   *time.Timer
	lost    chan struct{}
	cause   error // why it was lost
	gone    bool  // lost
	ended   bool  // released for good
	holders []*Lock
}

func newLease(cfg *config, key string, ttl time.Duration, acquiredAt, validUntil time.Time) *lease {
	cfg.m.heldInc()
	return &lease{cfg: cfg, key: key, ttl: ttl, acquiredAt: acquiredAt, valid: validUntil}
}

func (s *lease) until() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.valid
}

// isLost reports whether the hold is lost, declaring it so when its validity
// has passed.
func (s *lease) isLost() bool {
	s.mu.Lock()
	gone, expired := s.gone, !s.gone && !s.ended && !time.Now().Before(s.valid)
	s.mu.Unlock()
	if expired {
		s.markLost(s.expiredErr())
		return true
	}
	return gone
}

func (s *lease) expiredErr() error {
	return fmt.Errorf("%w: %q validity passed without renewal", ErrNotHeld, s.key)
}

func (s *lease) lostChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost == nil {
		s.lost = make(chan struct{})
		if s.gone {
			close(s.lost)
		}
	}
	s.armLocked()
	return s.lost
}

// armLocked starts the expiry timer if nobody has yet. s.mu held.
func (s *lease) armLocked() {
	if s.timer == nil && !s.gone && !s.ended {
		s.timer = time.AfterFunc(time.Until(s.valid), s.expire)
	}
}

// validityMove says whether setUntil may move the validity back.
type validityMove bool

const (
	anyway      validityMove = false // set it to t
	onlyForward validityMove = true  // a re-entry's renewal never shortens the outer hold's
)

// setUntil moves the validity to t (only forward when onlyLater is onlyForward).
func (s *lease) setUntil(t time.Time, onlyLater validityMove) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone || s.ended || (onlyLater == onlyForward && !t.After(s.valid)) {
		return
	}
	s.valid = t
	if s.timer != nil {
		s.timer.Reset(time.Until(t))
	}
}

func (s *lease) expire() {
	s.mu.Lock()
	early := time.Now().Before(s.valid)
	s.mu.Unlock()
	if early { // Reset raced with the firing timer
		return
	}
	s.markLost(s.expiredErr())
}

// attach registers l for cancellation on loss; it returns the loss cause if
// the lease is already lost.
func (s *lease) attach(l *Lock) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return s.cause
	}
	s.holders = append(s.holders, l)
	s.armLocked()
	return nil
}

func (s *lease) markLost(cause error) {
	s.mu.Lock()
	if s.gone || s.ended {
		s.mu.Unlock()
		return
	}
	s.gone, s.cause = true, cause
	if s.timer != nil {
		s.timer.Stop()
	}
	holders := s.holders
	s.holders = nil
	lost := s.lost
	s.mu.Unlock()
	// Contexts first, so whoever sees Lost closed also sees them cancelled.
	for _, l := range holders {
		l.end(cause)
	}
	if lost != nil {
		close(lost)
	}
	s.cfg.m.lostLock()
	s.cfg.m.holdEnded(s.acquiredAt, s.ttl)
	s.cfg.log.Warn("lockx: lock lost", "key", s.key, "cause", cause)
}

func (s *lease) end() {
	s.mu.Lock()
	if s.gone || s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.holders = nil
	s.mu.Unlock()
	s.cfg.m.holdEnded(s.acquiredAt, s.ttl)
}
