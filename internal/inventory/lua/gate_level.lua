-- gateLevel: KEYS = gate, holds, leases. Returns {exists, gate, units in
-- holds whose lease has not ended}.
local g = redis.call('get', KEYS[1])
if not g then return {0, 0, 0} end
local held = 0
for _, no in ipairs(redis.call('zrangebyscore', KEYS[3], '(' .. now_ms(), '+inf')) do
  local f = parse(redis.call('hget', KEYS[2], no))
  if f[1] == 'L' then held = held + tonumber(f[3]) - tonumber(f[5]) end
end
return {1, tonumber(g), held}
