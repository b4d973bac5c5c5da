-- queueHold: KEYS = holds, leases; ARGV = order number, generation, lease ms.
-- Lengthens the lease of a live hold of that generation to now + lease (never
-- shortens it). Returns 1 when it did, 0 when the hold is gone or not ours.
-- (gateLib, prepended in Go, gives now_ms and parse.)
local f = parse(redis.call('hget', KEYS[1], ARGV[1]))
if f[1] ~= 'L' or f[2] ~= ARGV[2] then return 0 end
redis.call('zadd', KEYS[2], 'GT', now_ms() + tonumber(ARGV[3]), ARGV[1])
return 1
