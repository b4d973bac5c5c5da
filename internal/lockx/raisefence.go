package lockx

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// scriptRaiseFence: KEYS = fence; ARGV = floor. Raises the counter to floor
// when it is below (never lowers it).
var scriptRaiseFence = redis.NewScript(`
if tonumber(redis.call('get', KEYS[1]) or '0') < tonumber(ARGV[1]) then
  redis.call('set', KEYS[1], ARGV[1])
  return 1
end
return 0
`)

// RaiseFence makes the next fence of key greater than floor. Storage that
// rejected a write for a stale fence calls it with the highest fence it has
// accepted: fences live in Redis, and a Redis that lost its data (restart
// without persistence, FLUSHALL, failover to a lagging replica) would
// otherwise hand out fences the storage refuses forever. Raising the counter
// is always safe: it can only make later fences larger.
func (c *Client) RaiseFence(ctx context.Context, key string, floor int64) error {
	k, err := c.cfg.keys(key)
	if err != nil {
		return err
	}
	if err := scriptRaiseFence.Run(ctx, c.rdb, []string{k.fence}, floor).Err(); err != nil {
		return fmt.Errorf("lockx: raise fence %q: %w", key, err)
	}
	return nil
}
