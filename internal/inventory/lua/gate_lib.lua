-- Shared by the gate's scripts (prepended to each): the Redis clock (one
-- clock for every instance), record parsing, giving units back, ending a
-- record.
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
