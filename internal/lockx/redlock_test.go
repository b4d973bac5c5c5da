package lockx

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func startRedlock(t *testing.T, n int, o Options) (*Redlock, []*redisServer, []*redis.Client) {
	t.Helper()
	var srvs []*redisServer
	var clients []*redis.Client
	var nodes []redis.UniversalClient
	for range n {
		s := startRedisServer(t)
		c := s.client(t)
		srvs, clients, nodes = append(srvs, s), append(clients, c), append(nodes, c)
	}
	if o.Prefix == "" {
		o.Prefix = "lock:"
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = 500 * time.Millisecond // generous: 2 busy cores under -race
	}
	r := NewRedlock(nodes, o)
	t.Cleanup(func() { _ = r.Close() })
	return r, srvs, clients
}

func TestRedlockQuorum(t *testing.T) {
	t.Parallel()
	r, srvs, clients := startRedlock(t, 3, Options{})

	l, err := r.Acquire(bg, "k", AcquireOptions{TTL: 5 * time.Second})
	mustNoErr(t, err, "acquire with 3 nodes")
	for i, c := range clients { // the last node may answer after Acquire returned
		eventually(t, time.Second, "node "+itoa(i)+" holds the lock", func() bool {
			return c.HGet(bg, l.RedisKey(), l.Token()).Val() == "1"
		})
	}
	if _, err := r.Acquire(bg, "k", AcquireOptions{}); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("second owner: %v, want ErrNotObtained", err)
	}
	if w, err := l.Wanted(bg); err != nil || !w {
		t.Fatalf("Wanted after a refused owner = %v, %v; want true", w, err)
	}
	mustNoErr(t, l.Release(bg), "release")
	for i, c := range clients {
		if c.Exists(bg, l.RedisKey()).Val() != 0 {
			t.Fatalf("node %d kept the key after release", i)
		}
	}
	last := l.Fence().Number

	srvs[2].kill() // one of three down: a majority remains
	for i := range 3 {
		l, err := r.Acquire(bg, "k", AcquireOptions{TTL: 2 * time.Second, Watchdog: true})
		mustNoErr(t, err, "acquire %d with one node down", i)
		if l.Fence().Number <= last {
			t.Fatalf("fence %d after %d", l.Fence().Number, last)
		}
		last = l.Fence().Number
		mustNoErr(t, l.Refresh(bg, 0), "refresh with one node down")
		mustNoErr(t, l.Release(bg), "release with one node down")
	}

	srvs[1].kill() // two of three down: no majority
	_, err = r.Acquire(bg, "k", AcquireOptions{TTL: time.Second})
	if err == nil || errors.Is(err, ErrNotObtained) || errors.Is(err, ErrNotHeld) {
		t.Fatalf("acquire with two nodes down: %v, want a transport error (no quorum)", err)
	}
	_, err = r.Acquire(bg, "k", AcquireOptions{TTL: time.Second, Wait: 300 * time.Millisecond})
	if err == nil || errors.Is(err, ErrNotObtained) {
		t.Fatalf("waiting acquire with two nodes down: %v, want a transport error", err)
	}
	// An attempt abandoned at the wait deadline cleans up right after.
	eventually(t, 2*time.Second, "failed attempts leave no lock on the surviving node", func() bool {
		return clients[0].Exists(bg, l.RedisKey()).Val() == 0
	})
}

// TestRedlockFencesSurviveNodeRotation lets the node counters drift apart and
// rotates which majority answers: the written-back maximum keeps fences
// increasing (max of per-node INCRs alone would go backwards here).
func TestRedlockFencesSurviveNodeRotation(t *testing.T) {
	t.Parallel()
	r, srvs, clients := startRedlock(t, 3, Options{})
	k, _ := r.cfg.keys("k")
	mustNoErr(t, clients[0].Set(bg, k.fence, 100, 0).Err(), "seed node 0")
	mustNoErr(t, clients[1].Set(bg, k.fence, 5, 0).Err(), "seed node 1")
	mustNoErr(t, clients[2].Set(bg, k.fence, 5, 0).Err(), "seed node 2")

	var last int64
	for _, down := range []int{0, 2, 0, 1, 0} {
		srvs[down].pause() // SIGSTOP: unreachable but keeps its data
		l, err := r.Acquire(bg, "k", AcquireOptions{TTL: 2 * time.Second})
		srvs[down].resume()
		mustNoErr(t, err, "acquire with node %d paused", down)
		if l.Fence().Number <= last {
			t.Fatalf("fence %d after %d (node %d paused)", l.Fence().Number, last, down)
		}
		last = l.Fence().Number
		mustNoErr(t, l.Release(bg), "release")
	}
}

func TestRedlockWaitAndReentry(t *testing.T) {
	t.Parallel()
	r, _, clients := startRedlock(t, 3, Options{MinBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second})
	holder, err := r.Acquire(bg, "k", AcquireOptions{TTL: 10 * time.Second})
	mustNoErr(t, err, "acquire")
	inner, err := r.Acquire(holder.Context(), "k", AcquireOptions{})
	mustNoErr(t, err, "re-enter")
	if inner.Fence().Number != holder.Fence().Number || inner.Token() != holder.Token() {
		t.Fatal("Redlock re-entry did not share the hold")
	}
	eventually(t, time.Second, "a majority of nodes counts 2 holds", func() bool {
		n := 0
		for _, c := range clients {
			if c.HGet(bg, holder.RedisKey(), holder.Token()).Val() == "2" {
				n++
			}
		}
		return n >= 2
	})
	got := make(chan error, 1)
	go func() {
		l, err := r.Acquire(bg, "k", AcquireOptions{TTL: time.Second, Wait: 5 * time.Second})
		if err == nil {
			if l.Fence().Number <= holder.Fence().Number {
				err = errors.New("fence did not increase")
			}
			_ = l.Release(bg)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	mustNoErr(t, inner.Release(bg), "release inner")
	select {
	case err := <-got:
		t.Fatalf("waiter got in while the outer hold remained: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	released := time.Now()
	mustNoErr(t, holder.Release(bg), "release outer")
	mustNoErr(t, <-got, "waiter")
	if d := time.Since(released); d > 2*time.Second {
		t.Fatalf("handoff took %v: pub/sub did not wake the Redlock waiter", d)
	}
}
