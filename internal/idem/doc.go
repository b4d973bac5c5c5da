// Package idem makes retried requests safe: a request sent twice has the
// effect of one. It knows nothing of shops and imports nothing of this
// project; Redis (go-redis) is its only store.
//
// A lock says "not at the same time"; idempotency says "not twice". A lock
// released after the work cannot stop the same work from running again on a
// retry, so the two are used together, in layers:
//
//  1. Idempotency keys (Store.Do): the client names each attempt
//     with an Idempotency-Key header (IETF httpapi draft "The
//     Idempotency-Key HTTP Header Field"; Stripe's keys; Brandur Leach,
//     "Implementing Stripe-like Idempotency Keys in Postgres"). The first
//     request claims the key and runs; its final response is stored and
//     replayed byte for byte, with Idempotent-Replayed: true, to every retry
//     of the same request for Retention (24h). A different request under the
//     same key is refused (422), and so is a retry while the first is still
//     running (409). Errors that say nothing final (400, 401, 403, 408, 413,
//     429, 5xx, 503 busy, panics) are not stored: the key is released and a
//     retry runs afresh. See ShouldStore. An outcome not known yet (a commit
//     whose answer was lost) keeps the key in flight until the caller learns
//     it (Record.InDoubt).
//  2. One-time form tokens (Tokens): a token issued with the form and
//     consumed atomically on submit; no replay (see Tokens).
//  3. Processed markers (Markers): a fast "already done?" filter on a
//     business key, in front of the database.
//  4. The database: a unique index on an order number derived from the
//     business key (Ref), and optimistic versions for updates
//     (dbx.CheckRows). This is the final guarantee; the layers above only make
//     duplicates rare and answers fast.
//
// # Claim lease and retention are separate
//
// A claim holds the key in flight for Lease (30s), a stored result lives for
// Retention (24h). Both live in one Redis hash per scope and move between
// states only inside Lua scripts: Claim (one script: claim, replay, 409 or
// 422), Complete and Release (each compares the claim's random token, so a
// request whose lease ran out can neither store over nor free a newer
// request's claim; it gets ErrClaimLost).
//
// If the instance running a request crashes, nothing releases the claim:
// the lease expires and the next retry proceeds. If the first request was
// only slow, not dead, both now run. That is safe only because the work
// itself is idempotent at the database: the order number is Ref(user,
// key), with a unique index, so the second insert fails and the service
// answers from the row that exists. The same holds when Redis loses a
// record or its retention ends. Choose Lease well above the slowest request
// so this stays rare; the idempotency_claims_lost_total counter says when
// it was not.
//
// # Scope and fingerprint
//
// A key is scoped to its principal, method and concrete route (Scope), so
// two users may use the same key. The fingerprint (Fingerprint) covers
// method, route and the canonical JSON body (Canonical): field order and
// whitespace do not make a request different, a changed value does.
// A different fingerprint is answered 422 even while the first request is
// still in flight: the payload is wrong whatever becomes of the first one.
//
// # The flow
//
// Store.Do is the one flow: claim the scoped key with the request's
// fingerprint; a stored record is replayed, a claim in flight is ErrInUse
// (409), another fingerprint ErrFingerprintMismatch (422); otherwise the
// work runs once and its record is kept (ShouldStore) or the key released,
// within a bounded time. The caller (the shop's HTTP layer) parses the
// header (ParseKey), scopes the key (Scope), fingerprints the decoded
// request (Fingerprint) and writes the replayed record with
// Idempotent-Replayed: true.
package idem
