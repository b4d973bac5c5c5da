-- gateReap: KEYS = gate, holds, leases, ended; ARGV = order number,
-- generation, units of the order's ledger row (-1: no order), keep ms.
-- Ends a hold whose lease ended and that nothing renewed since it was
-- listed; returns the units given back.
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
