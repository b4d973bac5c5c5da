package platform

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// sharedTrips is a Redis client whose per-request calls (GET, and the
// EVAL/EVALSHA of the rate limiter) share round trips: a call made while
// another is in flight waits in a queue, and the queue goes out as one
// pipeline when the round trip in flight is back, the way the order batch
// shares a lock hold. Nothing waits on purpose: a lone call goes out at
// once. Every other command goes straight to the client.
//
// Each caller still waits no longer than its own context: go-redis's
// automatic pipelining (v9.22+) would do the batching, but its calls run to
// the socket timeouts whatever the caller's deadline (measured: a GET with
// a 100 ms deadline against a stalled server returned after 4.1 s), and a
// request past its deadline must be answered 503 at once.
type sharedTrips struct {
	redis.UniversalClient

	mu      sync.Mutex
	queue   []*sharedCall
	running bool // a flusher goroutine is draining queue
}

// sharedCall is one queued command; done is closed once cmd holds its
// reply.
type sharedCall struct {
	cmd  redis.Cmder
	done chan struct{}
}

// maxSharedTrip caps the commands of one pipeline.
const maxSharedTrip = 256

func newSharedTrips(c redis.UniversalClient) *sharedTrips {
	return &sharedTrips{UniversalClient: c}
}

// do sends cmd in the next shared round trip and reports whether it has
// its reply; false means ctx ended first (cmd may still be filled later,
// so the caller must not read it then).
func (s *sharedTrips) do(ctx context.Context, cmd redis.Cmder) bool {
	if ctx.Err() != nil {
		return false
	}
	c := &sharedCall{cmd: cmd, done: make(chan struct{})}
	s.mu.Lock()
	s.queue = append(s.queue, c)
	if !s.running {
		s.running = true
		go s.flush()
	}
	s.mu.Unlock()
	select {
	case <-c.done:
		return true
	case <-ctx.Done():
		return false
	}
}

// flush sends the queue, one pipeline per round trip, until it is empty.
// The round trips run on no caller's context (a caller that gave up does
// not fail the others'); the client's socket timeouts bound them.
func (s *sharedTrips) flush() {
	ctx := context.Background()
	for {
		s.mu.Lock()
		q := s.queue
		if len(q) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		n := min(len(q), maxSharedTrip)
		s.queue = q[n:]
		s.mu.Unlock()
		batch := q[:n]
		if len(batch) == 1 {
			_ = s.UniversalClient.Process(ctx, batch[0].cmd)
		} else {
			// Each command keeps its own reply or error (redis.Nil
			// included); the pipeline's error repeats the first of them.
			_, _ = s.UniversalClient.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, c := range batch {
					_ = p.Process(ctx, c.cmd)
				}
				return nil
			})
		}
		for _, c := range batch {
			close(c.done)
		}
	}
}

// Get is GET in a shared round trip.
func (s *sharedTrips) Get(ctx context.Context, key string) *redis.StringCmd {
	cmd := redis.NewStringCmd(ctx, "get", key)
	if !s.do(ctx, cmd) {
		out := redis.NewStringCmd(ctx, "get", key)
		out.SetErr(ctx.Err())
		return out
	}
	return cmd
}

// Eval is EVAL in a shared round trip.
func (s *sharedTrips) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "eval", script, keys, args)
}

// EvalSha is EVALSHA in a shared round trip.
func (s *sharedTrips) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "evalsha", sha1, keys, args)
}

// EvalRO is EVAL_RO in a shared round trip.
func (s *sharedTrips) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "eval_ro", script, keys, args)
}

// EvalShaRO is EVALSHA_RO in a shared round trip.
func (s *sharedTrips) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "evalsha_ro", sha1, keys, args)
}

// eval builds the command as go-redis does (name, script or digest, the
// number of keys, the keys, the arguments) and sends it shared.
func (s *sharedTrips) eval(ctx context.Context, name, scriptOrSha string, keys []string, args []any) *redis.Cmd {
	cmdArgs := make([]any, 3, 3+len(keys)+len(args))
	cmdArgs[0], cmdArgs[1], cmdArgs[2] = name, scriptOrSha, len(keys)
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	if len(args) == 1 { // one slice stands for its elements, as in go-redis
		switch a := args[0].(type) {
		case []string:
			for _, v := range a {
				cmdArgs = append(cmdArgs, v)
			}
			args = nil
		case []any:
			args = a
		}
	}
	cmdArgs = append(cmdArgs, args...)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	if !s.do(ctx, cmd) {
		out := redis.NewCmd(ctx, cmdArgs...)
		out.SetErr(ctx.Err())
		return out
	}
	return cmd
}
