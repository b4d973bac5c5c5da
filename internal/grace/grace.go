// Package grace is the one budget of time the shop may take past a
// request's deadline. Invariant A1 promises every client an answer within
// its request deadline plus one second, under any fault; the work that may
// still run after the deadline shares that second out, and every package
// that bounds such work takes its share from here:
//
//	deadline + Commit   a batch's transaction, begun in time, may still COMMIT
//	deadline + InDoubt  a COMMIT whose answer was lost is looked up by then
//	deadline + Hold     the product lock's hold ends: its work ended first
//	... + Keep          the idempotency record is kept, after the release
//
// so the answer leaves by the deadline + Hold + Keep, inside A1.
package grace

import "time"

const (
	// A1 is the promise: an answer within the request deadline + A1.
	A1 = time.Second
	// Commit is how long after its most pressed request's deadline a
	// batch's transaction may still run: a COMMIT under way gets to finish.
	Commit = 200 * time.Millisecond
	// InDoubt bounds the look-up of a COMMIT whose answer was lost (or cut
	// at Commit): past it the outcome is unknown.
	InDoubt = 300 * time.Millisecond
	// Hold is how long past its request's deadline a lock hold may last:
	// the work under it (its transaction, its in-doubt look-up) must end
	// first, or the watchdog would stop while it still ran. The release
	// waits no longer than the hold.
	Hold = 300 * time.Millisecond
	// Keep bounds keeping (or freeing) the request's idempotency record
	// after its work ran.
	Keep = 500 * time.Millisecond
)
