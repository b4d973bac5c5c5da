package inventory

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// soldOutCache is the fast path of a flash sale: once a product is seen
// with no stock, later buyers are turned away without the lock or the
// stock row. A Redis flag shares the fact between instances; each instance
// also trusts its own memory for a short time. Restocks and returns clear
// both, and a PUBLISH tells the other instances to forget theirs at once
// (their memory also expires on its own, so a lost message costs at most
// the cache time).
type soldOutCache struct {
	rdb     redis.UniversalClient
	prefix  string
	ttl     time.Duration
	mu      sync.Mutex
	until   map[int64]time.Time
	gen     map[int64]uint64 // bumped by every forget, so a slow is() cannot resurrect a cleared flag
	channel string
}

func newSoldOutCache(rdb redis.UniversalClient, prefix string, ttl time.Duration) *soldOutCache {
	return &soldOutCache{rdb: rdb, prefix: prefix, ttl: ttl, until: map[int64]time.Time{}, gen: map[int64]uint64{}, channel: prefix + "soldout:reset"}
}

func (c *soldOutCache) key(id int64) string { return c.prefix + "soldout:" + strconv.FormatInt(id, 10) }

func (c *soldOutCache) is(ctx context.Context, id int64) bool {
	c.mu.Lock()
	u, ok := c.until[id]
	gen := c.gen[id]
	c.mu.Unlock()
	if ok && time.Now().Before(u) {
		return true
	}
	n, err := c.rdb.Exists(ctx, c.key(id)).Result()
	if err != nil || n == 0 {
		return false // when in doubt, take the slow, exact path
	}
	c.remember(id, gen)
	return true
}

// remember trusts the flag locally, unless a clear arrived since gen was
// read (the flag seen in Redis may be the one that clear removed).
func (c *soldOutCache) remember(id int64, gen uint64) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	if c.gen[id] == gen {
		c.until[id] = time.Now().Add(c.ttl)
	}
	c.mu.Unlock()
}

// flagTTL bounds how long a stale flag can turn buyers away. Under the
// safe strategy the flag is set by a holder of the product's lock, so it
// cannot overtake a restock's or a return's clear (they hold the same lock);
// the lock-free lab strategies can set it late, and the TTL caps the damage.
// A sold-out product re-marks itself on the first request after expiry.
const flagTTL = 10 * time.Second

// mark records that the product was seen with no stock.
func (c *soldOutCache) mark(ctx context.Context, id int64) {
	c.mu.Lock()
	gen := c.gen[id]
	c.mu.Unlock()
	c.rdb.Set(ctx, c.key(id), "1", flagTTL)
	c.remember(id, gen)
}

func (c *soldOutCache) forget(id int64) {
	c.mu.Lock()
	delete(c.until, id)
	c.gen[id]++
	c.mu.Unlock()
}

func (c *soldOutCache) clear(ctx context.Context, id int64) {
	c.forget(id)
	ctx = context.WithoutCancel(ctx)
	c.rdb.Del(ctx, c.key(id))
	c.rdb.Publish(ctx, c.channel, strconv.FormatInt(id, 10))
}

// follow applies other instances' clears until ctx ends.
func (c *soldOutCache) follow(ctx context.Context, log *slog.Logger) {
	for ctx.Err() == nil {
		sub := c.rdb.Subscribe(ctx, c.channel)
		ch := sub.Channel()
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case m, ok := <-ch:
				if !ok {
					break loop
				}
				if id, err := strconv.ParseInt(m.Payload, 10, 64); err == nil {
					c.forget(id)
				}
			}
		}
		_ = sub.Close()
		if ctx.Err() == nil {
			log.Warn("sold-out channel closed; resubscribing")
			time.Sleep(time.Second)
		}
	}
}
