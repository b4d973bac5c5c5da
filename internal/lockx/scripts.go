package lockx

import "github.com/redis/go-redis/v9"

// The lock key is a hash {token: hold count, "#fence": fence}, like Redisson's
// RLock: the count makes re-entry atomic, the fence field lets anyone see which
// fence the current hold carries. An attempt that finds the lock held adds
// "#wanted", so the holder can tell someone waits (Lock.Wanted); the field
// goes with the hash at the release. Tokens are base32 text
// (crypto/rand.Text), so they never collide with "#fence" or "#wanted".
//
// Every script touches only KEYS that share one hash tag, so they run
// unchanged on Redis Cluster.

// scriptAcquire: KEYS = lock, fence; ARGV = token, ttl ms, mode.
// mode "n" takes a free lock: INCR the fence key, create the hash, set the TTL.
// mode "r" re-enters: only if token already holds the lock.
// A first entry that obtains the lock returns just its fence (an integer >= 1):
// the hot path builds no Lua table, which is a measurable share of the
// script's cost. Everything else returns {count, fence, pttl}: count 0 = held
// by someone else (pttl = their remaining TTL; the hold is marked wanted),
// -1 = re-entry refused because token no longer holds it, n >= 1 =
// re-entered (hold count n).
var scriptAcquire = redis.NewScript(`
local lock = KEYS[1]
if ARGV[3] == 'r' then
  local token, ttl = ARGV[1], tonumber(ARGV[2])
  if redis.call('hexists', lock, token) == 0 then return {-1, 0, 0} end
  local n = redis.call('hincrby', lock, token, 1)
  if redis.call('pttl', lock) < ttl then redis.call('pexpire', lock, ttl) end
  return {n, tonumber(redis.call('hget', lock, '#fence') or '0'), redis.call('pttl', lock)}
end
if redis.call('exists', lock) == 1 then
  redis.call('hset', lock, '#wanted', 1)
  return {0, 0, redis.call('pttl', lock)}
end
local f = redis.call('incr', KEYS[2])
redis.call('hset', lock, ARGV[1], 1, '#fence', f)
redis.call('pexpire', lock, ARGV[2])
return f
`)

// scriptRefresh: KEYS = lock; ARGV = token, ttl ms. Compare-and-pexpire.
var scriptRefresh = redis.NewScript(`
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('pexpire', KEYS[1], ARGV[2])
return 1
`)

// scriptWanted: KEYS = lock; ARGV = token. -1 when token does not hold the
// lock, else 1 when an attempt found it held during this hold, 0 when none did.
var scriptWanted = redis.NewScript(`
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return -1 end
return redis.call('hexists', KEYS[1], '#wanted')
`)

// scriptRelease: KEYS = lock; ARGV = token, channel. Compare-and-decrement;
// the last release deletes the key and wakes waiters through PUBLISH.
// Returns -1 when token does not hold the lock (nothing is touched), otherwise
// the remaining hold count (0 = deleted).
var scriptRelease = redis.NewScript(`
local n = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not n then return -1 end
if n > 1 then return redis.call('hincrby', KEYS[1], ARGV[1], -1) end
redis.call('del', KEYS[1])
redis.call('publish', ARGV[2], 'released')
return 0
`)

// scriptFenceSync (Redlock): KEYS = lock, fence; ARGV = token, fence.
// Raises this node's fence counter to the fence the quorum agreed on, while
// token still holds the node, so that any later quorum (which must intersect
// this one) counts above it.
var scriptFenceSync = redis.NewScript(`
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return 0 end
local f = tonumber(ARGV[2])
if tonumber(redis.call('get', KEYS[2]) or '0') < f then redis.call('set', KEYS[2], ARGV[2]) end
redis.call('hset', KEYS[1], '#fence', f)
return 1
`)
