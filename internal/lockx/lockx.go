package lockx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Errors callers branch on. Transport failures (Redis down, timeouts) are
// returned wrapped and match neither ErrNotObtained nor ErrNotHeld, so
// "someone else has it" is never confused with "Redis is unreachable".
var (
	// ErrNotObtained: another owner holds the lock and it did not come free
	// within AcquireOptions.Wait (or before ctx ended).
	ErrNotObtained = errors.New("lockx: lock not obtained")
	// ErrNotHeld: the hold ended before the call (TTL expired, another owner
	// took over, the lease was declared lost, or the Lock was already released).
	ErrNotHeld = errors.New("lockx: lock not held")
	// ErrClosed: the Client or Redlock was closed.
	ErrClosed = errors.New("lockx: client closed")
	// ErrReleased is the context.Cause of Lock.Context after a normal Release.
	ErrReleased = errors.New("lockx: lock released")
)

// Defaults used when Options or AcquireOptions leave a field zero.
const (
	DefaultPrefix      = "lock:"
	DefaultTTL         = 30 * time.Second // Redisson's lockWatchdogTimeout
	DefaultDriftFactor = 0.01             // the Redlock paper's clock drift allowance
	DefaultMinBackoff  = 25 * time.Millisecond
	DefaultMaxBackoff  = 512 * time.Millisecond
	DefaultNodeTimeout = 50 * time.Millisecond
)

// Options configure a Client or a Redlock. The zero value is usable.
type Options struct {
	// Prefix is put in front of every lock key; the user key is wrapped in a
	// hash tag: Prefix "lock:" and key "product:7" give "lock:{product:7}" and
	// the fence counter "lock:{product:7}:fence". Keep braces out of Prefix.
	Prefix string
	// Metrics receives lock metrics; nil records nothing.
	Metrics *Metrics
	// Logger receives renewal failures and lost locks; nil discards.
	Logger *slog.Logger
	// DriftFactor is the share of the TTL assumed lost to clock drift when
	// computing how long a hold is valid (plus 2 ms). Default 0.01.
	DriftFactor float64
	// MinBackoff and MaxBackoff bound the jittered exponential re-try used
	// while waiting when no release message arrives (lost message, expiry).
	// Waiters are normally woken by pub/sub long before.
	MinBackoff, MaxBackoff time.Duration
	// NodeTimeout bounds each Redis call of one Redlock attempt. Redlock only.
	NodeTimeout time.Duration
	// WaitReplicas > 0 makes every acquire and refresh wait (Redis WAIT,
	// up to WaitTimeout, default 100 ms) until that many replicas have the
	// write, and fail with ErrNotReplicated otherwise, like Redisson's
	// replica-sync check. It narrows, but does not close, the window in
	// which a failover loses a lock: the fence is the guarantee. Off (0) by
	// default, and then it costs nothing. Client only.
	WaitReplicas int
	WaitTimeout  time.Duration
}

// AcquireOptions shape one acquisition.
type AcquireOptions struct {
	// TTL of the hold; DefaultTTL when zero. Minimum 1 ms.
	TTL time.Duration
	// Wait: 0 tries once; > 0 waits up to Wait for the lock to come free;
	// < 0 waits until ctx ends.
	Wait time.Duration
	// Watchdog renews the TTL every TTL/3 until the Lock is released, lost, or
	// the ctx given to Acquire ends.
	Watchdog bool
	// OnRenew, if set, is called by the watchdog after each renewal. It runs
	// on the watchdog goroutine: keep it short and do not Release from it.
	OnRenew func(validUntil time.Time)
}

type config struct {
	prefix                 string
	m                      *Metrics
	log                    *slog.Logger
	driftFactor            float64
	minBackoff, maxBackoff time.Duration
	nodeTimeout            time.Duration
	waitReplicas           int
	waitTimeout            time.Duration
}

func newConfig(o Options) config {
	c := config{
		prefix: o.Prefix, m: o.Metrics, log: o.Logger, driftFactor: o.DriftFactor,
		minBackoff: o.MinBackoff, maxBackoff: o.MaxBackoff, nodeTimeout: o.NodeTimeout,
		waitReplicas: o.WaitReplicas, waitTimeout: o.WaitTimeout,
	}
	if c.waitTimeout <= 0 {
		c.waitTimeout = DefaultWaitTimeout
	}
	if c.prefix == "" {
		c.prefix = DefaultPrefix
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.driftFactor <= 0 {
		c.driftFactor = DefaultDriftFactor
	}
	if c.minBackoff <= 0 {
		c.minBackoff = DefaultMinBackoff
	}
	if c.maxBackoff <= 0 {
		c.maxBackoff = DefaultMaxBackoff
	}
	if c.maxBackoff < c.minBackoff {
		c.maxBackoff = c.minBackoff
	}
	if c.nodeTimeout <= 0 {
		c.nodeTimeout = DefaultNodeTimeout
	}
	return c
}

// drift is the clock drift allowance of the Redlock paper: ttl*factor + 2 ms.
func (c *config) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.driftFactor) + 2*time.Millisecond
}

// keySet holds the Redis names derived from one user key.
type keySet struct {
	user, lock, fence, channel string
}

func (c *config) keys(user string) (keySet, error) {
	if user == "" {
		return keySet{}, errors.New("lockx: empty key")
	}
	if !hashTagged(c.prefix) {
		return keySet{}, fmt.Errorf("lockx: prefix %q has an empty hash tag; keep braces out of Prefix", c.prefix)
	}
	lock := c.prefix + "{" + user + "}"
	return keySet{user: user, lock: lock, fence: lock + ":fence", channel: lock + ":released"}, nil
}

