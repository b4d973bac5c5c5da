package lockx

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var bg = context.Background()

func TestAcquireRelease(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	prefix := testPrefix(t, rdb)
	c := newTestClient(t, rdb, Options{Prefix: prefix})

	l, err := c.Acquire(bg, "product:7", AcquireOptions{TTL: 5 * time.Second})
	mustNoErr(t, err, "acquire")
	lockKey, fenceKey := prefix+"{product:7}", prefix+"{product:7}:fence"
	if l.Key() != "product:7" || l.RedisKey() != lockKey {
		t.Fatalf("Key()=%q RedisKey()=%q, want product:7 and %q", l.Key(), l.RedisKey(), lockKey)
	}
	got, err := rdb.HGetAll(bg, lockKey).Result()
	mustNoErr(t, err, "hgetall")
	if got[l.Token()] != "1" || got["#fence"] == "" || len(got) != 2 {
		t.Fatalf("lock hash = %v, want {%s: 1, #fence: N}", got, l.Token())
	}
	if f, _ := rdb.Get(bg, fenceKey).Int64(); f != l.Fence().Number || f < 1 {
		t.Fatalf("fence key %d, Fence() %d", f, l.Fence().Number)
	}
	if pttl := rdb.PTTL(bg, lockKey).Val(); pttl <= 4*time.Second || pttl > 5*time.Second {
		t.Fatalf("PTTL = %v, want ~5s", pttl)
	}
	if until := time.Until(l.ValidUntil()); until <= 4*time.Second || until > 5*time.Second {
		t.Fatalf("ValidUntil in %v, want just under 5s", until)
	}
	mustNoErr(t, l.Release(bg), "release")
	if n := rdb.Exists(bg, lockKey).Val(); n != 0 {
		t.Fatal("lock key still exists after release")
	}
	if n := rdb.Exists(bg, fenceKey).Val(); n != 1 {
		t.Fatal("fence counter must survive the release")
	}
	if err := l.Release(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld", err)
	}
	if !errors.Is(context.Cause(l.Context()), ErrReleased) {
		t.Fatalf("Context cause after release = %v, want ErrReleased", context.Cause(l.Context()))
	}
	select {
	case <-l.Lost():
		t.Fatal("Lost closed after a normal release")
	default:
	}
}

func TestTokensAreRandom(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{})
	seen := map[string]bool{}
	for i := range 20 {
		l, err := c.Acquire(bg, "k", AcquireOptions{TTL: time.Second})
		mustNoErr(t, err, "acquire %d", i)
		if len(l.Token()) < 26 || seen[l.Token()] {
			t.Fatalf("token %q is short or repeated", l.Token())
		}
		seen[l.Token()] = true
		mustNoErr(t, l.Release(bg), "release")
	}
}

func TestMutualExclusionTryOnce(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{})
	other := New(rdb, Options{Prefix: c.cfg.prefix}) // a second process, in effect
	t.Cleanup(func() { _ = other.Close() })

	l, err := c.Acquire(bg, "k", AcquireOptions{TTL: 5 * time.Second})
	mustNoErr(t, err, "acquire")
	start := time.Now()
	_, err = other.Acquire(bg, "k", AcquireOptions{TTL: 5 * time.Second})
	if !errors.Is(err, ErrNotObtained) || errors.Is(err, ErrNotHeld) {
		t.Fatalf("second owner: %v, want ErrNotObtained only", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("try-once took %v", d)
	}
	// A fresh ctx is a different owner even on the same Client.
	if _, err := c.Acquire(bg, "k", AcquireOptions{}); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("same client, no re-entry ctx: %v, want ErrNotObtained", err)
	}
	mustNoErr(t, l.Release(bg), "release")
	l2, err := other.Acquire(bg, "k", AcquireOptions{TTL: 5 * time.Second})
	mustNoErr(t, err, "acquire after release")
	if l2.Fence().Number <= l.Fence().Number {
		t.Fatalf("fence %d after %d", l2.Fence().Number, l.Fence().Number)
	}
	mustNoErr(t, l2.Release(bg), "release")
}

