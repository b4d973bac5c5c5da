package platform

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/shop/internal/ride"
	"github.com/seckill-lab/shop/internal/testenv"
)

// tripCounter counts round trips (a command alone, or a pipeline) and the
// commands they carried; commands skip reports true for are not counted.
type tripCounter struct {
	trips, cmds atomic.Int64
	skip        func(redis.Cmder) bool // nil: count all
}

func (h *tripCounter) count(cmds ...redis.Cmder) {
	n := int64(0)
	for _, c := range cmds {
		if h.skip == nil || !h.skip(c) {
			n++
		}
	}
	if n > 0 {
		h.trips.Add(1)
		h.cmds.Add(n)
	}
}

func (h *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}
func (h *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

// connSetup names what go-redis sends on a new connection (HELLO, CLIENT
// SETINFO), which is no call of a request.
func connSetup(c redis.Cmder) bool { return c.Name() == "hello" || c.Name() == "client" }

// TestSharedRoundTrips: 200 concurrent requests' GETs and rate-limit
// scripts, on the shared test server and on a fresh one, each get their
// own reply (a miss stays a miss, the limiter refuses past its burst, the
// script's EVAL fallback works on the server that never saw it), in fewer
// round trips than calls.
func TestSharedRoundTrips(t *testing.T) {
	t.Parallel()
	url, prefix := testenv.Redis(t)
	for _, raw := range []string{url, testenv.StartRedisServer(t).URL()} {
		r := openRedis(t, raw)
		if r.PerRequest() != r.UniversalClient {
			t.Fatal("before ShareRoundTrips, PerRequest is not the client")
		}
		r.ShareRoundTrips()
		count := &tripCounter{}
		r.AddHook(count)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := range 200 {
			if err := r.Set(ctx, fmt.Sprintf("%sshared:%d", prefix, i), i, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
		count.trips.Store(0)
		count.cmds.Store(0)
		lim := redis_rate.NewLimiter(r.PerRequest())
		start := make(chan struct{})
		errs := make(chan error, 400)
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() {
				<-start
				k := fmt.Sprintf("%sshared:%d", prefix, i)
				got, err := r.PerRequest().Get(ctx, k).Int()
				if err != nil || got != i {
					errs <- fmt.Errorf("GET %s = %d, %v; want %d", k, got, err, i)
				}
				if err := r.PerRequest().Get(ctx, k+":missing").Err(); !errors.Is(err, redis.Nil) {
					errs <- fmt.Errorf("GET of a missing key: err = %v, want redis.Nil", err)
				}
				// Each user's burst is 2: the third call is refused.
				for n := range 3 {
					res, err := lim.Allow(ctx, fmt.Sprintf("%sshared:user:%d", prefix, i), redis_rate.Limit{Rate: 1, Period: time.Minute, Burst: 2})
					switch {
					case err != nil:
						errs <- fmt.Errorf("rate limit: %w", err)
					case (res.Allowed == 1) != (n < 2):
						errs <- fmt.Errorf("rate limit call %d of user %d: allowed %d", n+1, i, res.Allowed)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("redis %q: %v", raw, err)
		}
		// 1,000 calls (some EVALSHAs answered NOSCRIPT and repeated as
		// EVAL); sharing must at least halve the round trips.
		if trips, cmds := count.trips.Load(), count.cmds.Load(); cmds < 1000 || trips > cmds/2 {
			t.Errorf("redis %q: %d calls in %d round trips, want at most half as many round trips", raw, cmds, trips)
		}
	}
}

// TestSharedRoundTripHonoursDeadline: against a server that never answers,
// a shared call returns when its caller's context ends, not after the
// socket timeouts (1 s, retried once), and a call on an ended context is
// not sent.
func TestSharedRoundTripHonoursDeadline(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { // read, never answer
				defer c.Close()
				b := make([]byte, 4096)
				for {
					if _, err := c.Read(b); err != nil {
						return
					}
				}
			}()
		}
	}()
	r, err := OpenRedis("redis://"+l.Addr().String()+"/0?protocol=2", "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	r.ShareRoundTrips()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			t0 := time.Now()
			err := r.PerRequest().Get(ctx, fmt.Sprintf("k%d", i)).Err()
			if took := time.Since(t0); !errors.Is(err, context.DeadlineExceeded) || took > 900*time.Millisecond {
				t.Errorf("GET on a stalled server: %v after %v, want the caller's deadline after 100 ms", err, took)
			}
		})
	}
	wg.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.PerRequest().EvalSha(ctx, "0000", []string{"k"}).Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("EVALSHA on an ended context: err = %v, want context.Canceled", err)
	}
}

// gateHook holds every round trip until open is closed, and records the
// keys of the GETs sent.
type gateHook struct {
	held chan struct{} // receives once per round trip held
	open chan struct{}
	mu   sync.Mutex
	keys map[string]bool // every GET's key sent
}

func (h *gateHook) sent(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		if a := c.Args(); len(a) == 2 && c.Name() == "get" {
			h.keys[fmt.Sprint(a[1])] = true
		}
	}
}

func (h *gateHook) hold() {
	select {
	case <-h.open:
		return
	default:
	}
	h.held <- struct{}{}
	<-h.open
}
func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.hold()
		h.sent(cmd)
		return next(ctx, cmd)
	}
}
func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.hold()
		h.sent(cmds...)
		return next(ctx, cmds)
	}
}

