package inventory

import (
	"context"
	"errors"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The redis-gate strategy keeps a counter of admittable units in Redis and
// lets at most that many requests through to the locked path; the rest are
// turned away by one Lua call. Tokens are handed back when the locked path
// fails, so no unit is lost. The database's fenced conditional update still
// decides: the gate only saves work.

// gateTake: KEYS = gate; ARGV = quantity. -1 = not initialised, 0 = refused,
// 1 = admitted.
var gateTake = redis.NewScript(`
local v = redis.call('get', KEYS[1])
if not v then return -1 end
if tonumber(v) < tonumber(ARGV[1]) then return 0 end
redis.call('decrby', KEYS[1], ARGV[1])
return 1
`)

// gateGive: KEYS = gate; ARGV = quantity. Adds only to an initialised gate
// (an absent gate is rebuilt from the database when next needed).
var gateGive = redis.NewScript(`
if redis.call('exists', KEYS[1]) == 1 then return redis.call('incrby', KEYS[1], ARGV[1]) end
return -1
`)

func (s *Service) gateKey(id int64) string {
	return s.cfg.KeyPrefix + "gate:{" + strconv.FormatInt(id, 10) + "}"
}

// Admit lets a want through the gate before it queues for the product
// lock. It returns nil when admitted (always, for products whose strategy
// has no gate); ErrSoldOut or ErrInsufficientStock when the gate is empty
// and the database agrees; ErrBusy when the gate is empty but units are
// admitted and not committed yet. A want that was admitted and then not
// served (refused, failed) is given back with Readmit.
func (s *Service) Admit(ctx context.Context, productID, quantity int64) error {
	if s.StrategyOf(productID) != RedisGate {
		return nil
	}
	key := s.gateKey(productID)
	for range 2 {
		r, err := gateTake.Run(ctx, s.rdb, []string{key}, quantity).Int()
		if err != nil {
			return err
		}
		switch r {
		case 0:
			// Refused. Units may still be in flight (admitted, not
			// committed): that is "busy", not "sold out", until the
			// database says so.
			p, err := s.Get(ctx, productID)
			switch {
			case err != nil:
				return err
			case p.Stock <= 0:
				return ErrSoldOut
			case p.Stock < quantity:
				return ErrInsufficientStock
			}
			return ErrBusy
		case 1:
			return nil
		}
		// Not initialised (first use, or Redis lost it): seed from the database.
		p, err := s.Get(ctx, productID)
		if err != nil {
			return err
		}
		s.rdb.SetNX(ctx, key, p.Stock, 0)
	}
	return errors.New("inventory: gate could not be initialised")
}

// Readmit gives an admitted want's units back to the gate.
func (s *Service) Readmit(ctx context.Context, productID, quantity int64) {
	if s.StrategyOf(productID) == RedisGate {
		gateGive.Run(context.WithoutCancel(ctx), s.rdb, []string{s.gateKey(productID)}, quantity)
	}
}

// gateAdd gives units back to the gate (restock, cancellation).
func (s *Service) gateAdd(ctx context.Context, id, quantity int64) {
	if s.cfg.Strategy == RedisGate {
		gateGive.Run(context.WithoutCancel(ctx), s.rdb, []string{s.gateKey(id)}, quantity)
	}
}

// GateLevel reports the gate's counter, for the audit's Redis-vs-database
// check; ok is false when there is no gate for the product.
func (s *Service) GateLevel(ctx context.Context, id int64) (int64, bool, error) {
	if s.cfg.Strategy != RedisGate {
		return 0, false, nil
	}
	v, err := s.rdb.Get(ctx, s.gateKey(id)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	return v, err == nil, err
}