// TestExpiredOwnerIsToldEvenIfKeyStillThere: a raw owner-check on the
// scripts, with a forged Lock carrying someone else's token.
func TestScriptsCompareToken(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{})
	l, err := c.Acquire(bg, "k", AcquireOptions{TTL: 5 * time.Second})
	mustNoErr(t, err, "acquire")
	ok, err := c.refresh(bg, l.keys, "not-the-owner", time.Minute)
	if err != nil || ok {
		t.Fatalf("refresh by non-owner: ok=%v err=%v", ok, err)
	}
	n, err := c.release(bg, l.keys, "not-the-owner")
	if err != nil || n != -1 {
		t.Fatalf("release by non-owner: %d %v, want -1", n, err)
	}
	if rdb.Exists(bg, l.RedisKey()).Val() != 1 || rdb.PTTL(bg, l.RedisKey()).Val() > 5*time.Second {
		t.Fatal("non-owner changed the lock")
	}
	mustNoErr(t, l.Refresh(bg, 10*time.Second), "owner refresh")
	if pttl := rdb.PTTL(bg, l.RedisKey()).Val(); pttl <= 9*time.Second {
		t.Fatalf("PTTL after owner refresh = %v", pttl)
	}
	mustNoErr(t, l.Release(bg), "release")
}

func TestWaitIsWokenByRelease(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	// Fallback polling so slow that only the pub/sub wake-up can explain a
	// quick handoff.
	c := newTestClient(t, rdb, Options{MinBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second})
	holder, err := c.Acquire(bg, "k", AcquireOptions{TTL: 30 * time.Second})
	mustNoErr(t, err, "acquire")
	type res struct {
		l   *Lock
		err error
		at  time.Time
	}
	got := make(chan res, 1)
	go func() {
		l, err := c.Acquire(bg, "k", AcquireOptions{TTL: 600 * time.Millisecond, Wait: 5 * time.Second, Watchdog: true})
		got <- res{l, err, time.Now()}
	}()
	eventually(t, 2*time.Second, "waiter subscribed", func() bool {
		c.hub.mu.Lock()
		defer c.hub.mu.Unlock()
		s := c.hub.subs[holder.keys.channel]
		return s != nil && s.isReady && len(s.waiters) == 1
	})
	released := time.Now()
	mustNoErr(t, holder.Release(bg), "release")
	r := <-got
	mustNoErr(t, r.err, "waiter")
	if d := r.at.Sub(released); d > time.Second {
		t.Fatalf("handoff took %v: the release message did not wake the waiter", d)
	}
	if c.hub.wakeups.Load() == 0 {
		t.Fatal("no pub/sub wake-up was delivered")
	}
	// A hold obtained after waiting lives under the caller's ctx, not under
	// the (finished) wait: its Context is live and its watchdog keeps it.
	if err := r.l.Context().Err(); err != nil {
		t.Fatalf("Context of a waited-for Lock is done: %v", context.Cause(r.l.Context()))
	}
	time.Sleep(time.Second)
	if rdb.HGet(bg, r.l.RedisKey(), r.l.Token()).Val() != "1" || r.l.Context().Err() != nil {
		t.Fatal("watchdog of a waited-for Lock did not keep it")
	}
	mustNoErr(t, r.l.Release(bg), "release")
}

func TestWaitFallsBackToTTLWhenHolderVanishes(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{MinBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second})
	// The holder "crashes": it never releases, so no message is published.
	_, err := c.Acquire(bg, "k", AcquireOptions{TTL: 300 * time.Millisecond})
	mustNoErr(t, err, "acquire")
	start := time.Now()
	l, err := c.Acquire(bg, "k", AcquireOptions{TTL: time.Second, Wait: 8 * time.Second})
	mustNoErr(t, err, "waiter")
	// About 300 ms when the retry is capped by the TTL; 10 s when it is not.
	// The bound leaves room for a loaded machine.
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("waited %v for a lock with 300ms TTL: the retry is not capped by the holder's TTL", d)
	}
	mustNoErr(t, l.Release(bg), "release")
}

func TestWaitTimesOut(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	m := NewMetrics("t")
	c := newTestClient(t, rdb, Options{Metrics: m})
	holder, err := c.Acquire(bg, "k", AcquireOptions{TTL: 10 * time.Second})
	mustNoErr(t, err, "acquire")
	start := time.Now()
	_, err = c.Acquire(bg, "k", AcquireOptions{TTL: time.Second, Wait: 200 * time.Millisecond})
	d := time.Since(start)
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("err = %v, want ErrNotObtained", err)
	}
	if d < 200*time.Millisecond || d > 3*time.Second { // the upper bound is slack for a loaded machine
		t.Fatalf("gave up after %v, want ~200ms", d)
	}
	if v := metricValue(t, m, "t_lock_acquire_retries_total"); v < 1 {
		t.Fatalf("retries = %v, want >= 1", v)
	}
	mustNoErr(t, holder.Release(bg), "release")
}

