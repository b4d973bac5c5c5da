package lockx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultWaitTimeout bounds the WAIT of Options.WaitReplicas.
const DefaultWaitTimeout = 100 * time.Millisecond

// ErrNotReplicated: with Options.WaitReplicas, fewer replicas than asked
// confirmed the acquire or refresh within WaitTimeout. An acquire that gets
// it has released what it took; a refresh that gets it has not extended the
// hold as far as the Lock is concerned (its validity keeps running out).
var ErrNotReplicated = errors.New("lockx: write not confirmed by enough replicas")

// durable is a Client whose acquire and refresh are followed by WAIT on the
// same connection of the master that owns the key. WAIT only counts writes
// made on its own connection, so both go in one pipeline to one node.
//
// What it buys: when WAIT says n replicas have the lock, a failover to one
// of them keeps it. What it does not: WAIT is not a transaction. The master
// applied the write before asking, so a master that dies before the replicas
// acknowledge still promoted a replica without the lock, and a failover may
// pick a replica that was not among the n. The fencing token checked by the
// storage is what keeps a second holder's write from counting.
type durable struct{ *Client }

// node is the master that owns key: the client itself for one server (or a
// Sentinel failover client), the slot's master for a Cluster.
func (d durable) node(ctx context.Context, key string) (*redis.Client, error) {
	switch r := d.rdb.(type) {
	case *redis.Client:
		return r, nil
	case *redis.ClusterClient:
		return r.MasterForKey(ctx, key)
	}
	return nil, fmt.Errorf("lockx: WaitReplicas needs a *redis.Client or *redis.ClusterClient, not %T", d.rdb)
}

// evalWait runs script then WAIT in one pipeline on key's master, loading
// the script body only when the node does not have it yet.
func (d durable) evalWait(ctx context.Context, s *redis.Script, keys []string, args ...any) (any, error) {
	node, err := d.node(ctx, keys[0])
	if err != nil {
		return nil, err
	}
	run := func(eval func(p redis.Pipeliner) *redis.Cmd) (any, int64, error) {
		var res *redis.Cmd
		var wait *redis.Cmd
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			res = eval(p)
			wait = p.Do(ctx, "WAIT", d.cfg.waitReplicas, max(1, d.cfg.waitTimeout.Milliseconds()))
			return nil
		})
		v, err := res.Result()
		if err != nil {
			return nil, 0, err
		}
		n, err := wait.Int64()
		return v, n, err
	}
	v, acked, err := run(func(p redis.Pipeliner) *redis.Cmd { return s.EvalSha(ctx, p, keys, args...) })
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		v, acked, err = run(func(p redis.Pipeliner) *redis.Cmd { return s.Eval(ctx, p, keys, args...) })
	}
	if err != nil {
		return nil, err
	}
	if acked < int64(d.cfg.waitReplicas) {
		return v, fmt.Errorf("%w: %d of %d within %v", ErrNotReplicated, acked, d.cfg.waitReplicas, d.cfg.waitTimeout)
	}
	return v, nil
}

func (d durable) tryAcquire(ctx context.Context, k keySet, token string, ttl time.Duration, reenter entry) (attempt, error) {
	mode := "n"
	if reenter {
		mode = "r"
	}
	v, err := d.evalWait(ctx, scriptAcquire, []string{k.lock, k.fence}, token, ttl.Milliseconds(), mode)
	if v == nil {
		return attempt{}, err
	}
	a, perr := parseAttempt(v, ttl)
	if perr != nil {
		return attempt{}, perr
	}
	if err != nil && a.count <= 0 {
		err = nil // nothing was taken: there was nothing to replicate
	}
	return a, err
}

func (d durable) refresh(ctx context.Context, k keySet, token string, ttl time.Duration) (bool, error) {
	v, err := d.evalWait(ctx, scriptRefresh, []string{k.lock}, token, ttl.Milliseconds())
	if v == nil {
		return false, err
	}
	if v != int64(1) {
		return false, nil // not held: nothing to replicate; the caller marks the hold lost
	}
	return true, err
}
