package platform

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/shop/internal/ride"
)

// sharedTrips is a Redis client whose per-request calls (GET, and the
// EVAL/EVALSHA of the rate limiter) share round trips: a call made while
// maxTrips round trips are in flight waits in a queue, and the queue goes
// out as one pipeline when one of them is back, the way the order batch
// shares a lock hold. Nothing waits on purpose: a lone call goes out at
// once. Every other command goes straight to the client.
//
// A call whose context carries a ride (package ride: a request's marker
// read travelling with its rate-limit script) takes the ride's commands
// into the same pipeline, so the request waits for one reply, not two.
//
// Each caller waits no longer than its own context, and a call whose
// caller gave up before its turn is not sent. go-redis's automatic
// pipelining (v9.22+) would do the batching, but its calls run to the
// socket timeouts whatever the caller's deadline (measured: a GET with a
// 100 ms deadline against a stalled server returned after 4.1 s), and a
// request past its deadline must be answered 503 at once.
//
// At most maxTrips round trips are in flight, so stalled connections hold
// every per-request call of the instance until the socket timeouts (1 s,
// retried once) end them, not only their own. With one server (or a Sentinel
// group's master) a stall is the server's, which every call meets anyway.
// A Cluster is different (one shard down would stall the calls of all),
// so PerRequest does not share there. A pipeline that timed out is
// retried whole: a rate-limit call in it may then count twice, as a
// single call retried after a timeout may.
type sharedTrips struct {
	redis.UniversalClient

	mu      sync.Mutex
	queue   []*sharedCall
	running int // flusher goroutines draining queue, one round trip in flight each

	// builders are pipelines that only ever lay a command out (go-redis's
	// own arguments and key position), never sent: a new one per call
	// was four allocations of every rate-limit check.
	builders sync.Pool
}

// sharedCall is one queued command; done is closed once cmd holds its
// reply (or was dropped: its caller's context had ended).
type sharedCall struct {
	ctx     context.Context
	cmd     redis.Cmder
	along   *ride.Ride // commands sent in the same pipeline, before cmd; nil: none
	done    chan struct{}
	dropped bool // not sent: the caller's context had ended (set before done closes)
}

const (
	// maxTrips caps the shared round trips in flight at once. More share
	// less: four in flight committed 0.93x the orders of one (A/B, one
	// bench run, six alternating phases each).
	maxTrips = 1
	// maxSharedTrip caps the calls of one pipeline (each with its ride).
	maxSharedTrip = 256
	// maxSharedQueue caps the calls waiting for a round trip: past it (a
	// Redis that stopped answering while requests kept coming) a call
	// fails at once instead of queueing behind the backlog.
	maxSharedQueue = 16384
)

// errSharedQueueFull is the answer past maxSharedQueue.
var errSharedQueueFull = errors.New("redis: too many calls waiting for a round trip")

func newSharedTrips(c redis.UniversalClient) *sharedTrips {
	return &sharedTrips{UniversalClient: c}
}

// do sends cmd in the next shared round trip and returns the error to
// answer with instead of cmd's own: ctx's, or a full queue's. On an error,
// cmd may still be written later, so the caller must not return it.
func (s *sharedTrips) do(ctx context.Context, cmd redis.Cmder) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := &sharedCall{ctx: ctx, cmd: cmd, along: ride.Take(ctx), done: make(chan struct{})}
	s.mu.Lock()
	if len(s.queue) >= maxSharedQueue {
		s.mu.Unlock()
		return errSharedQueueFull
	}
	s.queue = append(s.queue, c)
	if s.running < maxTrips {
		s.running++
		go s.flush()
	}
	s.mu.Unlock()
	select {
	case <-c.done:
		if c.dropped {
			return ctx.Err()
		}
		if c.along != nil {
			c.along.Done()
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flush sends the queue, one pipeline per round trip, until it is empty.
func (s *sharedTrips) flush() {
	for {
		s.mu.Lock()
		q := s.queue
		if len(q) == 0 {
			s.queue = nil
			s.running--
			s.mu.Unlock()
			return
		}
		n := min(len(q), maxSharedTrip)
		s.queue = q[n:]
		s.mu.Unlock()
		s.send(q[:n])
	}
}

// send is one round trip for the calls of batch whose callers still wait.
// It runs until the latest of their deadlines (no caller left to answer
// after it), within the client's socket timeouts.
func (s *sharedTrips) send(batch []*sharedCall) {
	live := batch[:0:0]
	var last time.Time
	forever := false
	for _, c := range batch {
		if c.ctx.Err() != nil {
			c.dropped = true
			close(c.done)
			continue
		}
		live = append(live, c)
		if d, ok := c.ctx.Deadline(); !ok {
			forever = true
		} else if d.After(last) {
			last = d
		}
	}
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	if !forever {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, last)
		defer cancel()
	}
	if len(live) == 1 && live[0].along == nil {
		_ = s.UniversalClient.Process(ctx, live[0].cmd)
	} else {
		// Each command keeps its own reply or error (redis.Nil
		// included); the pipeline's error repeats the first of them.
		_, _ = s.UniversalClient.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, c := range live {
				if c.along != nil {
					for _, a := range c.along.Cmds() {
						_ = p.Process(ctx, a)
					}
				}
				_ = p.Process(ctx, c.cmd)
			}
			return nil
		})
	}
	for _, c := range live {
		close(c.done)
	}
}

// shared sends the command that build queues on a pipeline (so go-redis
// lays out its arguments and key position, as for any call), in a shared
// round trip; on an error it returns errored, a fresh command.
func shared[C redis.Cmder](s *sharedTrips, ctx context.Context, build func(redis.Pipeliner) C, errored func(error) C) C {
	p, _ := s.builders.Get().(redis.Pipeliner)
	if p == nil {
		p = s.UniversalClient.Pipeline()
	}
	cmd := build(p)
	p.Discard()
	s.builders.Put(p)
	if err := s.do(ctx, cmd); err != nil {
		return errored(err)
	}
	return cmd
}

// Get is GET in a shared round trip.
func (s *sharedTrips) Get(ctx context.Context, key string) *redis.StringCmd {
	return shared(s, ctx, func(p redis.Pipeliner) *redis.StringCmd { return p.Get(ctx, key) },
		func(err error) *redis.StringCmd { return redis.NewStringResult("", err) })
}

// Eval is EVAL in a shared round trip.
func (s *sharedTrips) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return shared(s, ctx, func(p redis.Pipeliner) *redis.Cmd { return p.Eval(ctx, script, keys, args...) }, erroredCmd)
}

// EvalSha is EVALSHA in a shared round trip.
func (s *sharedTrips) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return shared(s, ctx, func(p redis.Pipeliner) *redis.Cmd { return p.EvalSha(ctx, sha1, keys, args...) }, erroredCmd)
}

// EvalRO is EVAL_RO in a shared round trip.
func (s *sharedTrips) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return shared(s, ctx, func(p redis.Pipeliner) *redis.Cmd { return p.EvalRO(ctx, script, keys, args...) }, erroredCmd)
}

// EvalShaRO is EVALSHA_RO in a shared round trip.
func (s *sharedTrips) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return shared(s, ctx, func(p redis.Pipeliner) *redis.Cmd { return p.EvalShaRO(ctx, sha1, keys, args...) }, erroredCmd)
}

func erroredCmd(err error) *redis.Cmd { return redis.NewCmdResult(nil, err) }