func TestCancelWhileWaitingReturnsPromptly(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{})
	holder, err := c.Acquire(bg, "k", AcquireOptions{TTL: 10 * time.Second})
	mustNoErr(t, err, "acquire")
	for i := range 5 {
		ctx, cancel := context.WithCancel(bg)
		done := make(chan error, 1)
		var cancelled time.Time
		go func() {
			_, err := c.Acquire(ctx, "k", AcquireOptions{TTL: 10 * time.Second, Wait: 10 * time.Second})
			done <- err
		}()
		time.Sleep(time.Duration(20+i*15) * time.Millisecond)
		cancelled = time.Now()
		cancel()
		err := <-done
		// "At once": the wait was 10 s; 250 ms leaves room for a loaded
		// machine's scheduler.
		if d := time.Since(cancelled); d > 250*time.Millisecond {
			t.Fatalf("run %d: Acquire returned %v after cancel, want < 250ms", i, d)
		}
		if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("run %d: err = %v, want ErrNotObtained and context.Canceled", i, err)
		}
	}
	if fields := rdb.HKeys(bg, holder.RedisKey()).Val(); len(fields) != 3 || !slices.Contains(fields, holder.Token()) {
		t.Fatalf("lock hash fields = %v, want only the holder, #fence and #wanted (the waits asked for it)", fields)
	}
	mustNoErr(t, holder.Release(bg), "release")
}

// TestCancelWhileRedisHangs: the waiter's attempt is stuck on a paused
// Redis when ctx is cancelled; Acquire still returns at once.
func TestCancelWhileRedisHangs(t *testing.T) {
	t.Parallel()
	srv := startRedisServer(t)
	rdb := srv.client(t)
	c := newTestClient(t, rdb, Options{MinBackoff: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	holder, err := c.Acquire(bg, "k", AcquireOptions{TTL: 30 * time.Second})
	mustNoErr(t, err, "acquire")
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, "k", AcquireOptions{TTL: 30 * time.Second, Wait: 20 * time.Second})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	srv.pause()
	time.Sleep(100 * time.Millisecond) // an attempt is now waiting for a reply
	cancelled := time.Now()
	cancel()
	select {
	case err := <-done:
		if d := time.Since(cancelled); d > 250*time.Millisecond {
			t.Fatalf("returned %v after cancel", d)
		}
		if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
	case <-time.After(500 * time.Millisecond):
		srv.resume()
		t.Fatal("Acquire blocked on a hung Redis after cancel")
	}
	srv.resume()
	mustNoErr(t, holder.Release(bg), "release")
}

// TestCancelRightAfterObtainLeavesNoKey covers the window where the acquire
// script succeeded but the caller's ctx ended before Acquire could return.
func TestCancelRightAfterObtainLeavesNoKey(t *testing.T) {
	rdb := sharedRedis(t) // not parallel: uses the package test hook
	c := newTestClient(t, rdb, Options{})
	ctx, cancel := context.WithCancel(bg)
	hook := func() { cancel() }
	testHookObtained.Store(&hook)
	t.Cleanup(func() { testHookObtained.Store(nil) })

	_, err := c.Acquire(ctx, "k", AcquireOptions{TTL: 10 * time.Second})
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrNotObtained and context.Canceled", err)
	}
	k, _ := c.cfg.keys("k")
	if n := rdb.Exists(bg, k.lock).Val(); n != 0 {
		t.Fatalf("a cancelled Acquire left the lock key behind (TTL %v)", rdb.PTTL(bg, k.lock).Val())
	}
}

func TestTransportErrorsAreNotLockErrors(t *testing.T) {
	t.Parallel()
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + itoa(freePort(t)), MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = dead.Close() })
	c := New(dead, Options{})
	t.Cleanup(func() { _ = c.Close() })
	for _, wait := range []time.Duration{0, 150 * time.Millisecond} {
		_, err := c.Acquire(bg, "k", AcquireOptions{TTL: time.Second, Wait: wait})
		if err == nil || errors.Is(err, ErrNotObtained) || errors.Is(err, ErrNotHeld) {
			t.Fatalf("wait %v: err = %v, want a transport error matching neither sentinel", wait, err)
		}
		if !strings.Contains(err.Error(), "refused") {
			t.Fatalf("wait %v: err = %v, want the dial error inside", wait, err)
		}
	}
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{})
	if _, err := c.Acquire(bg, "", AcquireOptions{}); err == nil {
		t.Fatal("empty key accepted")
	}
	if _, err := c.Acquire(bg, "k", AcquireOptions{TTL: time.Microsecond}); err == nil {
		t.Fatal("sub-millisecond TTL accepted")
	}
	bad := New(rdb, Options{Prefix: "x{}:"})
	if _, err := bad.Acquire(bg, "k", AcquireOptions{}); err == nil {
		t.Fatal("prefix with an empty hash tag accepted")
	}
}

