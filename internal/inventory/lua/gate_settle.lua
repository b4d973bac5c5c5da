-- gateSettle: KEYS = gate, holds, leases, ended; ARGV = order number,
-- generation, quantity, served (1/0), keep ms. Returns the units given back
-- (negative: taken back).
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
