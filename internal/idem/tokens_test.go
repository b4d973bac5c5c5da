package idem

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestTokensConsumeOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testRedis(t)
	m := NewMetrics("")
	tk := NewTokens(rdb, prefix, time.Minute).WithMetrics(m)

	tok, exp, err := tk.Issue(ctx, "u1", "order")
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(exp); d < 55*time.Second || d > time.Minute {
		t.Errorf("expires in %v, want about a minute", d)
	}
	// Foreign principal, other purpose, garbage: refused, and the owner's
	// token survives them.
	for _, try := range []struct{ principal, purpose, token string }{
		{"u2", "order", tok},
		{"u1", "pay", tok},
		{"u1", "order", "NOSUCHTOKEN"},
		{"u1", "order", ""},
		{"u1", "order", strings.Repeat("A", 65)},
	} {
		if _, err := tk.Consume(ctx, try.principal, try.purpose, try.token); !errors.Is(err, ErrTokenInvalid) {
			t.Errorf("Consume(%q, %q, %.20q) = %v, want ErrTokenInvalid", try.principal, try.purpose, try.token, err)
		}
	}
	if _, err := tk.Consume(ctx, "u1", "order", tok); err != nil {
		t.Fatalf("owner's Consume: %v", err)
	}
	if _, err := tk.Consume(ctx, "u1", "order", tok); !errors.Is(err, ErrTokenInvalid) {
		t.Fatalf("second Consume = %v, want ErrTokenInvalid", err)
	}
	if c, r := m.value(cTokensConsumed), m.value(cTokensRejected); c != 1 || r != 6 {
		t.Errorf("consumed %d rejected %d, want 1 and 6", c, r)
	}
}

func TestTokensExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testRedis(t)
	tk := NewTokens(rdb, prefix, 150*time.Millisecond)
	tok, _, err := tk.Issue(ctx, "u1", "order")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := tk.Consume(ctx, "u1", "order", tok); !errors.Is(err, ErrTokenInvalid) {
		t.Fatalf("expired token: %v, want ErrTokenInvalid", err)
	}
}

func TestTokensRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testRedis(t)
	tk := NewTokens(rdb, prefix, 10*time.Second)
	tok, _, err := tk.Issue(ctx, "u1", "order")
	if err != nil {
		t.Fatal(err)
	}
	c, err := tk.Consume(ctx, "u1", "order", tok)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	ttl := rdb.PTTL(ctx, prefix+tok).Val()
	if ttl <= 9*time.Second || ttl > 10*time.Second {
		t.Errorf("restored token lives %v more, want its remaining ~10s", ttl)
	}
	if _, err := tk.Consume(ctx, "u2", "order", tok); !errors.Is(err, ErrTokenInvalid) {
		t.Fatalf("restored token lost its binding: %v", err)
	}
	if _, err := tk.Consume(ctx, "u1", "order", tok); err != nil {
		t.Fatalf("Consume after Restore: %v", err)
	}

	// A token restored after its lifetime stays gone.
	short := NewTokens(rdb, prefix, 100*time.Millisecond)
	tok, _, err = short.Issue(ctx, "u1", "order")
	if err != nil {
		t.Fatal(err)
	}
	c, err = short.Consume(ctx, "u1", "order", tok)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := c.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := short.Consume(ctx, "u1", "order", tok); !errors.Is(err, ErrTokenInvalid) {
		t.Fatalf("expired token came back: %v", err)
	}
}

const raceSubmitters = 16

// raceClient has a connection ready for every submitter, so the submissions
// reach Redis together rather than queue for a dial.
func raceClient(t *testing.T) (redis.UniversalClient, string) {
	rdb, prefix := testRedis(t, func(o *redis.UniversalOptions) {
		o.PoolSize = 2 * raceSubmitters
		o.MinIdleConns = raceSubmitters
	})
	var wg sync.WaitGroup
	for range raceSubmitters {
		wg.Go(func() { rdb.Ping(context.Background()) })
	}
	wg.Wait()
	return rdb, prefix
}

// submitAll runs consume in raceSubmitters goroutines released together and
// returns how many succeeded.
func submitAll(consume func() error) int {
	var ready, done sync.WaitGroup
	barrier := make(chan struct{})
	var ok atomic.Int32
	for range raceSubmitters {
		ready.Add(1)
		done.Go(func() {
			ready.Done()
			<-barrier
			if consume() == nil {
				ok.Add(1)
			}
		})
	}
	ready.Wait()
	close(barrier)
	done.Wait()
	return int(ok.Load())
}

// The seed's two-step validateToken lets a double submission through: the
// test proves the bug exists (it fails if the race never shows).
func TestConsumeNaiveRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := raceClient(t)
	tk := NewTokens(rdb, prefix, time.Minute)
	for try := 1; try <= 200; try++ {
		tok, _, err := tk.Issue(ctx, "u1", "order")
		if err != nil {
			t.Fatal(err)
		}
		n := submitAll(func() error { return tk.ConsumeNaive(ctx, "u1", "order", tok) })
		if n == 0 {
			t.Fatalf("try %d: nobody got through", try)
		}
		if n >= 2 {
			t.Logf("try %d: the naive consume let %d of %d submissions through", try, n, raceSubmitters)
			return
		}
	}
	t.Fatal("the naive GET-then-DEL never let two submissions through in 200 tries")
}

func TestConsumeAtomicUnderRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := raceClient(t)
	tk := NewTokens(rdb, prefix, time.Minute)
	for try := 1; try <= 50; try++ {
		tok, _, err := tk.Issue(ctx, "u1", "order")
		if err != nil {
			t.Fatal(err)
		}
		n := submitAll(func() error {
			_, err := tk.Consume(ctx, "u1", "order", tok)
			return err
		})
		if n != 1 {
			t.Fatalf("try %d: %d of %d submissions got through, want exactly 1", try, n, raceSubmitters)
		}
	}
}
