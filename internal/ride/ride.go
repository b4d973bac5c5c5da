// Package ride lets a request's Redis reads travel with a round trip the
// request makes anyway. A seckill request makes two small Redis calls in a
// row, the rate-limit script and the processed-marker read; each is a wait
// for a reply and a wake-up after it, the costliest part of a small call.
// With the read riding along, the rate limiter's trip carries both and the
// request waits once.
//
// The ride goes through the context because the call it rides with is made
// inside a library (redis_rate) whose only per-call input is the context.
// Only a client that shares round trips (platform's PerRequest face on one
// server) takes rides; elsewhere a ride is never taken, and its owner sends
// the read itself.
package ride

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// A Ride is commands waiting for a round trip to travel with. Its owner
// reads their replies once Replied says they are in.
type Ride struct {
	cmds    []redis.Cmder
	taken   atomic.Bool
	replied atomic.Bool
}

// New is a ride for cmds, built and not sent.
func New(cmds ...redis.Cmder) *Ride { return &Ride{cmds: cmds} }

type key struct{}

// With returns ctx carrying r: the next round trip made with it (by a
// client that takes rides) carries r's commands too. A nil r is no ride.
func With(ctx context.Context, r *Ride) context.Context {
	if r == nil {
		return ctx
	}
	return context.WithValue(ctx, key{}, r)
}

// Take is for the client making a round trip with ctx: ctx's ride, taken
// (so no later trip carries it again), or nil when there is none or it was
// taken before. The taker sends Cmds in its trip and calls Done once their
// replies are in (a trip that failed too: each command then holds the
// error). A call that was never sent (its caller's context ended, or the
// taker's queue was full) leaves the ride taken and not replied, and the
// owner sends its commands itself.
func Take(ctx context.Context) *Ride {
	r, _ := ctx.Value(key{}).(*Ride)
	if r == nil || !r.taken.CompareAndSwap(false, true) {
		return nil
	}
	return r
}

// Cmds are the commands to send.
func (r *Ride) Cmds() []redis.Cmder { return r.cmds }

// Done says the commands' replies are in (each command holds its own reply
// or error).
func (r *Ride) Done() { r.replied.Store(true) }

// Replied reports whether the commands travelled and their replies are in;
// when not (no trip took them, or it failed), the owner must send them
// itself. A nil ride never replied.
func (r *Ride) Replied() bool { return r != nil && r.replied.Load() }
