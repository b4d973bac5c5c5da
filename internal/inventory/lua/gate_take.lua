-- gateTake: KEYS = gate, holds, leases, ended; ARGV = order number,
-- quantity, new generation, lease ms. Returns {code, generation, expired}:
-- code -1 = not initialised, 0 = refused (expired: leases that ended are
-- waiting to be reaped), 1 = admitted (generation '' = nothing taken: the
-- order exists already).
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
