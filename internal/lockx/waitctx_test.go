package lockx

import (
	"context"
	"testing"
	"time"
)

// A hold obtained after waiting must keep a live context: the wait's own
// deadline ends when Acquire returns, the hold does not.
func TestWaitedHoldKeepsItsContext(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{Prefix: testPrefix(t, rdb)})
	ctx := context.Background()
	first, err := c.Acquire(ctx, "k", AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, func() { _ = first.Release(ctx) })
	second, err := c.Acquire(ctx, "k", AcquireOptions{TTL: 5 * time.Second, Wait: 5 * time.Second, Watchdog: true})
	if err != nil {
		t.Fatalf("waiting acquire: %v", err)
	}
	defer second.Release(ctx)
	if err := second.Context().Err(); err != nil {
		t.Fatalf("context of a hold obtained after waiting: %v (cause %v); want it live", err, context.Cause(second.Context()))
	}
}
