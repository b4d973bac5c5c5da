package linear

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
)

// maxFailures bounds the failures a Result lists; Check still decides.
const maxFailures = 20

// Check decides whether h is linearizable under the stock model, exactly,
// when the stock only decreases (Returns == 0), and by judgeCounter when
// units come back at known intervals (Added operations).
//
// Why it can be exact and fast: each buyer or key holds one order at most,
// so the per-identity rules (one creation, replays naming it after it, no
// refusal of a holder) are local; and a counter that only decreases is
// linearizable iff the creations fit in the stock and every refusal can be
// placed after enough creations. Placing every creation at its send and
// every refusal at its answer is then optimal for all of them at once, so
// each refusal needs only a prefix sum. Unanswered requests of identities
// with no answer may fill in: the earliest ones (a bitset over the stock when
// quantities differ). ctx bounds that last step, the only one that is not
// O(n log n); Check answers Undecided when it ends first.
func Check(ctx context.Context, h History) Result {
	var res Result
	byID := map[string][]int{}
	var ids []string
	var adds []int
	for i, o := range h.Ops {
		if o.Answer == Added {
			adds = append(adds, i)
			continue
		}
		if _, ok := byID[o.Identity]; !ok {
			ids = append(ids, o.Identity)
		}
		byID[o.Identity] = append(byID[o.Identity], i)
	}
	var defs, opts []unit
	for _, id := range ids {
		d, opt, fails := judgeIdentity(h, byID[id], len(adds) > 0)
		defs = append(defs, d...)
		if opt != nil {
			opts = append(opts, *opt)
		}
		res.Failures = append(res.Failures, fails...)
	}
	var f []Failure
	var undecided string
	if len(adds) > 0 {
		f, undecided = judgeCounter(ctx, h, defs, opts, adds)
	} else {
		f, undecided = judgeStock(ctx, h, defs, opts)
	}
	res.Failures = append(res.Failures, f...)
	slices.SortStableFunc(res.Failures, func(a, b Failure) int {
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		return len(a.Ops) - len(b.Ops)
	})
	if len(res.Failures) > maxFailures {
		res.Failures = res.Failures[:maxFailures]
	}
	switch {
	case len(res.Failures) > 0:
		res.Verdict = NotLinearizable
	case undecided != "":
		res.Verdict, res.Reason = Undecided, undecided
	default:
		res.Verdict = Linearizable
	}
	return res
}

// unit is a creation that took (or, optional, may have taken) stock.
type unit struct {
	call  int64
	q     int64
	op    int
	proof int   // the replay that proves an unanswered send took effect, or -1
	after []int // refusals of the same buyer that must come before it (see judgeIdentity)
	end   int64 // by when it took effect: its answer, or its identity's first replay's
}

// ops is the unit's operations: the send, and the replay proving it.
func (u unit) ops() []int {
	if u.proof >= 0 {
		return []int{u.op, u.proof}
	}
	return []int{u.op}
}

func holderWord(o Op) string {
	if o.Seckill {
		return "buyer"
	}
	return "Idempotency-Key"
}

