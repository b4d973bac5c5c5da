package loadgen

import (
	"context"
	"net/http"
	"sort"
	"time"
)

// A3 is the invariant an outcome_unknown answer owes (docs/invariants.md):
// the client's retry or the database afterwards shows one order for that
// request or none, never two, and an order that exists is never refused to
// its buyer afterwards.
const A3 = "A3"

// CodeOutcomeUnknown is the one 503 that does not promise "nothing
// changed": the order may exist or not, and a retry with the same identity
// (key, or buyer and product) learns which.
const CodeOutcomeUnknown = "outcome_unknown"

// tells reports whether an answer tells the outcome of a logical request:
// a 2xx (the order) or a final refusal (4xx but 409 key in use and 429).
func tells(r Record) bool {
	switch {
	case r.OK():
		return true
	case r.Status >= 400 && r.Status < 500:
		return r.Code != "idempotency_key_in_use" && r.Status != http.StatusTooManyRequests
	}
	return false
}

// doubt is one logical request answered outcome_unknown at least once:
// its first such answer, and the first answer after it that told the
// outcome (nil: none did, unresolved).
type doubt struct {
	first    Record
	resolved *Record
}

// doubts groups the records' outcome_unknown answers by logical request
// (identity), in a stable order.
func doubts(recs []Record) []*doubt {
	by := map[string]*doubt{}
	var keys []string
	for _, r := range recs {
		if !isOrderOp(r.Op) || r.Code != CodeOutcomeUnknown {
			continue
		}
		k := identity(r)
		if d, ok := by[k]; !ok || r.Start.Before(d.first.Start) {
			if !ok {
				keys = append(keys, k)
			}
			by[k] = &doubt{first: r}
		}
	}
	for _, r := range recs {
		d := by[identity(r)]
		if d == nil || !isOrderOp(r.Op) || !tells(r) || !r.Start.After(d.first.End) {
			continue
		}
		if d.resolved == nil || r.Start.Before(d.resolved.Start) {
			rr := r
			d.resolved = &rr
		}
	}
	sort.Strings(keys)
	out := make([]*doubt, len(keys))
	for i, k := range keys {
		out[i] = by[k]
	}
	return out
}

// countDoubts is the summary's outcome_unknown figures: the answers, and
// the logical requests no later answer resolved.
func countDoubts(recs []Record) (answers, unresolved int) {
	for _, r := range recs {
		if r.Code == CodeOutcomeUnknown {
			answers++
		}
	}
	for _, d := range doubts(recs) {
		if d.resolved == nil {
			unresolved++
		}
	}
	return answers, unresolved
}

// checkDoubts: A3, from the records and the database. Each request
// answered outcome_unknown must be resolved by a later answer (the
// harness retries it with the same identity); the database holds at most
// one order for it; and a refusal resolving it is a violation when its
// order exists.
func checkDoubts(recs []Record, f Facts, v *violations) {
	for _, d := range doubts(recs) {
		r := d.first
		held := ordersOf(r, d.resolved, f)
		switch {
		case d.resolved == nil:
			v.add(A3, r.ProductID, r.UserID, "outcome_unknown answers no retry resolved (the harness retried each with the same identity): %d", row(r))
		case len(held) > 1:
			m := row(*d.resolved)
			m["orders_in_database"] = held
			v.add(A3, r.ProductID, r.UserID, "outcome_unknown answers that resolved to two orders or more: %d", m)
		case !d.resolved.OK() && len(held) == 1:
			m := row(*d.resolved)
			m["order_in_database"] = held[0]
			v.add(A3, r.ProductID, r.UserID, "outcome_unknown answers resolved by a refusal while the order exists: %d", m)
		}
	}
}

// ordersOf lists the database's orders of r's logical request: for a
// regular order the one its number (named by the problem, or by the
// resolving answer) has; for a seckill order every order of the buyer for
// the product (Facts holds every order of users answered outcome_unknown).
func ordersOf(r Record, resolved *Record, f Facts) []string {
	var out []string
	if r.Op == OpSeckill {
		for no, o := range f.Orders {
			if o.UserID == r.UserID && o.ProductID == r.ProductID && o.Kind == OpSeckill {
				out = append(out, no)
			}
		}
		sort.Strings(out)
		return out
	}
	for _, no := range []string{r.OrderNo, resolvedNo(resolved)} {
		if _, ok := f.Orders[no]; ok && no != "" && (len(out) == 0 || out[0] != no) {
			out = append(out, no)
		}
	}
	return out
}

func resolvedNo(r *Record) string {
	if r == nil {
		return ""
	}
	return r.OrderNo
}

// DoubtUsers lists the users of the records answered outcome_unknown: the
// facts must hold every order of theirs (their seckill order has no number
// in the answer).
func DoubtUsers(recs []Record) []int64 {
	seen := map[int64]bool{}
	var out []int64
	for _, r := range recs {
		if r.Code == CodeOutcomeUnknown && !seen[r.UserID] {
			seen[r.UserID] = true
			out = append(out, r.UserID)
		}
	}
	return out
}

// resolveTimeout bounds the harness's retries of the requests still
// unresolved when the load ended: a kept idempotency claim is freed once
// its instance learns the outcome, or by its lease (SHOP_IDEM_LEASE, 30 s).
const resolveTimeout = 40 * time.Second

// resolveDoubts retries, after the load, every logical request answered
// outcome_unknown that no later answer resolved, with the same identity,
// until an answer tells the outcome or resolveTimeout passes; each retry
// is recorded.
func resolveDoubts(ctx context.Context, c *Client, buyers []Buyer, rec *Recorder, timeout time.Duration) {
	open := map[string]bool{}
	for _, d := range doubts(rec.Records()) {
		if d.resolved == nil {
			open[identity(d.first)] = true
		}
	}
	if len(open) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	for i, b := range buyers {
		call := buyerCall(b)
		call.Timeout = timeout
		if !open[identity(Record{Op: b.Op, UserID: b.UserID, ProductID: b.ProductID, Key: b.Key})] {
			continue
		}
		for attempt := 0; ctx.Err() == nil; attempt++ {
			call.Target = i + attempt
			a := c.Do(ctx, call)
			r := recordOf(b, call, a, 9000+attempt)
			rec.Add(r)
			if tells(r) {
				break
			}
			sleep(ctx, 500*time.Millisecond)
		}
	}
}
