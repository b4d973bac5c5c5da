// Package linear checks a flash sale's client histories for
// linearizability: is there one order of all the purchases, each taking
// effect at some moment between its send and its answer, under which every
// answer is what a single correct stock counter would have given?
//
// Two checkers judge one History. Check is exact and specialised to the
// stock model (a counter that only decreases, plus one order per buyer or
// Idempotency-Key); it runs in O(n log n) and decides histories of any size.
// Porcupine hands the same history and model to
// github.com/anishathalye/porcupine, whose generic search is the reference
// the property test holds Check to, and whose HTML visualization is the
// picture a trainer shows. The package knows nothing of HTTP or of the
// harness: the load generator turns its records into histories.
package linear

import (
	"fmt"
	"slices"
)

// Answer is what a client was told about one purchase.
type Answer uint8

// Answers a purchase can get. Answers that promise no effect (503 busy or
// unavailable, 429, other 4xx) are left out of a history altogether.
const (
	// Unknown: no answer (client timeout, transport error, a 5xx other than
	// 503). The purchase may or may not have taken effect, at any moment
	// after its send, even after the client gave up.
	Unknown Answer = iota
	// Created: 201, a new order for this buyer or key.
	Created
	// Replayed: a 2xx naming the order this buyer or key already holds.
	Replayed
	// Refused: 409 sold_out or insufficient_stock.
	Refused
	// Added: not a purchase but Quantity units coming back, at a moment
	// between Call and Return: a restock, a cancellation, an unpaid order
	// the sweeper cancelled. It belongs to no identity (a cancelled order
	// is still its buyer's or key's one order: a repeat replays it).
	Added
)

func (a Answer) String() string {
	switch a {
	case Created:
		return "created"
	case Replayed:
		return "replay"
	case Refused:
		return "refused"
	case Added:
		return "added"
	default:
		return "no answer"
	}
}

// Op is one purchase request as a client saw it.
type Op struct {
	// Identity is the logical request: one seckill buyer of the product, or
	// one user's Idempotency-Key. It may hold one order at most.
	Identity string
	// Seckill refusals are not remembered (a buyer refused may buy after
	// a restock); a regular key's refusal is stored and replayed.
	Seckill  bool
	Quantity int64
	// Call and Return are the send and the answer, in nanoseconds from any
	// common origin. Return is ignored for an Unknown answer.
	Call, Return int64
	Answer       Answer
	OrderNo      string // the order a 2xx named
	Note         string // the picture's tooltip: user, instance, status
	bounded      bool   // Unknown, but drawn as ending at Return (see Drawable)
}

func (o Op) String() string {
	if o.Answer == Added {
		return fmt.Sprintf("%d units come back (%s)", o.quantity(), o.Identity)
	}
	s := fmt.Sprintf("%s buys %d -> %s", o.Identity, o.quantity(), o.Answer)
	if o.OrderNo != "" {
		s += " " + o.OrderNo
	}
	return s
}

func (o Op) quantity() int64 { return max(1, o.Quantity) }

// History is every purchase of one product during a sale.
type History struct {
	Stock int64 // units when the sale began
	// Returns counts units added during the sale (restocks, cancellations)
	// at moments nobody knows. Check is exact without them; with them it
	// still decides the histories whose verdict they cannot change, and
	// answers Unknown for the rest. Additions whose moment is known within
	// an interval are Ops (Added) instead, and Check decides those.
	Returns int64
	Ops     []Op
}

// Failure is one reason a history is not linearizable.
type Failure struct {
	Reason string `json:"reason"`
	// Ops is a set of operations that cannot be ordered (indexes into
	// History.Ops), as small as the failure allows.
	Ops []int `json:"ops"`
	// Evidence are further operations that show why (for a refusal: the
	// creations that started only after its answer, so the unit they took
	// was free during the whole request).
	Evidence []int `json:"evidence,omitempty"`
	rank     int   // what kind: one identity's answers, then too many orders, then refusals
}

// Set is the failure's operations with their evidence, in time order.
func (f Failure) Set(h History) []int {
	out := slices.Concat(f.Ops, f.Evidence)
	slices.SortStableFunc(out, func(a, b int) int { return compareInt(h.Ops[a].Call, h.Ops[b].Call) })
	return slices.Compact(out)
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Verdict is a checker's answer.
type Verdict uint8

// Verdicts.
const (
	Undecided Verdict = iota // timed out, or outside what the checker can decide
	Linearizable
	NotLinearizable
)

func (v Verdict) String() string {
	switch v {
	case Linearizable:
		return "linearizable"
	case NotLinearizable:
		return "not linearizable"
	default:
		return "unknown"
	}
}

// Result is Check's judgement of one history.
type Result struct {
	Verdict Verdict
	// Reason says why the verdict is Undecided.
	Reason string
	// Failures, when not linearizable: each a separate reason, the
	// smallest first.
	Failures []Failure
}
