-- gateGive: KEYS = gate; ARGV = quantity. Adds only to an initialised gate
-- (an absent gate is rebuilt from the database when next needed).
if redis.call('exists', KEYS[1]) == 1 then return redis.call('incrby', KEYS[1], ARGV[1]) end
return -1