// TestSharedTripDropsCallersThatLeft: while every round trip that may be
// in flight is held, calls whose callers' deadlines pass return at their
// deadline and are never sent; the queue stops taking calls at its cap (an
// error at once, not a wait); once the trips are back, the callers still
// waiting get their replies.
func TestSharedTripDropsCallersThatLeft(t *testing.T) {
	t.Parallel()
	url, prefix := testenv.Redis(t)
	r := openRedis(t, url)
	if !r.ShareRoundTrips() {
		t.Fatal("ShareRoundTrips refused a single server")
	}
	gate := &gateHook{held: make(chan struct{}), open: make(chan struct{}), keys: map[string]bool{}}
	r.AddHook(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first := make(chan error, maxTrips)
	for i := range maxTrips {
		go func() { first <- r.PerRequest().Get(ctx, fmt.Sprintf("%sdrop:first:%d", prefix, i)).Err() }()
		<-gate.held // one more round trip out, held
	}

	var left sync.WaitGroup
	for i := range 10 {
		left.Go(func() {
			short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
			defer stop()
			if err := r.PerRequest().Get(short, fmt.Sprintf("%sdrop:left:%d", prefix, i)).Err(); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a call whose deadline passed in the queue: err = %v, want context.DeadlineExceeded", err)
			}
		})
	}
	left.Wait()
	waiting := make(chan error, maxSharedQueue)
	for i := range maxSharedQueue - 10 {
		go func() { waiting <- r.PerRequest().Get(ctx, fmt.Sprintf("%sdrop:wait:%d", prefix, i)).Err() }()
	}
	s := r.PerRequest().(*sharedTrips)
	for {
		s.mu.Lock()
		n := len(s.queue)
		s.mu.Unlock()
		if n == maxSharedQueue {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := r.PerRequest().Get(ctx, prefix+"drop:over").Err(); !errors.Is(err, errSharedQueueFull) {
		t.Errorf("a call past the queue's cap: err = %v, want errSharedQueueFull", err)
	}
	close(gate.open)
	for range maxTrips {
		if err := <-first; !errors.Is(err, redis.Nil) {
			t.Errorf("a held call: err = %v, want redis.Nil", err)
		}
	}
	for range maxSharedQueue - 10 {
		if err := <-waiting; !errors.Is(err, redis.Nil) {
			t.Fatalf("a waiting call: err = %v, want redis.Nil", err)
		}
	}
	// The held calls, then every waiting call; none of the ten that left.
	gate.mu.Lock()
	defer gate.mu.Unlock()
	if len(gate.keys) != maxTrips+maxSharedQueue-10 || !gate.keys[prefix+"drop:first:0"] {
		t.Errorf("%d GETs sent, want %d", len(gate.keys), maxTrips+maxSharedQueue-10)
	}
	for i := range 10 {
		if k := fmt.Sprintf("%sdrop:left:%d", prefix, i); gate.keys[k] {
			t.Errorf("GET %s was sent after its caller left", k)
		}
	}
}

// On a Cluster (one shard's outage would stall every shared round trip)
// and on the demo's in-process Redis, per-request calls are not shared.
func TestSharedTripsNotOnAClusterNorInProcess(t *testing.T) {
	t.Parallel()
	cluster := &Redis{UniversalClient: redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})}
	t.Cleanup(func() { _ = cluster.Close() })
	for name, r := range map[string]*Redis{"a Cluster": cluster, "the in-process Redis": openRedis(t, "")} {
		if r.ShareRoundTrips() || r.PerRequest() != r.UniversalClient {
			t.Errorf("%s shares round trips", name)
		}
	}
}

// TestSharedTripCarriesARide: a marker read riding on a rate-limit call's
// context travels in that call's round trip (one trip, both replies, a miss
// still a miss), once: a later call with the same context does not carry
// it again. A client that does not share round trips never takes a ride,
// and its owner sees it did not travel.
func TestSharedTripCarriesARide(t *testing.T) {
	t.Parallel()
	url, prefix := testenv.Redis(t)
	r := openRedis(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Set(ctx, prefix+"ride:hit", "S123", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	lim := redis_rate.NewLimiter(r.PerRequest())
	hit := redis.NewStringCmd(ctx, "get", prefix+"ride:hit")
	miss := redis.NewStringCmd(ctx, "get", prefix+"ride:miss")
	plain := ride.New(hit, miss)
	if _, err := lim.Allow(ride.With(ctx, plain), prefix+"ride:user", redis_rate.PerSecond(10)); err != nil {
		t.Fatal(err)
	}
	if plain.Replied() {
		t.Fatal("a client that does not share round trips took a ride")
	}

	r.ShareRoundTrips()
	count := &tripCounter{skip: connSetup}
	r.AddHook(count)
	lim = redis_rate.NewLimiter(r.PerRequest())
	along := ride.New(hit, miss)
	rctx := ride.With(ctx, along)
	res, err := lim.Allow(rctx, prefix+"ride:user", redis_rate.PerSecond(10))
	if err != nil || res.Allowed != 1 {
		t.Fatalf("Allow with a ride: %+v, %v", res, err)
	}
	if !along.Replied() {
		t.Fatal("the ride did not travel with the rate limit's trip")
	}
	if v, err := hit.Result(); err != nil || v != "S123" {
		t.Errorf("ridden GET of a marker = %q, %v; want S123", v, err)
	}
	if err := miss.Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("ridden GET of a missing key: err = %v, want redis.Nil", err)
	}
	if trips, cmds := count.trips.Load(), count.cmds.Load(); trips != 1 || cmds != 3 {
		t.Errorf("%d round trips carrying %d commands, want 1 carrying 3 (the script and two GETs)", trips, cmds)
	}
	if err := r.PerRequest().Get(rctx, prefix+"ride:hit").Err(); err != nil {
		t.Fatal(err)
	}
	if cmds := count.cmds.Load(); cmds != 4 {
		t.Errorf("a second call with the ride's context sent %d commands, want 1 (the ride goes once)", cmds-3)
	}
}
