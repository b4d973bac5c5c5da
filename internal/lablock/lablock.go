// Package lablock is the `shop lab lock` command: it takes a lockx lock,
// holds it, releases it, and prints one JSON line per event, so several
// processes (and SIGSTOP) can be pointed at one Redis to watch mutual
// exclusion, fencing and loss detection at work.
package lablock

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/shop/internal/lockx"
)

// Event is one JSON line on stdout. Events: acquired, reentered, renewed,
// lost, unwound (a nested hold released), released, release_failed,
// not_obtained, error.
type Event struct {
	Event string `json:"event"`
	Key   string `json:"key"`
	PID   int    `json:"pid"`
	At    string `json:"at"` // RFC 3339 with nanoseconds, when the event was seen
	Token string `json:"token,omitempty"`
	Fence int64  `json:"fence,omitempty"`
	Depth int    `json:"depth,omitempty"`
	// ValidUntil: renewed, acquired — until when the hold is guaranteed.
	ValidUntil string `json:"valid_until,omitempty"`
	// HeldUntil: released — taken just before Release was sent, so
	// [acquired.at, released.held_until] lies inside the real hold.
	HeldUntil string `json:"held_until,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// ErrLost is returned by Run when the hold was lost before release.
var ErrLost = errors.New("lablock: lock lost before release")

// Run implements `shop lab lock --key K --ttl 2s --hold 5s [--watchdog]
// [--reentrant-depth N] [--wait 10s] [--prefix lock:]`. args are the flags
// (a leading "lock" is skipped). It returns nil only when the hold was
// released cleanly.
func Run(ctx context.Context, rdb redis.UniversalClient, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "lock" {
		args = args[1:]
	}
	fs := flag.NewFlagSet("shop lab lock", flag.ContinueOnError)
	fs.SetOutput(stderr)
	key := fs.String("key", "", "lock key (required), e.g. product:7")
	ttl := fs.Duration("ttl", 2*time.Second, "lock TTL")
	hold := fs.Duration("hold", 5*time.Second, "how long to hold the lock")
	wait := fs.Duration("wait", 10*time.Second, "how long to wait for the lock (0 = try once)")
	watchdog := fs.Bool("watchdog", false, "renew the TTL every ttl/3 while holding")
	depth := fs.Int("reentrant-depth", 1, "take the lock this many times, nested (re-entry)")
	prefix := fs.String("prefix", lockx.DefaultPrefix, "Redis key prefix")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *key == "":
		return errors.New("lablock: --key is required")
	case *depth < 1:
		return errors.New("lablock: --reentrant-depth must be >= 1")
	case *ttl < time.Millisecond:
		return errors.New("lablock: --ttl must be >= 1ms")
	}

	out := &printer{w: stdout, key: *key, pid: os.Getpid()}
	c := lockx.New(rdb, lockx.Options{Prefix: *prefix})
	defer c.Close()

	l, err := c.Acquire(ctx, *key, lockx.AcquireOptions{
		TTL: *ttl, Wait: *wait, Watchdog: *watchdog,
		OnRenew: func(until time.Time) {
			out.print(Event{Event: "renewed", ValidUntil: until.Format(time.RFC3339Nano)})
		},
	})
	if err != nil {
		name := "error"
		if errors.Is(err, lockx.ErrNotObtained) {
			name = "not_obtained"
		}
		out.print(Event{Event: name, Reason: err.Error()})
		return err
	}
	out.print(Event{Event: "acquired", Token: l.Token(), Fence: l.Fence().Number, Depth: 1,
		ValidUntil: l.ValidUntil().Format(time.RFC3339Nano)})

	nested := []*lockx.Lock{l}
	for d := 2; d <= *depth; d++ {
		in, err := c.Acquire(nested[len(nested)-1].Context(), *key, lockx.AcquireOptions{TTL: *ttl})
		if err != nil {
			out.print(Event{Event: "error", Depth: d, Reason: err.Error()})
			break
		}
		nested = append(nested, in)
		out.print(Event{Event: "reentered", Token: in.Token(), Fence: in.Fence().Number, Depth: in.Depth()})
	}

	t := time.NewTimer(*hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-l.Lost():
	case <-ctx.Done():
	}
	lost := false
	select {
	case <-l.Lost():
		lost = true
		out.print(Event{Event: "lost", Fence: l.Fence().Number, Reason: context.Cause(l.Context()).Error()})
	default:
	}

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for i := len(nested) - 1; i >= 1; i-- {
		if err := nested[i].Release(rctx); err != nil {
			out.print(Event{Event: "release_failed", Depth: i + 1, Reason: err.Error()})
		} else {
			out.print(Event{Event: "unwound", Depth: i + 1})
		}
	}
	heldUntil := time.Now()
	err = l.Release(rctx)
	switch {
	case err == nil:
		out.print(Event{Event: "released", Fence: l.Fence().Number, HeldUntil: heldUntil.Format(time.RFC3339Nano)})
		return nil
	case errors.Is(err, lockx.ErrNotHeld):
		if !lost {
			out.print(Event{Event: "lost", Fence: l.Fence().Number, Reason: err.Error()})
		}
		out.print(Event{Event: "release_failed", Fence: l.Fence().Number, Reason: err.Error()})
		return fmt.Errorf("%w: %w", ErrLost, err)
	default:
		out.print(Event{Event: "release_failed", Fence: l.Fence().Number, Reason: err.Error()})
		return err
	}
}

type printer struct {
	mu  sync.Mutex
	w   io.Writer
	key string
	pid int
}

func (p *printer) print(e Event) {
	e.Key, e.PID = p.key, p.pid
	e.At = time.Now().Format(time.RFC3339Nano)
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = json.NewEncoder(p.w).Encode(e)
}
