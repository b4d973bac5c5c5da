-- queuedRelease: KEYS = the order's queued record; ARGV = the claim's value.
-- Deletes the record only while it is still this claim (a publish that was
-- not confirmed gives its claim up; a later claim is left alone).
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
