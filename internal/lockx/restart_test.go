package lockx

import (
	"errors"
	"testing"
	"time"
)

// TestRedisRestart kills a private redis-server (no persistence) under a
// watched hold and a waiter, and restarts it on the same port.
func TestRedisRestart(t *testing.T) {
	t.Parallel()
	srv := startRedisServer(t)
	rdb := srv.client(t)
	m := NewMetrics("rs")
	c := newTestClient(t, rdb, Options{Metrics: m, MaxBackoff: 200 * time.Millisecond})

	holder, err := c.Acquire(bg, "k", AcquireOptions{TTL: 600 * time.Millisecond, Watchdog: true})
	mustNoErr(t, err, "acquire")
	waited := make(chan *Lock, 1)
	waitErr := make(chan error, 1)
	go func() {
		l, err := c.Acquire(bg, "k", AcquireOptions{TTL: 5 * time.Second, Wait: 10 * time.Second})
		if err != nil {
			waitErr <- err
			return
		}
		waited <- l
	}()
	time.Sleep(50 * time.Millisecond)

	srv.kill()
	_, err = c.Acquire(bg, "other", AcquireOptions{TTL: time.Second})
	if err == nil || errors.Is(err, ErrNotObtained) || errors.Is(err, ErrNotHeld) {
		t.Fatalf("acquire while Redis is down: %v, want a transport error", err)
	}
	err = holder.Refresh(bg, 0)
	if err == nil || errors.Is(err, ErrNotHeld) {
		t.Fatalf("refresh while Redis is down: %v, want a transport error", err)
	}
	time.Sleep(100 * time.Millisecond)
	srv.start() // empty: the hold is gone

	select {
	case <-holder.Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("holder not told that its lock vanished with the restart")
	}
	// go-redis may refuse for up to a second after dial failures; a
	// transport error leaves the Lock releasable, so retry like a caller would.
	var relErr error
	eventually(t, 3*time.Second, "release answered by Redis", func() bool {
		relErr = holder.Release(bg)
		return relErr == nil || errors.Is(relErr, ErrNotHeld)
	})
	if !errors.Is(relErr, ErrNotHeld) {
		t.Fatalf("release after restart: %v, want ErrNotHeld", relErr)
	}
	var next *Lock
	select {
	case next = <-waited:
	case err := <-waitErr:
		t.Fatalf("waiter across the restart: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("waiter did not obtain the lock after the restart")
	}
	// The fence counter restarted with the empty Redis: that is why fences
	// need persistence (or RaiseFence from the store that checks them).
	if next.Fence().Number != 1 {
		t.Fatalf("fence after a restart without persistence = %d, want 1", next.Fence().Number)
	}

	// The shared pub/sub connection came back: a release wakes a waiter
	// again, with fallback polling far too slow to explain it.
	before := c.hub.wakeups.Load()
	got := make(chan error, 1)
	go func() {
		l, err := c.Acquire(bg, "k", AcquireOptions{TTL: time.Second, Wait: 5 * time.Second})
		if err == nil {
			err = l.Release(bg)
		}
		got <- err
	}()
	eventually(t, 3*time.Second, "waiter subscribed after restart", func() bool {
		c.hub.mu.Lock()
		defer c.hub.mu.Unlock()
		s := c.hub.subs[next.keys.channel]
		return s != nil && len(s.waiters) == 1
	})
	eventually(t, 5*time.Second, "pub/sub re-subscribed on the new server", func() bool {
		n := rdb.PubSubNumSub(bg, next.keys.channel).Val()
		return n[next.keys.channel] >= 1
	})
	mustNoErr(t, next.Release(bg), "release")
	mustNoErr(t, <-got, "second waiter")
	if c.hub.wakeups.Load() == before {
		t.Fatal("no pub/sub wake-up after the restart")
	}
	if v := metricValue(t, m, "rs_lock_lost_total"); v != 1 {
		t.Fatalf("lost_total = %v, want 1", v)
	}
}
