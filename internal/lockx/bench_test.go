package lockx

import (
	"context"
	"crypto/rand"
	"errors"
	"math"
	mrand "math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// Benchmarks compare lockx with bsm/redislock, go-redsync/redsync (one node)
// and the plain "SET NX PX, sleep 100ms, retry" loop, on the same Redis in
// one run:
//
//	go test -run '^$' -bench . -benchtime 2s ./internal/lockx/
//
// Peers poll; they get a 10ms retry delay (bsm's README uses 100ms, redsync
// defaults to 50-250ms), i.e. their fastest reasonable setting.

const peerRetry = 10 * time.Millisecond

// benchLocker takes the lock on key; wait=false tries once.
type benchLocker interface {
	lock(ctx context.Context, key string, wait bool) (unlock func() error, err error)
}

type lockxLocker struct{ c *Client }

func (l lockxLocker) lock(ctx context.Context, key string, wait bool) (func() error, error) {
	o := AcquireOptions{TTL: 10 * time.Second}
	if wait {
		o.Wait = 30 * time.Second
	}
	lk, err := l.c.Acquire(ctx, key, o)
	if err != nil {
		return nil, err
	}
	return func() error { return lk.Release(context.Background()) }, nil
}

type bsmLocker struct{ c *redislock.Client }

func (l bsmLocker) lock(ctx context.Context, key string, wait bool) (func() error, error) {
	o := &redislock.Options{RetryStrategy: redislock.NoRetry()}
	if wait {
		o.RetryStrategy = redislock.LinearBackoff(peerRetry)
	}
	lk, err := l.c.Obtain(ctx, key, 10*time.Second, o)
	if err != nil {
		return nil, err
	}
	return func() error { return lk.Release(context.Background()) }, nil
}

type redsyncLocker struct{ rs *redsync.Redsync }

func (l redsyncLocker) lock(ctx context.Context, key string, wait bool) (func() error, error) {
	tries := 1
	if wait {
		tries = math.MaxInt32
	}
	m := l.rs.NewMutex(key, redsync.WithExpiry(10*time.Second), redsync.WithTries(tries), redsync.WithRetryDelay(peerRetry))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func() error {
		ok, err := m.UnlockContext(context.Background())
		if err == nil && !ok {
			err = errors.New("redsync: unlock failed")
		}
		return err
	}, nil
}

// pollLocker is the seed article's loop: SET NX PX, sleep 100ms, retry.
type pollLocker struct{ rdb redis.UniversalClient }

var pollRelease = redis.NewScript(`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)

func (l pollLocker) lock(ctx context.Context, key string, wait bool) (func() error, error) {
	token := rand.Text()
	for {
		ok, err := l.rdb.SetNX(ctx, key, token, 10*time.Second).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return func() error { return pollRelease.Run(context.Background(), l.rdb, []string{key}, token).Err() }, nil
		}
		if !wait {
			return nil, ErrNotObtained
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// callCounter counts commands sent to Redis (round trips; a script counts
// once), excluding the pub/sub connection.
type callCounter struct{ n atomic.Int64 }

func (c *callCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *callCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *callCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

var benchCalls callCounter

func benchLockers(b *testing.B) (redis.UniversalClient, string, map[string]benchLocker) {
	var rdb redis.UniversalClient
	if os.Getenv("LOCKX_BENCH_PRIVATE_REDIS") != "" {
		rdb = startRedisServer(b).client(b) // away from other packages' test traffic
	} else {
		rdb = sharedRedis(b)
	}
	rdb.AddHook(&benchCalls)
	prefix := testPrefix(b, rdb)
	c := New(rdb, Options{Prefix: prefix + "lockx:"})
	b.Cleanup(func() { _ = c.Close() })
	return rdb, prefix, map[string]benchLocker{
		"lockx":         lockxLocker{c},
		"bsm-redislock": bsmLocker{redislock.New(rdb)},
		"redsync":       redsyncLocker{redsync.New(goredis.NewPool(rdb))},
		"poll-100ms":    pollLocker{rdb},
	}
}

var benchOrder = []string{"lockx", "bsm-redislock", "redsync", "poll-100ms"}

func BenchmarkUncontended(b *testing.B) {
	_, prefix, lockers := benchLockers(b)
	for _, name := range benchOrder {
		l := lockers[name]
		b.Run(name, func(b *testing.B) {
			key := prefix + name + ":uncontended"
			ctx := context.Background()
			for b.Loop() {
				unlock, err := l.lock(ctx, key, false)
				if err != nil {
					b.Fatal(err)
				}
				if err := unlock(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkUncontendedInterleaved runs one obtain+release of every
// implementation per iteration, so that load from other processes on this
// shared 2-core machine hits all of them alike. The order is shuffled every
// iteration (a fixed or rotating order gives each one the same neighbour,
// whose leftovers - garbage, Redis state - then always land on it), and the
// ratio to each peer is the median of per-iteration ratios: a load spike that
// lands on one iteration moves both sides of that ratio.
func BenchmarkUncontendedInterleaved(b *testing.B) {
	_, prefix, lockers := benchLockers(b)
	ctx := context.Background()
	samples := map[string][]time.Duration{}
	ratios := map[string][]float64{}
	took := make(map[string]time.Duration, len(benchOrder))
	order := slices.Clone(benchOrder)
	rng := mrand.New(mrand.NewPCG(1, 2)) // the same sequence of orders in every run
	for b.Loop() {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, name := range order {
			key := prefix + name + ":interleaved"
			t0 := time.Now()
			unlock, err := lockers[name].lock(ctx, key, false)
			if err != nil {
				b.Fatal(err)
			}
			if err := unlock(); err != nil {
				b.Fatal(err)
			}
			took[name] = time.Since(t0)
		}
		for name, d := range took {
			samples[name] = append(samples[name], d)
			ratios[name] = append(ratios[name], float64(took["lockx"])/float64(d))
		}
	}
	for name, s := range samples {
		b.ReportMetric(float64(median(s))/float64(time.Microsecond), name+"-p50-us")
	}
	for _, peer := range benchOrder[1:] {
		b.ReportMetric(median(ratios[peer]), "lockx/"+peer)
	}
	b.ReportMetric(0, "ns/op")
}

func median[T int64 | float64 | time.Duration](s []T) T {
	s = slices.Clone(s)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkHandoff measures how long a released lock stays unused while
// waiters are queued: from the holder calling release to the next waiter
// holding it. Each round, `waiters` goroutines queue behind a gate holder and
// then pass the lock along once each, so every handoff goes to a different
// goroutine that was already waiting (no self re-acquisition).
// It also reports the Redis calls (round trips) spent per handoff,
// including the waiters' failed attempts: polling's real cost, and the
// round trip of a Redis PING measured in the same rounds (while the waiters
// are queued), the floor a handoff is compared with: one release round trip
// plus one acquire round trip is about 2 PINGs.
func BenchmarkHandoff(b *testing.B) {
	rdb, prefix, lockers := benchLockers(b)
	for _, waiters := range []int{8, 64} {
		for _, name := range benchOrder {
			l := lockers[name]
			b.Run(name+"/waiters="+itoa(waiters), func(b *testing.B) {
				before := benchCalls.n.Load()
				n := benchHandoff(b, rdb, l, prefix+name+":handoff:"+itoa(waiters), waiters)
				b.ReportMetric(float64(benchCalls.n.Load()-before)/float64(n), "redis-calls/handoff")
			})
		}
	}
}

func benchHandoff(b *testing.B, rdb redis.UniversalClient, l benchLocker, key string, waiters int) (handoffs int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var (
		mu      sync.Mutex
		samples []time.Duration
		pings   []time.Duration
		failed  atomic.Value
	)
	b.ResetTimer()
	for done := 0; done < b.N; done += waiters {
		b.StopTimer()
		gate, err := l.lock(ctx, key, false)
		if err != nil {
			b.Fatalf("gate: %v", err)
		}
		var lastRelease atomic.Int64
		var queued, wg sync.WaitGroup
		queued.Add(waiters)
		for range waiters {
			wg.Go(func() {
				queued.Done()
				unlock, err := l.lock(ctx, key, true)
				if err != nil {
					failed.Store(err)
					return
				}
				d := time.Duration(time.Now().UnixNano() - lastRelease.Load())
				mu.Lock()
				samples = append(samples, d)
				mu.Unlock()
				lastRelease.Store(time.Now().UnixNano())
				if err := unlock(); err != nil {
					failed.Store(err)
				}
			})
		}
		queued.Wait()
		// Let every waiter fail its first try and queue; meanwhile time PINGs
		// (not on the benchmark's calls counter: they are not lock traffic).
		settle := time.Now().Add(30 * time.Millisecond)
		for range 8 {
			t0 := time.Now()
			if err := rdb.Ping(ctx).Err(); err != nil {
				b.Fatalf("ping: %v", err)
			}
			pings = append(pings, time.Since(t0))
			time.Sleep(time.Millisecond)
		}
		benchCalls.n.Add(-8)
		time.Sleep(time.Until(settle))
		b.StartTimer()
		lastRelease.Store(time.Now().UnixNano())
		if err := gate(); err != nil {
			b.Fatalf("gate release: %v", err)
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	slices.Sort(samples)
	q := func(p float64) float64 {
		return float64(samples[int(p*float64(len(samples)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(0.50), "p50-handoff-ms")
	ping := float64(median(pings)) / float64(time.Millisecond)
	b.ReportMetric(ping, "p50-ping-ms")
	b.ReportMetric(q(0.50)/ping, "p50-handoff/ping")
	b.ReportMetric(q(0.90), "p90-handoff-ms")
	b.ReportMetric(q(1), "max-handoff-ms")

	b.ReportMetric(0, "ns/op") // ns/op mixes rounds and handoffs; the quantiles are the result
	return len(samples)
}
