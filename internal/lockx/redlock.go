package lockx

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redlock takes locks on a majority of N independent Redis deployments (the
// Redlock algorithm). Each node may itself be any redis.UniversalClient.
//
// A hold is granted when at least N/2+1 nodes accepted it and validity =
// TTL - elapsed - drift is still positive. Fences: each node INCRs its own
// counter; the hold's fence is the maximum over the accepting nodes, and that
// maximum is then written back to every accepting node before Acquire
// returns. Because any two majorities share a node, a later hold counts above
// it: fences are monotonic as long as no node loses its data (run them with
// appendonly + fsync, or keep a crashed node out for one max TTL) and the
// Redlock timing assumptions hold. See doc.go for what Redlock cannot promise.
type Redlock struct {
	nodes     []*Client
	quorum    int
	cfg       config
	closed    chan struct{}
	closeOnce sync.Once
}

// NewRedlock returns a Redlock over nodes (use an odd number, 3 or 5).
// Metrics and Logger of o apply to the Redlock as a whole. Give the node
// clients a short DialTimeout and few DialerRetries: Refresh and Release wait
// for every node up to NodeTimeout, so a down node that fails fast costs less.
func NewRedlock(nodes []redis.UniversalClient, o Options) *Redlock {
	r := &Redlock{cfg: newConfig(o), quorum: len(nodes)/2 + 1, closed: make(chan struct{})}
	for _, n := range nodes {
		r.nodes = append(r.nodes, New(n, Options{Prefix: r.cfg.prefix, Logger: r.cfg.log}))
	}
	return r
}

// Acquire works like Client.Acquire, over a quorum of nodes.
func (r *Redlock) Acquire(ctx context.Context, key string, o AcquireOptions) (*Lock, error) {
	if len(r.nodes) == 0 {
		return nil, errors.New("lockx: redlock without nodes")
	}
	return acquire(ctx, r, key, o)
}

// Close stops the pub/sub connections of all nodes.
func (r *Redlock) Close() error {
	r.closeOnce.Do(func() { close(r.closed) })
	var errs []error
	for _, n := range r.nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}

// RaiseFence raises the fence counter of key on every node to at least
// atLeast; it succeeds when a quorum of nodes did.
func (r *Redlock) RaiseFence(ctx context.Context, key string, atLeast int64) error {
	var ok int
	var errs []error
	r.each(ctx, func(ctx context.Context, c *Client) nodeResult {
		return nodeResult{err: c.RaiseFence(ctx, key, atLeast)}
	}, func(res nodeResult) bool {
		if res.err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", res.node, res.err))
		} else {
			ok++
		}
		return false
	})
	if ok < r.quorum {
		return fmt.Errorf("lockx: redlock raise fence reached %d of %d nodes: %w", ok, len(r.nodes), errors.Join(errs...))
	}
	return nil
}

func (r *Redlock) conf() *config         { return &r.cfg }
func (r *Redlock) done() <-chan struct{} { return r.closed }

type nodeResult struct {
	node int
	a    attempt
	n    int64
	ok   bool
	err  error
}

// each runs fn on every node in parallel, each call bounded by NodeTimeout,
// and hands results to collect as they arrive until collect returns true.
// Calls still running then are not cancelled; the returned func waits for them.
func (r *Redlock) each(ctx context.Context, fn func(ctx context.Context, c *Client) nodeResult, collect func(nodeResult) bool) (wait func()) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.nodeTimeout)
	ch := make(chan nodeResult, len(r.nodes))
	var wg sync.WaitGroup
	for i, c := range r.nodes {
		wg.Go(func() {
			res := fn(ctx, c)
			res.node = i
			ch <- res
		})
	}
	go func() {
		wg.Wait()
		cancel()
	}()
	for range r.nodes {
		if collect(<-ch) {
			break
		}
	}
	return wg.Wait
}

func (r *Redlock) tryAcquire(ctx context.Context, k keySet, token string, ttl time.Duration, reenter entry) (attempt, error) {
	start := time.Now()
	var (
		won                []nodeResult
		held, gone, failed int
		minPTTL            time.Duration
		errs               []error
	)
	n := len(r.nodes)
	wait := r.each(ctx, func(ctx context.Context, c *Client) nodeResult {
		a, err := c.tryAcquire(ctx, k, token, ttl, reenter)
		return nodeResult{a: a, err: err}
	}, func(res nodeResult) bool {
		switch {
		case res.err != nil:
			failed++
			errs = append(errs, fmt.Errorf("node %d: %w", res.node, res.err))
		case res.a.count > 0:
			won = append(won, res)
		case res.a.count < 0:
			gone++
		default:
			held++
			if res.a.pttl > 0 && (minPTTL == 0 || res.a.pttl < minPTTL) {
				minPTTL = res.a.pttl
			}
		}
		// Stop as soon as the outcome is decided; late nodes are covered by
		// release/refresh, which act on every node by token.
		return len(won) >= r.quorum || n-(held+gone+failed) < r.quorum
	})

	fail := func() (attempt, error) {
		if !reenter {
			wait() // a straggler must not acquire after the release below
			r.releaseAll(ctx, k, token)
		}
		switch {
		case reenter == reentry && gone > 0:
			return attempt{count: -1}, nil
		case held > 0 || gone > 0:
			return attempt{pttl: minPTTL}, nil
		case ctx.Err() != nil:
			return attempt{}, ctx.Err()
		default:
			return attempt{}, fmt.Errorf("lockx: redlock quorum unreachable (need %d of %d nodes, %d failed): %w",
				r.quorum, n, failed, errors.Join(errs...))
		}
	}
	if len(won) < r.quorum {
		return fail()
	}
	var fence int64
	for _, w := range won {
		fence = max(fence, w.a.fence)
	}
	if !reenter {
		won = r.syncFence(ctx, k, token, fence, won)
		if len(won) < r.quorum {
			return fail()
		}
	}
	if ttl-time.Since(start)-r.cfg.drift(ttl) <= 0 {
		return fail()
	}
	return attempt{count: won[0].a.count, fence: fence}, nil
}

