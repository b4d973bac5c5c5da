package idem

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrInUse means another request holds the key's in-flight lease with
	// the same request: answer 409 and let the client retry later.
	ErrInUse = errors.New("idem: idempotency key in use")
	// ErrFingerprintMismatch means the key was used for a different request,
	// finished or still in flight: answer 422. The services return it too
	// when the database shows a business key or reference used before for a
	// different request (Redis forgot the record, or the reference never
	// had one).
	ErrFingerprintMismatch = errors.New("idem: idempotency key reused with a different request")
	// ErrClaimLost means the claim's lease ran out before Complete or
	// Release, so another request may own the key now; nothing was written.
	ErrClaimLost = errors.New("idem: claim lost (lease expired)")
)

// Record is a finished response kept for replay.
type Record struct {
	Status int
	// Header holds the replayed headers (Content-Type, Location).
	Header map[string]string
	Body   []byte
	// Fingerprint is the request's; Complete takes it from the claim.
	Fingerprint string
	// InDoubt says the work's outcome is not known yet: it may have taken
	// effect or not. Do then neither keeps the record nor frees the key: the
	// claim stays in flight (a retry meets ErrInUse) and is handed back in
	// Done.Held, for the caller to free once the outcome is known; if it
	// never does, the lease ends it.
	InDoubt bool
}

// StoreOptions configures a Store. Zero values take the defaults.
type StoreOptions struct {
	// Prefix is put before every Redis key. Default "idem:".
	Prefix string
	// Lease is how long a claim keeps the key in flight: the longest a
	// crashed request can block its retries. Make it longer than the slowest
	// request. Default 30s.
	Lease time.Duration
	// Retention is how long a stored result is replayed. Default 24h.
	Retention time.Duration
	// Keep bounds keeping (or freeing) a key's record after the work ran:
	// the caller's share of its answer's time past the request deadline.
	// Default 500ms.
	Keep    time.Duration
	Metrics *Metrics
}

// Store keeps idempotency records in Redis, one hash per scope.
type Store struct {
	rdb       redis.UniversalClient
	prefix    string
	lease     time.Duration
	retention time.Duration
	keep      time.Duration
	m         *Metrics
}

// NewStore returns a store on rdb.
func NewStore(rdb redis.UniversalClient, o StoreOptions) *Store {
	s := &Store{rdb: rdb, prefix: o.Prefix, lease: o.Lease, retention: o.Retention, keep: o.Keep, m: o.Metrics}
	if s.keep <= 0 {
		s.keep = 500 * time.Millisecond
	}
	if s.prefix == "" {
		s.prefix = "idem:"
	}
	if s.lease <= 0 {
		s.lease = 30 * time.Second
	}
	if s.retention <= 0 {
		s.retention = 24 * time.Hour
	}
	return s
}

// The record hash: state ("run" or "done"), fp, and while running the
// claim's token, once done status, hdr (JSON) and body.
var claimScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'state', 'fp', 'status', 'hdr', 'body')
if not r[1] then
  redis.call('HSET', KEYS[1], 'state', 'run', 'fp', ARGV[1], 'token', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {'claimed'}
end
if r[2] ~= ARGV[1] then return {'mismatch'} end
if r[1] ~= 'done' then return {'inuse'} end
return {'done', r[3], r[4], r[5]}
`)

var completeScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'token')
redis.call('HSET', KEYS[1], 'state', 'done', 'status', ARGV[2], 'hdr', ARGV[3], 'body', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
`)

var releaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
return redis.call('DEL', KEYS[1])
`)

// Claim starts a request under scope (see Scope), in one atomic step:
//
//   - (claim, nil, nil): the key was free; the caller runs the work and ends
//     with claim.Complete or claim.Release.
//   - (nil, rec, nil): the same request finished before; replay rec.
//   - ErrFingerprintMismatch: the key belongs to a different request, done or
//     still in flight. A different payload fails whatever the first one's
//     fate, so 422 is answered at once rather than 409 now and 422 later.
//   - ErrInUse: the same request is still in flight.
func (s *Store) Claim(ctx context.Context, scope, fingerprint string) (*Claim, *Record, error) {
	key := s.prefix + scope
	token := rand.Text()
	res, err := claimScript.Run(ctx, s.rdb, []string{key}, fingerprint, token, s.lease.Milliseconds()).Slice()
	if err != nil {
		return nil, nil, fmt.Errorf("idem: claim: %w", err)
	}
	switch res[0] {
	case "claimed":
		s.m.inc(cClaims)
		return &Claim{s: s, key: key, token: token, fp: fingerprint}, nil, nil
	case "mismatch":
		s.m.inc(cMismatches)
		return nil, nil, ErrFingerprintMismatch
	case "inuse":
		s.m.inc(cInUse)
		return nil, nil, ErrInUse
	}
	rec, err := decodeRecord(res, fingerprint)
	if err != nil {
		return nil, nil, err
	}
	s.m.inc(cReplays)
	return nil, rec, nil
}

func decodeRecord(res []any, fp string) (*Record, error) {
	if len(res) != 4 {
		return nil, fmt.Errorf("idem: claim: unexpected reply %v", res)
	}
	st, _ := res[1].(string)
	hdr, _ := res[2].(string)
	body, _ := res[3].(string)
	status, err := strconv.Atoi(st)
	if err != nil {
		return nil, fmt.Errorf("idem: stored status %q: %w", st, err)
	}
	rec := &Record{Status: status, Body: []byte(body), Fingerprint: fp}
	if err := json.Unmarshal([]byte(hdr), &rec.Header); err != nil {
		return nil, fmt.Errorf("idem: stored header: %w", err)
	}
	return rec, nil
}

// Claim is the right to run one request. It is not safe for concurrent use.
type Claim struct {
	s     *Store
	key   string
	token string
	fp    string
	ended bool
}

// Complete stores rec for the store's retention, so retries replay it. It
// writes only while the claim still owns the key (token compared in Lua);
// otherwise it returns ErrClaimLost. rec.Fingerprint is ignored: the claim's
// is kept.
func (c *Claim) Complete(ctx context.Context, rec Record) error {
	if c.ended {
		return errors.New("idem: claim already ended")
	}
	hdr, err := json.Marshal(rec.Header)
	if err != nil {
		return fmt.Errorf("idem: complete: %w", err)
	}
	n, err := completeScript.Run(ctx, c.s.rdb, []string{c.key},
		c.token, rec.Status, hdr, rec.Body, c.s.retention.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("idem: complete: %w", err)
	}
	c.ended = true
	if n == 0 {
		c.s.m.inc(cLost)
		return ErrClaimLost
	}
	c.s.m.inc(cStored)
	return nil
}

// Release frees the key so a retry runs the request afresh: for outcomes
// that must not be replayed (5xx, 503 busy, 400) and for panics. After
// Complete, or a second time, it does nothing, so it can be deferred. If the
// lease ran out it returns ErrClaimLost and leaves the new owner alone.
func (c *Claim) Release(ctx context.Context) error {
	if c.ended {
		return nil
	}
	n, err := releaseScript.Run(ctx, c.s.rdb, []string{c.key}, c.token).Int()
	if err != nil {
		return fmt.Errorf("idem: release: %w", err)
	}
	c.ended = true
	if n == 0 {
		c.s.m.inc(cLost)
		return ErrClaimLost
	}
	return nil
}

// Done is what Do did.
type Done struct {
	// Record is the answer: the one work made, or, when Replayed, the one
	// stored by the first request with this key.
	Record   Record
	Replayed bool
	// Unsaved is set when keeping or freeing the key failed after work
	// ran: the answer stands, but a retry may find the key still in flight
	// until the lease ends, or run the work again (guard it in the database).
	Unsaved error
	// Held is the claim of a Record InDoubt, still in flight: Release it
	// once the outcome is known.
	Held *Claim
}

// Do is the one idempotency flow, framework-neutral: claim the key for this
// request (scope and fingerprint), run work once, keep its Record for replay
// when ShouldStore says so or free the key otherwise, and answer a repeat
// with the kept Record. A panic in work frees the key and goes on; a Record
// InDoubt keeps it in flight (Done.Held).
//
// Keeping the Record waits StoreOptions.Keep at most. A keep that ran past
// it leaves the key in flight until the lease ends, on purpose: a Redis
// that did not answer within the bound (a failover) is not asked again on
// the answer's path, nor by calls left running in the background that
// would pile onto it; the retries meet ErrInUse until the lease ends, and
// then run work again, which the caller's check answers.
//
// Errors, all before work ran: ErrInUse (the first request is in flight),
// ErrFingerprintMismatch (the key was used for another request), or Redis's.
func (s *Store) Do(ctx context.Context, scope, fingerprint string, work func(ctx context.Context) Record) (Done, error) {
	claim, rec, err := s.Claim(ctx, scope, fingerprint)
	if err != nil {
		return Done{}, err
	}
	if rec != nil {
		return Done{Record: *rec, Replayed: true}, nil
	}
	finished := false
	defer func() {
		if !finished { // panic: free the key so the client can retry
			_ = claim.Release(context.WithoutCancel(ctx))
		}
	}()
	out := Done{Record: work(ctx)}
	finished = true
	if out.Record.InDoubt {
		out.Held = claim
		return out, nil
	}
	// The answer waits for its record to be kept, but not long: in a
	// failover a Redis write can block for its socket timeouts, and a
	// record not kept (Unsaved) is only a repeat that runs work again,
	// which the caller's own check (the order number) answers.
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.keep)
	defer cancel()
	if !ShouldStore(out.Record.Status) {
		out.Unsaved = claim.Release(bg)
		return out, nil
	}
	out.Unsaved = claim.Complete(bg, out.Record)
	if out.Unsaved != nil && !errors.Is(out.Unsaved, ErrClaimLost) && bg.Err() == nil {
		// Not kept, and Redis said so at once (a refused write, a
		// connection reset in a failover): free the key within the same
		// bound, so a retry runs at once rather than meeting ErrInUse until
		// the lease ends. That is safe: a retry that runs work again is
		// what an expired lease allows anyway, and the caller's check
		// answers it; if the write did land after all, the token it
		// removed keeps Release from touching the record.
		_ = claim.Release(bg)
	}
	return out, nil
}