// entry says what an attempt is: a new hold, or a re-entry of a hold the
// token already has (which never creates one).
type entry bool

const (
	newHold entry = false
	reentry entry = true
)

// engine is what the acquire loop and Lock need from a backend: one Redis
// (Client) or a quorum of independent ones (Redlock).
type engine interface {
	// tryAcquire runs one atomic attempt. count > 0: obtained (hold count),
	// 0: held by another (pttl = its remaining TTL when known), -1: re-entry
	// refused because token no longer holds the lock.
	tryAcquire(ctx context.Context, k keySet, token string, ttl time.Duration, reenter entry) (attempt, error)
	refresh(ctx context.Context, k keySet, token string, ttl time.Duration) (bool, error)
	// release returns the remaining hold count, or -1 when token did not hold it.
	release(ctx context.Context, k keySet, token string) (int64, error)
	// wanted returns -1 when token does not hold the lock, else 1 when an
	// attempt found it held during this hold, 0 when none did.
	wanted(ctx context.Context, k keySet, token string) (int64, error)
	// watch registers w for release notifications of k; ready closes once the
	// subscription is live. stop must be called exactly once.
	watch(k keySet, w *waiter) (ready <-chan struct{}, stop func(acquired bool))
	done() <-chan struct{}
	conf() *config
}

type attempt struct {
	count int64
	fence int64
	pttl  time.Duration
}

// Client takes locks on one Redis deployment (standalone, Sentinel or Cluster
// through redis.UniversalClient). It is safe for concurrent use; create one per
// process and share it, so that all waiters share one pub/sub connection.
type Client struct {
	rdb       redis.UniversalClient
	cfg       config
	hub       *hub
	closed    chan struct{}
	closeOnce sync.Once
}

// New returns a Client on rdb. The Client does not own rdb: Close leaves it open.
func New(rdb redis.UniversalClient, o Options) *Client {
	c := &Client{rdb: rdb, cfg: newConfig(o), closed: make(chan struct{})}
	c.hub = newHub(rdb, c.cfg.log)
	return c
}

// Acquire takes the lock on key. ctx scopes the hold, not just the wait: the
// watchdog renews until ctx ends, and Lock.Context derives from it. Bound the
// wait with AcquireOptions.Wait, not with a short ctx deadline.
//
// If ctx carries a Lock of this Client on the same key (see WithLock and
// Lock.Context), Acquire re-enters it: same token, same fence, one more
// Release needed.
func (c *Client) Acquire(ctx context.Context, key string, o AcquireOptions) (*Lock, error) {
	if c.cfg.waitReplicas > 0 {
		return acquire(ctx, durable{c}, key, o)
	}
	return acquire(ctx, c, key, o)
}

// Close stops the shared pub/sub connection. Waiting Acquire calls return
// ErrClosed; Locks already held keep working (Refresh, Release, watchdog).
func (c *Client) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.hub.close()
}

func (c *Client) conf() *config         { return &c.cfg }
func (c *Client) done() <-chan struct{} { return c.closed }

func (c *Client) watch(k keySet, w *waiter) (<-chan struct{}, func(bool)) {
	return c.hub.watch(k.channel, w)
}

func (c *Client) tryAcquire(ctx context.Context, k keySet, token string, ttl time.Duration, reenter entry) (attempt, error) {
	mode := "n"
	if reenter {
		mode = "r"
	}
	v, err := scriptAcquire.Run(ctx, c.rdb, []string{k.lock, k.fence}, token, ttl.Milliseconds(), mode).Result()
	if err != nil {
		return attempt{}, err
	}
	return parseAttempt(v, ttl)
}

// parseAttempt reads scriptAcquire's reply: a bare fence when a first entry
// obtained the lock, {count, fence, pttl} otherwise.
func parseAttempt(v any, ttl time.Duration) (attempt, error) {
	switch v := v.(type) {
	case int64:
		if v >= 1 {
			return attempt{count: 1, fence: v, pttl: ttl}, nil
		}
	case []any:
		if len(v) == 3 {
			var n [3]int64
			ok := true
			for i := range n {
				n[i], ok = v[i].(int64)
				if !ok {
					break
				}
			}
			if ok {
				return attempt{count: n[0], fence: n[1], pttl: time.Duration(n[2]) * time.Millisecond}, nil
			}
		}
	}
	return attempt{}, fmt.Errorf("lockx: unexpected acquire reply %v", v)
}

func (c *Client) refresh(ctx context.Context, k keySet, token string, ttl time.Duration) (bool, error) {
	n, err := scriptRefresh.Run(ctx, c.rdb, []string{k.lock}, token, ttl.Milliseconds()).Int64()
	return n == 1, err
}

func (c *Client) release(ctx context.Context, k keySet, token string) (int64, error) {
	return scriptRelease.Run(ctx, c.rdb, []string{k.lock}, token, k.channel).Int64()
}

func (c *Client) wanted(ctx context.Context, k keySet, token string) (int64, error) {
	return scriptWanted.Run(ctx, c.rdb, []string{k.lock}, token).Int64()
}

// hashTagged reports whether prefix keeps the lock and fence keys in one
// Cluster slot: an empty "{}" in the prefix would make Redis hash whole keys.
func hashTagged(prefix string) bool {
	i := strings.IndexByte(prefix, '{')
	if i < 0 {
		return true
	}
	j := strings.IndexByte(prefix[i+1:], '}')
	return j != 0
}
