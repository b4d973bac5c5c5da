package linear

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
)

// Kinds of a counter item.
const (
	kCreate   = iota // a definite creation
	kRefuse          // a refusal
	kAdd             // units coming back
	kOptional        // an unanswered send that may have created
)

// item is one operation as judgeCounter places it.
type item struct {
	kind      int
	q         int64
	call, end int64
	unit      unit // creations
	op        int
	after     []*item // refusals of the same buyer, placed before this creation
	done      bool
}

// free reports whether the operations that must come before it are placed.
func (it *item) free() bool {
	for _, a := range it.after {
		if !a.done {
			return false
		}
	}
	return true
}

// itemHeap orders items by end.
type itemHeap []*item

func (h itemHeap) Len() int           { return len(h) }
func (h itemHeap) Less(i, j int) bool { return h[i].end < h[j].end }
func (h itemHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *itemHeap) Push(x any)        { *h = append(*h, x.(*item)) }
func (h *itemHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// judgeCounter is judgeStock for a history in which units also come back
// (Added operations: restocks, cancellations, sweeper returns), each at
// some moment of its interval. A counter that goes both ways has no single
// best moment per operation any more (an addition early helps a creation,
// late helps a refusal), so the linearization is built step by step
// instead. Among the operations that may go next (none still open ended
// before they began), a step takes the first that applies of:
//
//  1. a refusal the stock already refuses (it changes nothing);
//  2. the creation that fits with the earliest end (creations must happen
//     anyway, and taking the stock early only helps refusals);
//  3. for a refusal that waits on too much stock, unanswered sends (which
//     may or may not have taken effect) that bring the stock below it;
//  4. for the operation whose end is nearest: if a creation, the addition
//     with the earliest end; if an addition, itself.
//
// Additions go as late as they may, creations as early, unanswered sends
// only when a refusal needs them: no other choice can serve an operation
// this one cannot (the property test holds it to porcupine). When no rule
// applies to the operation whose end is nearest, the history is not
// linearizable: its failure is that operation, with everything sent before
// its end as the set that cannot be ordered.
func judgeCounter(ctx context.Context, h History, defs, opts []unit, adds []int) (fails []Failure, undecided string) {
	if h.Returns > 0 {
		return nil, fmt.Sprintf("%d units came back during the sale at moments nobody knows (returns are not modelled without their times)", h.Returns)
	}
	var items []*item
	for _, d := range defs {
		items = append(items, &item{kind: kCreate, q: d.q, call: d.call, end: d.end, unit: d, op: d.op})
	}
	for _, o := range opts {
		items = append(items, &item{kind: kOptional, q: o.q, call: o.call, unit: o, op: o.op})
	}
	// A seckill refusal is not remembered: each needs the stock short at
	// its own moment. A regular key's refusal is stored and replayed, so a
	// key needs the stock short once, by its first refusal's answer, at a
	// send of its own (an unanswered one may be the refused send).
	keyRefusal := map[string]*item{}
	for i, o := range h.Ops {
		if o.Answer != Refused {
			continue
		}
		if o.Seckill {
			items = append(items, &item{kind: kRefuse, q: o.quantity(), call: o.Call, end: o.Return, op: i})
			continue
		}
		it := keyRefusal[o.Identity]
		if it == nil {
			it = &item{kind: kRefuse, q: o.quantity(), call: o.Call, end: o.Return, op: i}
			keyRefusal[o.Identity] = it
			items = append(items, it)
		}
		if o.Return < it.end {
			it.end, it.op = o.Return, i
		}
		it.call = min(it.call, o.Call)
	}
	for _, o := range h.Ops {
		if it := keyRefusal[o.Identity]; it != nil && o.Answer == Unknown {
			it.call = min(it.call, o.Call)
		}
	}
	refusalOf := map[int]*item{}
	for _, it := range items {
		if it.kind == kRefuse {
			refusalOf[it.op] = it
		}
	}
	for _, it := range items {
		for _, r := range it.unit.after {
			it.after = append(it.after, refusalOf[r])
		}
	}
	for _, i := range adds {
		items = append(items, &item{kind: kAdd, q: h.Ops[i].quantity(), call: h.Ops[i].Call, end: h.Ops[i].Return, op: i})
	}
	// open: the operations still to place that must be placed, by end;
	// ready: those already allowed to go (call <= the nearest end).
	byCall := slices.Clone(items)
	slices.SortStableFunc(byCall, func(a, b *item) int { return compareInt(a.call, b.call) })
	open := &itemHeap{}
	for _, it := range items {
		if it.kind != kOptional {
			*open = append(*open, it)
		}
	}
	heap.Init(open)
	var ready []*item
	next := 0
	stock := h.Stock
	steps := 0
	for {
		for open.Len() > 0 && (*open)[0].done {
			heap.Pop(open)
		}
		if open.Len() == 0 {
			return nil, ""
		}
		if steps++; steps%1024 == 0 && ctx.Err() != nil {
			return nil, "checking timed out (" + ctx.Err().Error() + ") while ordering the additions"
		}
		urgent := (*open)[0]
		for next < len(byCall) && byCall[next].call <= urgent.end {
			if !byCall[next].done {
				ready = append(ready, byCall[next])
			}
			next++
		}
		ready = slices.DeleteFunc(ready, func(it *item) bool { return it.done })
		take := func(it *item) {
			it.done = true
			switch it.kind {
			case kCreate, kOptional:
				stock -= it.q
			case kAdd:
				stock += it.q
			}
		}
		// 1. Refusals the stock refuses now.
		progressed := false
		for _, it := range ready {
			if it.kind == kRefuse && stock < it.q {
				take(it)
				progressed = true
			}
		}
		if progressed {
			continue
		}
		// 2. The fitting creation with the earliest end.
		var best *item
		for _, it := range ready {
			if it.kind == kCreate && it.q <= stock && it.free() && (best == nil || it.end < best.end) {
				best = it
			}
		}
		if best != nil {
			take(best)
			continue
		}
		// 3. Unanswered sends that let a waiting refusal through.
		for _, r := range ready {
			if r.kind != kRefuse {
				continue
			}
			var use []*item
			left := stock
			for _, it := range ready {
				if it.kind == kOptional && it.q <= left && left >= r.q && it.free() {
					use = append(use, it)
					left -= it.q
				}
			}
			if left < r.q {
				for _, it := range use {
					take(it)
				}
				progressed = true
				break
			}
		}
		if progressed {
			continue
		}
		// 4. The nearest end decides.
		switch urgent.kind {
		case kAdd:
			take(urgent)
			continue
		case kCreate:
			var add *item
			for _, it := range ready {
				if it.kind == kAdd && (add == nil || it.end < add.end) {
					add = it
				}
			}
			if add != nil {
				take(add)
				continue
			}
		}
		f := counterFailure(h, defs, urgent, stock)
		if unitOnly(items) {
			return []Failure{f}, ""
		}
		// With quantities that differ, taking the earliest creation that
		// fits is not always best (two units may be needed at once, by one
		// order): the steps' failure is only confirmed by a search.
		switch ok, err := searchCounter(ctx, items, h.Stock); {
		case err != nil:
			return nil, "checking timed out (" + err.Error() + ") while searching for an order of orders of different quantities and additions (the steps alone stopped at: " + f.Reason + ")"
		case ok:
			return nil, ""
		}
		return []Failure{f}, ""
	}
}

func unitOnly(items []*item) bool {
	for _, it := range items {
		if it.q != 1 {
			return false
		}
	}
	return true
}

// searchCounter is the exhaustive form of judgeCounter's steps, for
// histories whose quantities differ: every choice of the next operation,
// each state (operations placed, stock) tried once. It reports whether
// some order places every operation that must be placed.
func searchCounter(ctx context.Context, items []*item, stock int64) (bool, error) {
	for _, it := range items {
		it.done = false
	}
	seen := map[string]bool{}
	done := make([]byte, (len(items)+7)/8)
	steps := 0
	var try func(stock int64) (bool, error)
	try = func(stock int64) (bool, error) {
		if steps++; steps%256 == 0 && ctx.Err() != nil {
			return false, ctx.Err()
		}
		key := string(done) + fmt.Sprint(stock)
		if seen[key] {
			return false, nil
		}
		seen[key] = true
		nearest, open := int64(0), false
		for _, it := range items {
			if !it.done && it.kind != kOptional && (!open || it.end < nearest) {
				nearest, open = it.end, true
			}
		}
		if !open {
			return true, nil
		}
		set := func(i int, v bool) {
			items[i].done = v
			done[i/8] ^= 1 << (i % 8)
		}
		for i, it := range items {
			if it.done || it.call > nearest {
				continue
			}
			next := stock
			switch it.kind {
			case kRefuse:
				if stock >= it.q {
					continue
				}
			case kCreate, kOptional:
				if it.q > stock || !it.free() {
					continue
				}
				next -= it.q
			case kAdd:
				next += it.q
			}
			set(i, true)
			ok, err := try(next)
			set(i, false)
			if ok || err != nil {
				return ok, err
			}
			if it.kind == kRefuse {
				return false, nil // a refusal that applies changes nothing: no other choice does better
			}
		}
		return false, nil
	}
	return try(stock)
}

// counterFailure describes the operation no step could place: its set is
// every operation sent before its end (all that may precede it), with the
// other operations of their buyers and keys (what one answered constrains
// the others).
func counterFailure(h History, defs []unit, stuck *item, stock int64) Failure {
	f := Failure{rank: 2, Ops: []int{stuck.op}}
	in := map[string]bool{}
	for _, o := range h.Ops {
		if o.Call <= stuck.end && o.Answer != Added {
			in[o.Identity] = true
		}
	}
	for i, o := range h.Ops {
		if i != stuck.op && (o.Call <= stuck.end || o.Answer != Added && in[o.Identity]) {
			f.Ops = append(f.Ops, i)
		}
	}
	for _, d := range defs {
		if d.proof >= 0 && h.Ops[d.op].Call <= stuck.end {
			f.Ops = append(f.Ops, d.proof)
		}
	}
	slices.Sort(f.Ops[1:])
	f.Ops = slices.Compact(f.Ops)
	o := h.Ops[stuck.op]
	switch {
	case o.Answer == Refused:
		f.Reason = fmt.Sprintf("refused (%d asked) although, with every addition as late and every creation as early as their answers allow, %d units were still free at its answer", o.quantity(), stock)
	default:
		f.Reason = fmt.Sprintf("order %s took %d units although, with every addition that may come before its answer, only %d were free", o.OrderNo, o.quantity(), max(stock, 0))
	}
	return f
}
