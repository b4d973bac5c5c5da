package lockx

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Do reports each way a hold can end, one way each.
func TestDo(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{})
	ctx := context.Background()
	boom := errors.New("boom")
	tests := []struct {
		name  string
		key   string
		setup func(t *testing.T, key string)
		fn    func(ctx context.Context, fence Fence) error
		want  []error // errors.Is targets; nil: no error
	}{
		{name: "work done", key: "do:ok", fn: func(context.Context, Fence) error { return nil }},
		{name: "work failed", key: "do:fail", fn: func(context.Context, Fence) error { return boom }, want: []error{boom}},
		{name: "lock taken", key: "do:taken",
			setup: func(t *testing.T, key string) {
				if _, err := c.Acquire(ctx, key, AcquireOptions{TTL: 10 * time.Second}); err != nil {
					t.Fatal(err)
				}
			},
			fn: func(context.Context, Fence) error { t.Error("fn ran without the lock"); return nil }, want: []error{ErrNotObtained}},
		{name: "lost while working", key: "do:lost",
			fn: func(lctx context.Context, _ Fence) error {
				<-lctx.Done() // the hold expires: 200 ms, no watchdog
				return lctx.Err()
			}, want: []error{ErrNotHeld, context.Canceled}},
		{name: "lost before release", key: "do:late",
			fn: func(context.Context, Fence) error {
				time.Sleep(400 * time.Millisecond) // past the TTL, not watching the context
				return nil
			}, want: []error{ErrLostBeforeRelease}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				tt.setup(t, tt.key)
			}
			fence := Fence{Number: -1}
			err := c.Do(ctx, tt.key, AcquireOptions{TTL: 200 * time.Millisecond}, func(lctx context.Context, f Fence) error {
				fence = f
				return tt.fn(lctx, f)
			})
			if len(tt.want) == 0 && err != nil {
				t.Fatalf("Do: %v, want nil", err)
			}
			for _, w := range tt.want {
				if !errors.Is(err, w) {
					t.Errorf("Do: %v, want it to match %v", err, w)
				}
			}
			if tt.name == "work done" && (fence.Number <= 0 || len(fence.Holder) != 26) {
				t.Errorf("fn got fence %+v, want a positive number and the hold's 26-character owner token", fence)
			}
		})
	}
}

// failNext makes the next command its client sends fail on the transport,
// once armed.
type failNext struct{ armed atomic.Bool }

func (f *failNext) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *failNext) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.armed.CompareAndSwap(true, false) {
			err := errors.New("injected: connection reset by peer")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (f *failNext) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A release that meets a transport error is tried again: the work's result
// stands and the lock is free at once, not after its TTL.
func TestDoRetriesReleaseAfterTransportError(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	hook := &failNext{}
	rdb.AddHook(hook)
	c := newTestClient(t, rdb, Options{})
	err := c.Do(context.Background(), "do:blip", AcquireOptions{TTL: 10 * time.Second}, func(context.Context, Fence) error {
		hook.armed.Store(true) // the release's first try fails
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v, want nil (the work succeeded, the hold was never lost)", err)
	}
	l, err := c.Acquire(context.Background(), "do:blip", AcquireOptions{TTL: time.Second})
	if err != nil {
		t.Fatalf("the lock is still held after Do returned (the release was not retried): %v", err)
	}
	mustNoErr(t, l.Release(context.Background()), "release")
}
