package inventory_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/shop/internal/inventory"
)

// onDel runs f before every DEL a Redis client sends.
type onDel struct{ f func() }

func (h onDel) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h onDel) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "del" {
			h.f()
		}
		return next(ctx, cmd)
	}
}
func (h onDel) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A switch into or out of redis-gate retires the gate counter after the
// strategy table is unlocked: StrategyOf, on every order's path, never
// waits for that Redis call.
func TestUseStrategyRetiresTheGateUnlocked(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.service(t, inventory.Config{Strategy: inventory.LockFence})
	id := f.product(t, s, 1)
	var dels, locked int
	f.RDB.AddHook(onDel{func() {
		dels++
		if s.StrategyTableLocked() {
			locked++
		}
	}})
	s.UseStrategy(id, inventory.RedisGate)
	s.UseStrategy(id, "")
	if dels != 2 || locked != 0 {
		t.Fatalf("%d gate counters retired, %d of them under the strategy table's lock; want 2, none", dels, locked)
	}
	if got := s.StrategyOf(id); got != inventory.LockFence {
		t.Fatalf("strategy after the switch back: %s", got)
	}
}