// judgeIdentity applies the rules of one buyer or key and returns its
// creations: definite ones (a 201, or the unanswered send a replay proves
// took effect) and at most one optional one (only unanswered sends).
//
// With units coming back (returns), a seckill buyer refused (not
// remembered) may still buy later: its creation then carries its refusals
// as operations that must come first (unit.after), for judgeCounter.
func judgeIdentity(h History, idx []int, returns bool) (defs []unit, opt *unit, fails []Failure) {
	var creates, replays, refusals, unknowns []int
	for _, i := range idx {
		switch h.Ops[i].Answer {
		case Created:
			creates = append(creates, i)
		case Replayed:
			replays = append(replays, i)
		case Refused:
			refusals = append(refusals, i)
		default:
			unknowns = append(unknowns, i)
		}
	}
	first := h.Ops[idx[0]]
	word := holderWord(first)
	q := first.quantity()
	if len(creates) > 1 {
		fails = append(fails, Failure{Ops: creates[:2], Reason: fmt.Sprintf(
			"one %s got two new orders (201 %s, then 201 %s): it can hold one, so the second send had to replay the first",
			word, h.Ops[creates[0]].OrderNo, h.Ops[creates[1]].OrderNo)})
	}
	named := slices.Concat(creates, replays)
	if len(named) > 0 {
		a := named[0]
		for _, b := range named[1:] {
			if h.Ops[b].OrderNo != h.Ops[a].OrderNo && h.Ops[b].Answer == Replayed {
				fails = append(fails, Failure{Ops: []int{a, b}, Reason: fmt.Sprintf(
					"a replay named order %s while the %s's order is %s", h.Ops[b].OrderNo, word, h.Ops[a].OrderNo)})
				break
			}
		}
		if len(refusals) > 0 && !(returns && first.Seckill) {
			fails = append(fails, Failure{Ops: []int{a, refusals[0]}, Reason: fmt.Sprintf(
				"one %s was both given order %s and refused: stock only goes down, so a refusal before the order leaves nothing for it, and after it the %s must get its order again",
				word, h.Ops[a].OrderNo, word)})
		}
	}
	lastReplay, minEnd := -1, int64(math.MaxInt64)
	for _, r := range replays {
		if h.Ops[r].Return < minEnd {
			lastReplay, minEnd = r, h.Ops[r].Return
		}
	}
	switch {
	case len(creates) > 0:
		for _, c := range creates {
			defs = append(defs, unit{call: h.Ops[c].Call, q: q, op: c, proof: -1, end: min(h.Ops[c].Return, minEnd)})
		}
		if c := creates[0]; h.Ops[c].Call > minEnd {
			fails = append(fails, Failure{Ops: []int{c, lastReplay}, Reason: fmt.Sprintf(
				"a replay of order %s was answered before the send that created it was made", h.Ops[c].OrderNo)})
		}
	case len(replays) > 0:
		// The creation's answer was lost: the earliest unanswered send
		// sent before the first replay's answer made the order.
		u := -1
		for _, i := range unknowns {
			if h.Ops[i].Call <= minEnd && (u < 0 || h.Ops[i].Call < h.Ops[u].Call) {
				u = i
			}
		}
		if u < 0 {
			fails = append(fails, Failure{Ops: []int{lastReplay}, Reason: fmt.Sprintf(
				"a replay named order %s, but no send of this %s could have created it before that answer", h.Ops[lastReplay].OrderNo, word)})
			break
		}
		defs = append(defs, unit{call: h.Ops[u].Call, q: q, op: u, proof: lastReplay, end: minEnd})
	case (len(refusals) == 0 || returns && first.Seckill) && len(unknowns) > 0:
		u := unknowns[0]
		for _, i := range unknowns {
			if h.Ops[i].Call < h.Ops[u].Call {
				u = i
			}
		}
		opt = &unit{call: h.Ops[u].Call, q: q, op: u, proof: -1}
	}
	if returns && first.Seckill && len(refusals) > 0 {
		for i := range defs {
			defs[i].after = refusals
		}
		if opt != nil {
			opt.after = refusals
		}
	}
	return defs, opt, fails
}

// judgeStock checks the counter: creations fit, and every refusal comes
// after enough creations.
func judgeStock(ctx context.Context, h History, defs, opts []unit) (fails []Failure, undecided string) {
	var total int64
	for _, d := range defs {
		total += d.q
	}
	var refusals []int
	for i, o := range h.Ops {
		if o.Answer == Refused && h.Stock-o.quantity()+1 > 0 {
			refusals = append(refusals, i)
		}
	}
	switch {
	case total > h.Stock && h.Returns > 0:
		return nil, fmt.Sprintf("%d units ordered of %d, and %d came back during the sale at moments the clients did not see (returns are not modelled)", total, h.Stock, h.Returns)
	case total > h.Stock:
		return []Failure{oversell(h, defs, total)}, ""
	case len(refusals) > 0 && h.Returns > 0:
		return nil, fmt.Sprintf("%d refusals, and %d units came back during the sale at moments the clients did not see (returns are not modelled)", len(refusals), h.Returns)
	case len(refusals) == 0:
		return nil, ""
	}
	slices.SortFunc(defs, func(a, b unit) int { return compareInt(a.call, b.call) })
	sold := make([]int64, len(defs)+1) // sold[k]: units of the first k creations
	for k, d := range defs {
		sold[k+1] = sold[k] + d.q
	}
	before := func(t int64) int64 { // units created by sends made at or before t
		return sold[sort.Search(len(defs), func(k int) bool { return defs[k].call > t })]
	}
	slices.SortFunc(refusals, func(a, b int) int { return compareInt(h.Ops[a].Return, h.Ops[b].Return) })
	slices.SortFunc(opts, func(a, b unit) int { return compareInt(a.call, b.call) })
	fill := newFiller(h.Stock-total, opts)
	for _, j := range refusals {
		r := h.Ops[j]
		need := h.Stock - r.quantity() + 1 - before(r.Return)
		best, ok, err := fill.reach(ctx, r.Return, need)
		if err != nil {
			return nil, "checking timed out (" + err.Error() + ") while choosing among unanswered orders"
		}
		if ok {
			continue
		}
		f := Failure{rank: 2, Ops: []int{j}, Reason: fmt.Sprintf(
			"refused (%d asked) although at most %d of the %d units can have been sold before its answer: a unit was free during the whole request",
			r.quantity(), before(r.Return)+best, h.Stock)}
		for _, d := range defs {
			if d.call > r.Return && len(f.Evidence) < 5 {
				f.Evidence = append(f.Evidence, d.ops()...)
			}
		}
		return []Failure{f}, ""
	}
	return nil, ""
}

