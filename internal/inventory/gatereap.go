package inventory

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// gateExpired: KEYS = gate, holds, leases; ARGV = limit. Returns order
// number, generation pairs of live holds whose lease ended.
var gateExpired = redis.NewScript(gateLib + `
local out = {}
for _, no in ipairs(redis.call('zrangebyscore', KEYS[3], '-inf', now_ms(), 'limit', 0, tonumber(ARGV[1]))) do
  local f = parse(redis.call('hget', KEYS[2], no))
  if f[1] == 'L' then
    out[#out + 1] = no
    out[#out + 1] = f[2]
  else
    redis.call('zrem', KEYS[3], no)
  end
end
return out
`)

// gateReap: KEYS = gate, holds, leases, ended; ARGV = order number,
// generation, units of the order's ledger row (-1: no order), keep ms.
// Ends a hold whose lease ended and that nothing renewed since it was
// listed; returns the units given back.
var gateReap = redis.NewScript(gateLib + `
local now = now_ms()
local no = ARGV[1]
local f = parse(redis.call('hget', KEYS[2], no))
if f[1] ~= 'L' or f[2] ~= ARGV[2] then return 0 end
local lease = redis.call('zscore', KEYS[3], no)
if lease and tonumber(lease) > now then return 0 end
local qty, sold, ordered = tonumber(f[3]), tonumber(f[5]), tonumber(ARGV[3])
if sold == 0 and ordered >= 0 then sold = math.min(ordered, qty) end
give(qty - sold)
if sold > 0 then finish(no, 'D', now, tonumber(ARGV[4])) else finish(no, 'R ' .. f[2], now, tonumber(ARGV[4])) end
return qty - sold
`)

// reap ends the holds of productID whose lease ended: the units of a want
// whose order the ledger shows stay sold, the rest go back to the gate. It
// returns the units given back.
func (s *Service) reap(ctx context.Context, productID int64) (int64, error) {
	keys := s.gateKeys(productID)
	pairs, err := gateExpired.Run(ctx, s.rdb, keys[:3], 100).StringSlice()
	if err != nil || len(pairs) == 0 {
		return 0, err
	}
	nos := make([]string, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		nos = append(nos, pairs[i])
	}
	// The order's ledger row is written in the order's transaction: it is
	// there exactly when the want was served.
	var rows []LedgerRow
	err = s.db.WithContext(ctx).Select("order_no", "delta").
		Where("order_no IN ? AND reason = ? AND product_id = ?", nos, ReasonOrder, productID).Find(&rows).Error
	if err != nil {
		return 0, err
	}
	sold := make(map[string]int64, len(rows))
	for _, r := range rows {
		sold[*r.OrderNo] = -r.Delta
	}
	var given int64
	for i := 0; i < len(pairs); i += 2 {
		units, ok := sold[pairs[i]]
		if !ok {
			units = -1
		}
		n, err := gateReap.Run(ctx, s.rdb, keys, pairs[i], pairs[i+1], units, s.gateLease().Milliseconds()).Int64()
		if err != nil {
			return given, err
		}
		given += n
	}
	s.log.Info("gate: holds whose lease ended were reaped", "product_id", productID, "holds", len(nos), "units_returned", given)
	return given, nil
}

// RunGateReaper reaps the gate holds whose lease ended, of every product,
// every interval until ctx ends (0: never; a refusal still reaps its
// product), while this instance deducts any product by redis-gate. Any
// instance may reap any product: a reap is decided per hold, atomically, in
// Redis, and a product without a gate has no holds.
func (s *Service) RunGateReaper(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.reapAll(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("gate reaper round failed (retried next round)", "err", err)
		}
	}
}

// reapAll reaps every product once.
func (s *Service) reapAll(ctx context.Context) error {
	if !s.anyGated() {
		return nil
	}
	for after := int64(0); ; {
		ps, err := s.List(ctx, after, 500)
		if err != nil || len(ps) == 0 {
			return err
		}
		for _, p := range ps {
			if _, err := s.reap(ctx, p.ID); err != nil {
				return err
			}
		}
		after = ps[len(ps)-1].ID
	}
}

// anyGated reports whether any product may be deducted by redis-gate here.
func (s *Service) anyGated() bool {
	if s.cfg.Strategy == RedisGate || s.cfg.Queued {
		return true
	}
	s.labMu.RLock()
	defer s.labMu.RUnlock()
	for _, name := range s.labStrategy {
		if name == RedisGate {
			return true
		}
	}
	return false
}
