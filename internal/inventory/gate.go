package inventory

import (
	"context"
	"crypto/rand"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The redis-gate strategy keeps a counter of admittable units in Redis and
// lets at most that many requests through to the locked path; the rest are
// turned away by one Lua call. The database's fenced conditional update
// still decides: the gate only saves work.
//
// Units taken from the gate are held under a lease, so a process that dies
// between taking them and committing cannot lose them for good. Per product
// (all keys share the product's {id} hash tag, so one script sees them all
// in Redis Cluster too):
//
//	gate:{id}         the counter of admittable units
//	gate:{id}:holds   hash: order number -> its hold record
//	gate:{id}:leases  sorted set: order number -> lease end (ms, Redis clock)
//	gate:{id}:ended   sorted set: order number -> when its ended record is forgotten
//
// A hold is per order number, not per request, because at most one order
// can ever exist per order number: concurrent requests for one number (a
// retry, a double click) share it. A live record is "L gen qty refs sold":
// units taken (the largest quantity asked), requests in flight, units sold
// (set when the one that created the order settles). When the last request
// settles, qty-sold go back to the gate. An ended record is "D" (the order
// exists: later requests for the number take nothing, they can only be
// repeats) or "R gen" (reaped: its units went back while no order existed).
//
// A lease that ends before its requests settle (the process died) is reaped
// by any instance, on a refusal and every SHOP_SWEEP_INTERVAL: the order's
// ledger row, written in the order's own transaction, says whether the
// units were sold; the rest go back. A holder that was only slow and
// commits after its hold was reaped (units given back, no order then)
// takes its units back from the gate when it settles; until then the gate
// admits too many, which the database refuses. The lease is long enough
// that this stays rare: see gateLease.
//
// Known limit: an ended "D" record is forgotten one lease after it ended.
// A request for that order number that still reaches the gate later (its
// processed marker and the database check both missed it) and whose
// process then dies is taken by the reaper for the one that sold: its
// units stay out of the gate. Such a request is a repeat that got past two
// checks and then lost its process within one round trip.

// gateLib is shared by the scripts: the Redis clock (one clock for every
// instance), record parsing, giving units back, ending a record.
const gateLib = `
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function parse(v)
  local f = {}
  if v then for w in string.gmatch(v, '%S+') do f[#f + 1] = w end end
  return f
end
local function give(n)
  if n ~= 0 and redis.call('exists', KEYS[1]) == 1 then redis.call('incrby', KEYS[1], n) end
end
local function finish(no, kind, now, keep)
  redis.call('zrem', KEYS[3], no)
  redis.call('hset', KEYS[2], no, kind)
  redis.call('zadd', KEYS[4], now + keep, no)
end
`

// gateTake: KEYS = gate, holds, leases, ended; ARGV = order number,
// quantity, new generation, lease ms. Returns {code, generation, expired}:
// code -1 = not initialised, 0 = refused (expired: leases that ended are
// waiting to be reaped), 1 = admitted (generation "" = nothing taken: the
// order exists already).
var gateTake = redis.NewScript(gateLib + `
local now = now_ms()
local old = redis.call('zrangebyscore', KEYS[4], '-inf', now, 'limit', 0, 32)
if #old > 0 then
  redis.call('hdel', KEYS[2], unpack(old))
  redis.call('zrem', KEYS[4], unpack(old))
end
local g = redis.call('get', KEYS[1])
if not g then return {-1, '', 0} end
local no, q = ARGV[1], tonumber(ARGV[2])
local f = parse(redis.call('hget', KEYS[2], no))
if f[1] == 'D' then return {1, '', 0} end
local gen, qty, refs, sold = ARGV[3], 0, 0, 0
if f[1] == 'L' then gen, qty, refs, sold = f[2], tonumber(f[3]), tonumber(f[4]), tonumber(f[5]) end
local need = math.max(q - qty, 0)
if sold > 0 then need = 0 end -- the order exists: this one can only be a repeat
if tonumber(g) < need then
  return {0, '', #redis.call('zrangebyscore', KEYS[3], '-inf', now, 'limit', 0, 1)}
end
if need > 0 then redis.call('decrby', KEYS[1], need) end
if f[1] ~= 'L' then redis.call('zrem', KEYS[4], no) end
redis.call('hset', KEYS[2], no, 'L ' .. gen .. ' ' .. (qty + need) .. ' ' .. (refs + 1) .. ' ' .. sold)
redis.call('zadd', KEYS[3], 'GT', now + tonumber(ARGV[4]), no)
return {1, gen, 0}
`)

// gateSettle: KEYS = gate, holds, leases, ended; ARGV = order number,
// generation, quantity, served (1/0), keep ms. Returns the units given back
// (negative: taken back).
var gateSettle = redis.NewScript(gateLib + `
local now = now_ms()
local no, gen, q, served, keep = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1', tonumber(ARGV[5])
local f = parse(redis.call('hget', KEYS[2], no))
if f[1] == 'D' or f[1] == nil then return 0 end
if f[2] ~= gen then
  -- Ours was reaped (its units given back) and a new request holds the
  -- number now. Sold after all: take our units back.
  if served then give(-q) return -q end
  return 0
end
if f[1] == 'R' then
  if served then
    give(-q)
    finish(no, 'D', now, keep)
    return -q
  end
  return 0
end
local qty, refs, sold = tonumber(f[3]), tonumber(f[4]) - 1, tonumber(f[5])
if served then sold = q end
if refs > 0 then
  redis.call('hset', KEYS[2], no, 'L ' .. gen .. ' ' .. qty .. ' ' .. refs .. ' ' .. sold)
  return 0
end
give(qty - sold)
if sold > 0 then
  finish(no, 'D', now, keep)
else
  redis.call('hdel', KEYS[2], no)
  redis.call('zrem', KEYS[3], no)
end
return qty - sold
`)

// gateLevelScript: KEYS = gate, holds, leases. Returns {exists, gate,
// units in holds whose lease has not ended}.
var gateLevelScript = redis.NewScript(gateLib + `
local g = redis.call('get', KEYS[1])
if not g then return {0, 0, 0} end
local held = 0
for _, no in ipairs(redis.call('zrangebyscore', KEYS[3], '(' .. now_ms(), '+inf')) do
  local f = parse(redis.call('hget', KEYS[2], no))
  if f[1] == 'L' then held = held + tonumber(f[3]) - tonumber(f[5]) end
end
return {1, tonumber(g), held}
`)

func (s *Service) gateKey(id int64) string {
	return s.cfg.KeyPrefix + "gate:{" + strconv.FormatInt(id, 10) + "}"
}

// gateKeys are the gate and its hold keys, in the scripts' KEYS order.
func (s *Service) gateKeys(id int64) []string {
	g := s.gateKey(id)
	return []string{g, g + ":holds", g + ":leases", g + ":ended"}
}

// gateLease is how long admitted units stay held for their request before
// any instance may reap them. A batch takes its wants' units just before
// it waits for the product lock (LockWait), holds it (renewed past LockTTL
// while the batch runs) and settles right after it released the lock,
// so a live holder settles within a few lock waits and TTLs. The default is
// ten times that, and at least a minute: reaping a live holder's units only
// lets the gate admit too many for a moment (the database still refuses
// them, and the holder takes its units back when it settles), while a dead
// holder's units wait the whole lease to come back.
func (s *Service) gateLease() time.Duration {
	if s.cfg.GateLease > 0 {
		return s.cfg.GateLease
	}
	return max(time.Minute, 10*(s.cfg.LockWait+s.cfg.LockTTL))
}

// admission is what the gate took for one want of a deduction; gen "":
// nothing (the product has no gate, or the order exists already).
type admission struct {
	Want
	gen string // the hold's generation
}

// admitAll lets a batch's wants through the gate in one round trip: the
// scripts run in arrival order, as one call per want would. A want that
// pass cannot decide (the gate not seeded yet, the script not loaded in
// Redis, a refusal while leases of dead holders wait to be reaped) is
// asked again alone (admit), which seeds, loads and reaps; a refusal is
// explained by the database (refusal), once per batch when it is sold out.
// It returns what the gate took for each want and each want's refusal; err
// when Redis or the database could not answer (what was taken before it is
// in taken, to settle).
func (s *Service) admitAll(ctx context.Context, productID int64, wants []Want) (taken []admission, refused []error, err error) {
	taken, refused = make([]admission, len(wants)), make([]error, len(wants))
	keys := s.gateKeys(productID)
	gen, lease := rand.Text(), s.gateLease().Milliseconds()
	cmds := make([]*redis.Cmd, len(wants))
	pipe := s.rdb.Pipeline()
	for i, w := range wants {
		cmds[i] = gateTake.EvalSha(ctx, pipe, keys, w.OrderNo, w.Quantity, gen+strconv.Itoa(i), lease)
	}
	_, _ = pipe.Exec(ctx) // each command's own error is read below
	soldOut := false
	for i, w := range wants {
		taken[i].Want = w
		r, err := cmds[i].Slice()
		var rerr redis.Error
		if err != nil && !errors.As(err, &rerr) {
			// Lost on the way: like a failed admit, units it may have
			// taken come back when their lease ends.
			return taken, refused, err
		}
		var code, expired int64
		if err == nil {
			code, _ = r[0].(int64)
			expired, _ = r[2].(int64)
		}
		switch {
		case err == nil && code == 1:
			taken[i].gen, _ = r[1].(string)
			continue
		case err == nil && code == 0 && expired == 0 && soldOut:
			refused[i] = ErrSoldOut
			continue
		case err == nil && code == 0 && expired == 0:
			refused[i], err = s.refusal(ctx, productID, w.Quantity)
		default:
			taken[i], refused[i], err = s.admit(ctx, productID, w)
		}
		if err != nil {
			return taken, refused, err
		}
		soldOut = soldOut || errors.Is(refused[i], ErrSoldOut)
	}
	return taken, refused, nil
}

// admit lets want w for productID through the gate (redis-gate) alone,
// for admitAll. It returns what the gate took
// (settle it once the want's fate is known); or, refused, ErrSoldOut or
// ErrInsufficientStock when the gate is empty and the database agrees,
// ErrBusy when the gate is empty but units are admitted and not committed
// yet; or err, when Redis or the database could not answer.
func (s *Service) admit(ctx context.Context, productID int64, w Want) (a admission, refused, err error) {
	a.Want = w
	keys := s.gateKeys(productID)
	gen := rand.Text()
	reaped := false
	for range 3 {
		r, err := gateTake.Run(ctx, s.rdb, keys, w.OrderNo, w.Quantity, gen, s.gateLease().Milliseconds()).Slice()
		if err != nil {
			return a, nil, err
		}
		switch code, _ := r[0].(int64); code {
		case 1:
			a.gen, _ = r[1].(string)
			return a, nil, nil
		case 0:
			if expired, _ := r[2].(int64); expired > 0 && !reaped {
				// Units of a dead holder may be waiting: bring them back and ask again.
				reaped = true
				if _, err := s.reap(ctx, productID); err != nil {
					return a, nil, err
				}
				continue
			}
			// Refused. Units may still be in flight (admitted, not
			// committed): that is "busy", not "sold out", until the
			// database says so.
			refused, err := s.refusal(ctx, productID, w.Quantity)
			return a, refused, err
		}
		// Not initialised (first use, or Redis lost it): seed from the database.
		if err := s.seedGate(ctx, productID); err != nil {
			return a, nil, err
		}
	}
	return a, nil, errors.New("inventory: gate could not be initialised")
}

// seedGate sets an absent gate to the product's stock. It reads the row and
// sets the gate under the product lock: stock that comes back (a restock, a
// return) is added to the gate under that lock after its commit, and finds
// no gate to add to before the seed, so a return committed between an
// unlocked read and the seed would be missing from the gate for good, its
// buyers told busy.
func (s *Service) seedGate(ctx context.Context, productID int64) error {
	return s.locked(ctx, productID, s.cfg.LockWait, noLabPause, func(ctx context.Context, _ Fence) error {
		p, err := s.Get(ctx, productID)
		if err != nil {
			return err
		}
		if s.seeding != nil {
			s.seeding()
		}
		return s.rdb.SetNX(ctx, s.gateKey(productID), p.Stock, 0).Err()
	})
}

// refusal is why a want the gate turned away is refused (err: the
// database could not say). A product found sold out goes into the sold-out
// book here: no batch will see the empty row (the one that took the last
// units wrote without reading it).
func (s *Service) refusal(ctx context.Context, productID, quantity int64) (refused, err error) {
	gen := s.soldOut.generation(productID)
	p, err := s.Get(ctx, productID)
	switch {
	case err != nil:
		return nil, err
	case p.Stock <= 0:
		s.soldOut.learn(productID, gen, p.Version)
		return ErrSoldOut, nil
	case p.Stock < quantity:
		return ErrInsufficientStock, nil
	}
	return ErrBusy, nil
}

// settle ends an admission once its want's fate is known: served (its
// order was committed) keeps the units sold; not served gives them back to
// the gate. An admission that took nothing settles without a call.
func (s *Service) settle(ctx context.Context, productID int64, a admission, served bool) {
	if a.gen == "" {
		return
	}
	ctx = context.WithoutCancel(ctx)
	err := gateSettle.Run(ctx, s.rdb, s.gateKeys(productID), a.OrderNo, a.gen, a.Quantity, boolArg(served), s.gateLease().Milliseconds()).Err()
	if err != nil {
		s.log.Warn("gate hold not settled (it is reaped when its lease ends)", "product_id", productID, "order_no", a.OrderNo, "err", err)
	}
}

func boolArg(b bool) int {
	if b {
		return 1
	}
	return 0
}

// gateAdd gives units back to the gate (restock, cancellation), whatever
// strategy this instance uses for the product: the gate may belong to
// another instance (a lab switch is per process), and an absent gate is
// left alone.
func (s *Service) gateAdd(ctx context.Context, id, quantity int64) {
	gateGive.Run(context.WithoutCancel(ctx), s.rdb, []string{s.gateKey(id)}, quantity)
}

// gateGive: KEYS = gate; ARGV = quantity. Adds only to an initialised gate
// (an absent gate is rebuilt from the database when next needed).
var gateGive = redis.NewScript(`
if redis.call('exists', KEYS[1]) == 1 then return redis.call('incrby', KEYS[1], ARGV[1]) end
return -1
`)

// GateLevel reports, for the audit's Redis-vs-database check (R1), the
// gate's counter and the units held for requests whose lease has not
// ended, read at one instant; ok is false when there is no gate for the
// product (a gate exists only while redis-gate deducts the product: a lab
// switch retires it, see UseStrategy). Units in holds whose lease ended are
// in neither: until a reaper brings them back they are lost.
func (s *Service) GateLevel(ctx context.Context, id int64) (units, held int64, ok bool, err error) {
	k := s.gateKeys(id)
	r, err := gateLevelScript.Run(ctx, s.rdb, k[:3]).Int64Slice()
	if err != nil {
		return 0, 0, false, err
	}
	return r[1], r[2], r[0] == 1, nil
}
