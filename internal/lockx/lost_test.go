package lockx

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestLostHold: however a hold is lost (its TTL ran out, with or without a
// watchdog, or someone deleted the key and another owner took it), the
// holder is told at once (Lost, and its Context cancelled with ErrNotHeld),
// its Refresh and Release are refused with ErrNotHeld, and a new owner's
// hold, TTL and higher fence are untouched by them.
func TestLostHold(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts AcquireOptions
		// lose breaks the hold; nil waits for the TTL to run out.
		lose func(t *testing.T, rdb redis.UniversalClient, l *Lock)
		// lostIn bounds when Lost must be closed, from the acquire; a
		// positive atLeast says it may not be before then either.
		lostIn, atLeast time.Duration
		newOwner        bool
		// lostCounted: lock_lost_total and lock_renewal_failures_total are 1
		// (the watchdog noticed).
		lostCounted bool
	}{
		{name: "expired, then a new owner", opts: AcquireOptions{TTL: 100 * time.Millisecond},
			lostIn: time.Second, newOwner: true},
		{name: "expired without watchdog", opts: AcquireOptions{TTL: 200 * time.Millisecond},
			lostIn: time.Second, atLeast: 190 * time.Millisecond},
		{name: "key deleted, watchdog reports", opts: AcquireOptions{TTL: 3 * time.Second, Watchdog: true},
			lose: func(t *testing.T, rdb redis.UniversalClient, l *Lock) {
				// An operator, or a Redis failover that lost the key.
				mustNoErr(t, rdb.Del(bg, l.RedisKey()).Err(), "del")
			},
			lostIn: 4 * time.Second, newOwner: true, lostCounted: true}, // first renewal at TTL/3
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb := sharedRedis(t)
			m := NewMetrics("lost")
			c := newTestClient(t, rdb, Options{Metrics: m})
			start := time.Now()
			old, err := c.Acquire(bg, "k", tc.opts)
			mustNoErr(t, err, "acquire")
			if tc.lose != nil {
				tc.lose(t, rdb, old)
			}
			var cur *Lock
			if tc.newOwner {
				if tc.lose == nil { // validity passes locally first; the key expires right after
					<-old.Lost()
					eventually(t, time.Second, "key expired", func() bool { return rdb.Exists(bg, old.RedisKey()).Val() == 0 })
				}
				cur, err = c.Acquire(bg, "k", AcquireOptions{TTL: 5 * time.Second})
				mustNoErr(t, err, "new owner")
			}
			select {
			case <-old.Lost():
			case <-time.After(time.Until(start.Add(tc.lostIn))):
				t.Fatalf("loss not reported within %v", tc.lostIn)
			}
			if d := time.Since(start); d < tc.atLeast {
				t.Fatalf("lost after %v, want at the TTL minus drift (at least %v)", d, tc.atLeast)
			}
			if !errors.Is(context.Cause(old.Context()), ErrNotHeld) {
				t.Fatalf("Context cause = %v, want ErrNotHeld", context.Cause(old.Context()))
			}
			if err := old.Refresh(bg, time.Minute); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("refresh by the lost holder: %v, want ErrNotHeld", err)
			}
			if err := old.Release(bg); !errors.Is(err, ErrNotHeld) {
				t.Fatalf("release by the lost holder: %v, want ErrNotHeld", err)
			}
			if cur != nil {
				if got := rdb.HGet(bg, cur.RedisKey(), cur.Token()).Val(); got != "1" {
					t.Fatalf("new owner's hold = %q after the lost holder's calls, want 1", got)
				}
				if pttl := rdb.PTTL(bg, cur.RedisKey()).Val(); pttl > 5*time.Second {
					t.Fatalf("the lost holder's refresh extended the new owner's TTL to %v", pttl)
				}
				if cur.Fence().Number <= old.Fence().Number {
					t.Fatalf("fence %d not above %d", cur.Fence().Number, old.Fence().Number)
				}
				mustNoErr(t, cur.Release(bg), "release")
			}
			if tc.lostCounted {
				if v := metricValue(t, m, "lost_lock_lost_total"); v != 1 {
					t.Fatalf("lost_total = %v, want 1", v)
				}
				if v := metricValue(t, m, "lost_lock_renewal_failures_total"); v != 1 {
					t.Fatalf("renewal_failures_total = %v, want 1", v)
				}
			}
		})
	}
}
