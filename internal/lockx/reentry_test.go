package lockx

import (
	"errors"
	"testing"
	"time"
)

func TestReentry(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{})
	other := New(rdb, Options{Prefix: c.cfg.prefix})
	t.Cleanup(func() { _ = other.Close() })

	outer, err := c.Acquire(bg, "k", AcquireOptions{TTL: 5 * time.Second})
	mustNoErr(t, err, "outer")
	inner, err := c.Acquire(outer.Context(), "k", AcquireOptions{TTL: time.Second})
	mustNoErr(t, err, "re-enter via Lock.Context")
	third, err := c.Acquire(WithLock(bg, outer), "k", AcquireOptions{})
	mustNoErr(t, err, "re-enter via WithLock")
	for _, l := range []*Lock{inner, third} {
		if l.Token() != outer.Token() || l.Fence().Number != outer.Fence().Number {
			t.Fatalf("re-entry token/fence %s/%d, want %s/%d", l.Token(), l.Fence().Number, outer.Token(), outer.Fence().Number)
		}
	}
	if inner.Depth() != 2 || third.Depth() != 2 {
		t.Fatalf("depths %d %d", inner.Depth(), third.Depth())
	}
	deeper, err := c.Acquire(inner.Context(), "k", AcquireOptions{})
	mustNoErr(t, err, "depth 3")
	if deeper.Depth() != 3 {
		t.Fatalf("depth %d, want 3", deeper.Depth())
	}
	if n := rdb.HGet(bg, outer.RedisKey(), outer.Token()).Val(); n != "4" {
		t.Fatalf("hold count %s, want 4", n)
	}
	if pttl := rdb.PTTL(bg, outer.RedisKey()).Val(); pttl <= 4*time.Second {
		t.Fatalf("a re-entry with a shorter TTL shortened the hold to %v", pttl)
	}
	// A re-entry on another key under the same ctx is a plain acquisition.
	otherKey, err := c.Acquire(outer.Context(), "k2", AcquireOptions{TTL: time.Second})
	mustNoErr(t, err, "other key")
	if otherKey.Token() == outer.Token() || otherKey.Depth() != 1 {
		t.Fatal("lock on another key re-used the outer token")
	}
	mustNoErr(t, otherKey.Release(bg), "release other key")

	for i, l := range []*Lock{deeper, third, inner} {
		mustNoErr(t, l.Release(bg), "release nested %d", i)
		if rdb.Exists(bg, outer.RedisKey()).Val() != 1 {
			t.Fatalf("key gone after releasing nested hold %d of 4", i+1)
		}
		if _, err := other.Acquire(bg, "k", AcquireOptions{}); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("another owner got in while nested holds remained: %v", err)
		}
		if l.Context().Err() == nil {
			t.Fatal("released nested Lock's Context not cancelled")
		}
	}
	if outer.Context().Err() != nil {
		t.Fatal("outer Context cancelled by nested releases")
	}
	mustNoErr(t, outer.Release(bg), "release outer")
	if rdb.Exists(bg, outer.RedisKey()).Val() != 0 {
		t.Fatal("key left after last release")
	}
	// A released Lock no longer re-enters: a new, independent hold.
	again, err := c.Acquire(WithLock(bg, outer), "k", AcquireOptions{TTL: time.Second})
	mustNoErr(t, err, "acquire under a released Lock's ctx")
	if again.Token() == outer.Token() || again.Fence().Number <= outer.Fence().Number {
		t.Fatal("acquire under a released Lock re-used its token or fence")
	}
	mustNoErr(t, again.Release(bg), "release")
}

func TestReentryAfterLossIsRefused(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{})
	outer, err := c.Acquire(bg, "k", AcquireOptions{TTL: 5 * time.Second})
	mustNoErr(t, err, "outer")
	mustNoErr(t, rdb.Del(bg, outer.RedisKey()).Err(), "del")
	if _, err := c.Acquire(outer.Context(), "k", AcquireOptions{}); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("re-entry into a vanished hold: %v, want ErrNotHeld", err)
	}
	if rdb.Exists(bg, outer.RedisKey()).Val() != 0 {
		t.Fatal("refused re-entry created a key")
	}
	select {
	case <-outer.Lost():
	default:
		t.Fatal("outer Lock not marked lost")
	}
	if _, err := c.Acquire(outer.Context(), "k", AcquireOptions{}); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("re-entry into a lost hold: %v, want ErrNotHeld", err)
	}
}

func TestReentryIsScopedToClient(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{})
	other := New(rdb, Options{Prefix: c.cfg.prefix})
	t.Cleanup(func() { _ = other.Close() })
	outer, err := c.Acquire(bg, "k", AcquireOptions{TTL: 5 * time.Second})
	mustNoErr(t, err, "outer")
	if _, err := other.Acquire(outer.Context(), "k", AcquireOptions{}); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("another Client re-entered through the ctx: %v", err)
	}
	mustNoErr(t, outer.Release(bg), "release")
}