// syncFence raises the fence counter of every accepting node whose own INCR
// was below fence, and returns the nodes that still hold after that.
func (r *Redlock) syncFence(ctx context.Context, k keySet, token string, fence int64, won []nodeResult) []nodeResult {
	var behind []int
	for _, w := range won {
		if w.a.fence < fence {
			behind = append(behind, w.node)
		}
	}
	if len(behind) == 0 {
		return won
	}
	var mu sync.Mutex
	bad := map[int]bool{}
	var wg sync.WaitGroup
	sctx, cancel := context.WithTimeout(ctx, r.cfg.nodeTimeout)
	defer cancel()
	for _, i := range behind {
		wg.Go(func() {
			ok, err := scriptFenceSync.Run(sctx, r.nodes[i].rdb, []string{k.lock, k.fence}, token, fence).Int64()
			if err != nil || ok != 1 {
				mu.Lock()
				bad[i] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	out := won[:0:0]
	for _, w := range won {
		if !bad[w.node] {
			out = append(out, w)
		}
	}
	return out
}

func (r *Redlock) releaseAll(ctx context.Context, k keySet, token string) {
	r.each(context.WithoutCancel(ctx), func(ctx context.Context, c *Client) nodeResult {
		n, err := c.release(ctx, k, token)
		return nodeResult{n: n, err: err}
	}, func(nodeResult) bool { return false })
}

func (r *Redlock) refresh(ctx context.Context, k keySet, token string, ttl time.Duration) (bool, error) {
	start := time.Now()
	var ok, no int
	var errs []error
	r.each(ctx, func(ctx context.Context, c *Client) nodeResult {
		held, err := c.refresh(ctx, k, token, ttl)
		return nodeResult{ok: held, err: err}
	}, func(res nodeResult) bool {
		switch {
		case res.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", res.node, res.err))
		case res.ok:
			ok++
		default:
			no++
		}
		return false
	})
	switch {
	case ok >= r.quorum:
		return ttl-time.Since(start)-r.cfg.drift(ttl) > 0, nil
	case no > len(r.nodes)-r.quorum:
		return false, nil
	default:
		return false, fmt.Errorf("lockx: redlock refresh reached %d of %d nodes: %w", ok, len(r.nodes), errors.Join(errs...))
	}
}

func (r *Redlock) release(ctx context.Context, k keySet, token string) (int64, error) {
	var ok, no int
	remaining := int64(0)
	var errs []error
	r.each(ctx, func(ctx context.Context, c *Client) nodeResult {
		n, err := c.release(ctx, k, token)
		return nodeResult{n: n, err: err}
	}, func(res nodeResult) bool {
		switch {
		case res.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", res.node, res.err))
		case res.n >= 0:
			ok++
			remaining = max(remaining, res.n)
		default:
			no++
		}
		return false
	})
	switch {
	case ok >= r.quorum:
		return remaining, nil
	case no > len(r.nodes)-r.quorum:
		return -1, nil
	default:
		return 0, fmt.Errorf("lockx: redlock release reached %d of %d nodes: %w", ok, len(r.nodes), errors.Join(errs...))
	}
}

// wanted asks every node: wanted when any node saw an attempt, held
// (not -1) while a quorum says token holds it.
func (r *Redlock) wanted(ctx context.Context, k keySet, token string) (int64, error) {
	held, wanted := 0, false
	var errs []error
	r.each(ctx, func(ctx context.Context, c *Client) nodeResult {
		n, err := c.wanted(ctx, k, token)
		return nodeResult{n: n, err: err}
	}, func(res nodeResult) bool {
		switch {
		case res.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", res.node, res.err))
		case res.n >= 0:
			held++
			wanted = wanted || res.n == 1
		}
		return false
	})
	switch {
	case held < r.quorum && len(errs) > len(r.nodes)-r.quorum:
		return 0, fmt.Errorf("lockx: redlock wanted reached %d of %d nodes: %w", held, len(r.nodes), errors.Join(errs...))
	case held < r.quorum:
		return -1, nil
	case wanted:
		return 1, nil
	}
	return 0, nil
}

// watch subscribes w on every node: a release on any node wakes it.
func (r *Redlock) watch(k keySet, w *waiter) (<-chan struct{}, func(bool)) {
	ready := make(chan struct{})
	stopReady := make(chan struct{})
	var once sync.Once
	stops := make([]func(bool), 0, len(r.nodes))
	for _, c := range r.nodes {
		rd, stop := c.watch(k, w)
		stops = append(stops, stop)
		go func() {
			select {
			case <-rd:
				once.Do(func() { close(ready) })
			case <-stopReady:
			}
		}()
	}
	return ready, func(obtained bool) {
		close(stopReady)
		for _, s := range stops {
			s(obtained)
		}
	}
}
