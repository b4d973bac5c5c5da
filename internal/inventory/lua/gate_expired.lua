-- gateExpired: KEYS = gate, holds, leases; ARGV = limit. Returns order
-- number, generation pairs of live holds whose lease ended.
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
