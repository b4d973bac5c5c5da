// Package lockx is a Redis distributed lock that stays correct under process
// pauses, crashes and contention, with fencing tokens for the cases where no
// lock can be.
//
// # Guarantees
//
//   - Acquire is one Lua script: it creates the lock hash, sets its TTL and
//     INCRs the fence counter atomically (never SETNX then EXPIRE). The owner
//     token is 128 bits from crypto/rand.
//   - Release and Refresh compare the token inside a script: a holder whose
//     lock expired and passed on gets ErrNotHeld and touches nothing.
//   - Waiting is woken by the release itself (PUBLISH on a per-key channel,
//     one shared pub/sub connection per Client), with a jittered exponential
//     backoff, capped by the holder's remaining TTL, for lost messages and
//     expiries. A handoff costs about one round trip, not a polling period.
//   - Re-entry: an Acquire under Lock.Context (or WithLock) on the same key
//     re-enters atomically ({token: count} hash, as in Redisson) and returns
//     the same fence; the key is freed by the last Release.
//   - Fences: every first entry returns a number strictly greater than any
//     earlier one for that key, from INCR on "<prefix>{key}:fence" in the same
//     script and Cluster slot as the lock, as long as Redis keeps the
//     counter. The counter key never expires; it is as durable as your Redis
//     persistence: a failover can lose its last INCRs (replication is
//     asynchronous) and a restart without AOF/RDB starts it over, so a number
//     can be handed out twice. The hold's owner token goes with it (Fence),
//     so the store that checks fences still refuses the second hold, and
//     RaiseFence with its highest accepted fence repairs the counter.
//   - Loss is reported at once: Lost() closes and Context() is cancelled when
//     a renewal or Refresh finds the lock gone, when Release does, or when the
//     locally computed validity (TTL minus clock drift since the acquire or
//     last renewal started) passes without renewal.
//
// # Choosing a TTL
//
// The TTL is how long everyone else waits if the holder dies without
// releasing. Take 2-3x the usual (p99) duration of the protected work, keep an
// upper bound you can afford to stall for (seconds, not minutes, for request
// paths), and alert on <ns>_lock_hold_ttl_ratio approaching 1: a hold that
// nears its TTL is a hold that will soon be lost.
//
// Use the watchdog (AcquireOptions.Watchdog) when the work has no good upper
// bound (batch jobs, calls to slow third parties): it renews every TTL/3 while
// the ctx given to Acquire is alive, so a short TTL still frees the lock soon
// after a crash. It does not help against pauses of the holder itself: a
// paused process does not renew either, which is the point.
//
// # A lock is not enough
//
// A holder can be paused for longer than its TTL at any moment: a GC pause, a
// page fault storm, a VM migration, SIGSTOP. It wakes up believing it holds
// the lock, while the lock has expired and another process holds it; no check
// done before the write closes that gap. Only the resource being written can:
//
//   - pass the Fence along (Do hands it to its work) and have the store
//     refuse a write whose fence is older than the last it accepted, or
//     equal to it from another holder (see Fence for the UPDATE);
//   - or make the write conditional on the state the holder read
//     (UPDATE ... WHERE version = ?), so the lock only avoids wasted work.
//
// Check Lock.Context() right before each write, so a holder that has learned
// of the loss stops; the fence or the DB condition covers the holder that has
// not.
//
// # Redlock
//
// NewRedlock spreads a lock over N independent Redis nodes and needs a
// majority. It tolerates a minority of nodes being down, at the price of the
// timing assumptions Kleppmann criticised: bounded clock drift, bounded
// pauses, and nodes that do not forget locks on restart. Its fence is the
// maximum of the accepting nodes' counters, written back to them before
// Acquire returns, so it is monotonic only while no node loses its data.
// There is no single authority for fences across nodes; if you need strict
// fencing under node loss, use a consensus store (etcd, ZooKeeper) instead.
package lockx