func TestFencesStrictlyIncrease(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{})
	other := New(rdb, Options{Prefix: c.cfg.prefix})
	t.Cleanup(func() { _ = other.Close() })
	var last int64
	for i := range 20 {
		cl := c
		if i%2 == 1 {
			cl = other
		}
		l, err := cl.Acquire(bg, "k", AcquireOptions{TTL: time.Second})
		mustNoErr(t, err, "acquire %d", i)
		if l.Fence().Number <= last {
			t.Fatalf("fence %d after %d", l.Fence().Number, last)
		}
		last = l.Fence().Number
		mustNoErr(t, l.Release(bg), "release")
	}
	// Independent keys have independent counters.
	l, err := c.Acquire(bg, "other", AcquireOptions{TTL: time.Second})
	mustNoErr(t, err, "acquire other")
	if l.Fence().Number != 1 {
		t.Fatalf("first fence of a new key = %d, want 1", l.Fence().Number)
	}
	mustNoErr(t, l.Release(bg), "release")
}

func TestClosedClient(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{})
	holder, err := c.Acquire(bg, "k", AcquireOptions{TTL: 10 * time.Second})
	mustNoErr(t, err, "acquire")
	done := make(chan error, 1)
	go func() {
		_, err := c.Acquire(bg, "k", AcquireOptions{Wait: 10 * time.Second})
		done <- err
	}()
	eventually(t, 2*time.Second, "waiter registered", func() bool {
		c.hub.mu.Lock()
		defer c.hub.mu.Unlock()
		s := c.hub.subs[holder.keys.channel]
		return s != nil && len(s.waiters) == 1
	})
	mustNoErr(t, c.Close(), "close")
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("waiter: %v, want ErrClosed", err)
		}
	case <-time.After(time.Second):
		t.Fatal("waiter still blocked after Close")
	}
	select {
	case <-c.hub.stopped:
	default:
		t.Fatal("pub/sub goroutine still running after Close")
	}
	if _, err := c.Acquire(bg, "k2", AcquireOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after close: %v", err)
	}
	// Locks outlive the Client's pub/sub.
	mustNoErr(t, holder.Release(bg), "release after close")
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestRaiseFence(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{})
	mustNoErr(t, c.RaiseFence(bg, "k", 500), "raise")
	mustNoErr(t, c.RaiseFence(bg, "k", 10), "raise below (no-op)")
	l, err := c.Acquire(bg, "k", AcquireOptions{TTL: time.Second})
	mustNoErr(t, err, "acquire")
	if l.Fence().Number != 501 {
		t.Fatalf("fence after raise to 500 = %d, want 501", l.Fence().Number)
	}
	mustNoErr(t, l.Release(bg), "release")
}

// TestWantedSaysSomeoneWaits: an attempt that finds the lock held marks the
// hold wanted; the mark ends with the hold, and a hold lost says so.
func TestWantedSaysSomeoneWaits(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{Prefix: testPrefix(t, rdb)})

	l, err := c.Acquire(bg, "product:8", AcquireOptions{TTL: 5 * time.Second})
	mustNoErr(t, err, "acquire")
	if w, err := l.Wanted(bg); err != nil || w {
		t.Fatalf("Wanted before any other attempt = %v, %v; want false", w, err)
	}
	if _, err := c.Acquire(bg, "product:8", AcquireOptions{TTL: time.Second}); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("second acquire: %v, want ErrNotObtained", err)
	}
	if w, err := l.Wanted(bg); err != nil || !w {
		t.Fatalf("Wanted after a refused attempt = %v, %v; want true", w, err)
	}
	mustNoErr(t, l.Release(bg), "release")
	if _, err := l.Wanted(bg); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Wanted after release: %v, want ErrNotHeld", err)
	}
	l2, err := c.Acquire(bg, "product:8", AcquireOptions{TTL: 5 * time.Second})
	mustNoErr(t, err, "acquire again")
	defer func() { mustNoErr(t, l2.Release(bg), "release") }()
	if w, err := l2.Wanted(bg); err != nil || w {
		t.Fatalf("Wanted of the next hold = %v, %v; want false (the mark went with the hold)", w, err)
	}
}