// oversell is the smallest set of creations that do not fit in the stock:
// the largest first. When all take the same quantity any few enough will
// do, so it picks creations that ran one after another where it can (a
// chain: porcupine then draws the set at once, and it reads best), and
// answered ones before those a replay proves.
func oversell(h History, defs []unit, total int64) Failure {
	s := slices.Clone(defs)
	end := func(u unit) int64 {
		if u.proof >= 0 {
			return h.Ops[u.proof].Return
		}
		return h.Ops[u.op].Return
	}
	slices.SortStableFunc(s, func(a, b unit) int {
		if a.q != b.q {
			return compareInt(b.q, a.q)
		}
		if (a.proof < 0) != (b.proof < 0) {
			if a.proof < 0 {
				return -1
			}
			return 1
		}
		return compareInt(end(a), end(b))
	})
	if q := s[0].q; s[len(s)-1].q == q {
		need := int(h.Stock/q) + 1
		var chain, rest []unit
		last := int64(math.MinInt64)
		for _, u := range s {
			if len(chain) < need && u.proof < 0 && h.Ops[u.op].Call > last {
				chain, last = append(chain, u), end(u)
				continue
			}
			rest = append(rest, u)
		}
		s = append(chain, rest...)
	}
	var sum int64
	var ops []int
	n := 0
	for _, d := range s {
		sum += d.q
		n++
		ops = append(ops, d.ops()...)
		if sum > h.Stock {
			break
		}
	}
	return Failure{rank: 1, Ops: ops, Reason: fmt.Sprintf(
		"%d orders created for %d units in all, of a product that had %d: any %d of them cannot all be placed",
		len(defs), total, h.Stock, n)}
}

// filler answers, refusal by refusal in the order of their answers, how
// many units unanswered requests sent before a moment can add, within the
// stock the definite creations left (capacity).
type filler struct {
	capacity int64
	opts     []unit
	next     int
	unitOnly bool
	count    int64    // unitOnly: optional units taken so far
	sums     []uint64 // otherwise: bitset of reachable sums 0..capacity
}

func newFiller(capacity int64, opts []unit) *filler {
	f := &filler{capacity: capacity, opts: opts, unitOnly: true}
	for _, o := range opts {
		if o.q != 1 {
			f.unitOnly = false
		}
	}
	if !f.unitOnly {
		f.sums = make([]uint64, capacity/64+1)
		f.sums[0] = 1
	}
	return f
}

// reach adds the optional requests sent at or before t, keeps only the
// choices that give at least need units, and reports the most they could
// give and whether any choice is left.
func (f *filler) reach(ctx context.Context, t, need int64) (best int64, ok bool, err error) {
	if f.unitOnly {
		for f.next < len(f.opts) && f.opts[f.next].call <= t {
			f.next++
			if f.count < f.capacity {
				f.count++
			}
		}
		return f.count, f.count >= need, nil
	}
	for f.next < len(f.opts) && f.opts[f.next].call <= t {
		if f.next%64 == 0 && ctx.Err() != nil {
			return 0, false, ctx.Err()
		}
		orShift(f.sums, f.opts[f.next].q, f.capacity)
		f.next++
	}
	best = -1
	for w := len(f.sums) - 1; w >= 0 && best < 0; w-- {
		if f.sums[w] != 0 {
			best = int64(w*64 + 63 - bits.LeadingZeros64(f.sums[w]))
		}
	}
	if best < need {
		return max(best, 0), false, nil
	}
	for b := int64(0); b < min(need, f.capacity+1); b++ { // drop the choices that give too little
		if b%64 == 0 && b+64 <= need {
			f.sums[b/64] = 0
			b += 63
			continue
		}
		f.sums[b/64] &^= 1 << (b % 64)
	}
	return best, true, nil
}

// orShift sets bs |= bs << s, keeping bits 0..limit.
func orShift(bs []uint64, s, limit int64) {
	words, off := int(s/64), uint(s%64)
	for i := len(bs) - 1; i >= words; i-- {
		v := bs[i-words] << off
		if off != 0 && i-words-1 >= 0 {
			v |= bs[i-words-1] >> (64 - off)
		}
		bs[i] |= v
	}
	if extra := uint((limit + 1) % 64); extra != 0 {
		bs[len(bs)-1] &= 1<<extra - 1
	}
}
