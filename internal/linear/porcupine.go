package linear

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Marks a holding can carry instead of an order number.
const (
	refusedMark = "\x00refused"    // a regular key whose refusal is stored
	someOrder   = "\x00unnumbered" // an order made by a send whose answer was lost
)

// holding is one identity's entry in a persistent list: a state shares its
// tail with the states before it, so a step costs O(1) memory.
type holding struct {
	id, order string
	next      *holding
}

// state is the model's state: the stock left, and what each identity holds.
type state struct {
	stock int64
	held  *holding
	hash  uint64 // XOR of the live entries' hashes
}

func (s state) lookup(id string) (string, bool) {
	for h := s.held; h != nil; h = h.next {
		if h.id == id {
			return h.order, true
		}
	}
	return "", false
}

func entryHash(id, order string) uint64 {
	f := fnv.New64a()
	f.Write([]byte(id))
	f.Write([]byte{0})
	f.Write([]byte(order))
	return f.Sum64()
}

func (s state) with(id, order string) state {
	h := s.hash
	if old, ok := s.lookup(id); ok {
		h ^= entryHash(id, old)
	}
	return state{stock: s.stock, held: &holding{id: id, order: order, next: s.held}, hash: h ^ entryHash(id, order)}
}

func (s state) entries() map[string]string {
	m := map[string]string{}
	for h := s.held; h != nil; h = h.next {
		if _, ok := m[h.id]; !ok {
			m[h.id] = h.order
		}
	}
	return m
}

// step is the sequential specification: what one correct stock counter
// with one order per buyer or key answers.
func step(s state, o Op) (bool, state) {
	if o.Answer == Added {
		n := s
		n.stock += o.quantity()
		return true, n
	}
	held, has := s.lookup(o.Identity)
	switch {
	case has && held == refusedMark:
		return o.Answer == Unknown || o.Answer == Refused, s
	case has:
		switch {
		case o.Answer == Unknown:
			return true, s
		case o.Answer != Replayed:
			return false, s
		case held == someOrder:
			return true, s.with(o.Identity, o.OrderNo)
		default:
			return held == o.OrderNo, s
		}
	case s.stock >= o.quantity():
		switch o.Answer {
		case Created:
			n := s.with(o.Identity, o.OrderNo)
			n.stock -= o.quantity()
			return true, n
		case Unknown:
			n := s.with(o.Identity, someOrder)
			n.stock -= o.quantity()
			return true, n
		}
		return false, s
	default:
		if o.Answer != Refused && o.Answer != Unknown {
			return false, s
		}
		if o.Seckill {
			return true, s
		}
		return true, s.with(o.Identity, refusedMark)
	}
}

// Model is the stock model as porcupine's sequential specification, for a
// product that starts with stock units. Inputs are Ops; outputs are unused
// (an Op carries its answer).
func Model(stock int64) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return state{stock: stock} },
		Step: func(st, in, _ any) (bool, any) {
			return step(st.(state), in.(Op))
		},
		Equal: func(a, b any) bool {
			x, y := a.(state), b.(state)
			if x.stock != y.stock || x.hash != y.hash {
				return false
			}
			mx, my := x.entries(), y.entries()
			if len(mx) != len(my) {
				return false
			}
			for k, v := range mx {
				if my[k] != v {
					return false
				}
			}
			return true
		},
		Hash:              func(st any) uint64 { s := st.(state); return s.hash ^ uint64(s.stock)*0x9e3779b97f4a7c15 },
		DescribeOperation: func(in, _ any) string { return in.(Op).String() },
		DescribeState: func(st any) string {
			return fmt.Sprintf("stock %d", st.(state).stock)
		},
		DescribeOperationMetadata: func(m any) string {
			if m == nil {
				return ""
			}
			return m.(string)
		},
	}
}

// Operations turns the operations at idx (all when nil) into porcupine's
// form. An unanswered one returns after everything else: it may take
// effect at any moment after its send. Each gets the first free lane of the
// picture (the ClientId), so lanes are few and never overlap.
func Operations(h History, idx []int) []porcupine.Operation {
	if idx == nil {
		idx = make([]int, len(h.Ops))
		for i := range idx {
			idx[i] = i
		}
	}
	idx = slices.Clone(idx)
	slices.SortStableFunc(idx, func(a, b int) int { return compareInt(h.Ops[a].Call, h.Ops[b].Call) })
	var last int64
	for _, i := range idx {
		last = max(last, h.Ops[i].Call, h.Ops[i].Return)
	}
	var laneEnd []int64
	out := make([]porcupine.Operation, 0, len(idx))
	for _, i := range idx {
		o := h.Ops[i]
		ret := o.Return
		if o.Answer == Unknown && !o.bounded {
			ret = last + 1
		}
		lane := slices.IndexFunc(laneEnd, func(end int64) bool { return end < o.Call })
		if lane < 0 {
			lane = len(laneEnd)
			laneEnd = append(laneEnd, 0)
		}
		laneEnd[lane] = ret
		out = append(out, porcupine.Operation{ClientId: lane, Input: o, Call: o.Call, Return: ret, Metadata: o.Note})
	}
	return out
}

// Porcupine checks the operations at idx (all when nil) with porcupine's
// generic search, bounded by timeout (0: none). The info draws the picture.
func Porcupine(h History, idx []int, timeout time.Duration) (Verdict, porcupine.LinearizationInfo) {
	res, info := porcupine.CheckOperationsVerbose(Model(h.Stock), Operations(h, idx), timeout)
	switch res {
	case porcupine.Ok:
		return Linearizable, info
	case porcupine.Illegal:
		return NotLinearizable, info
	}
	return Undecided, info
}

// Picture is porcupine's HTML visualization of the operations at idx (all
// when nil), searched for at most timeout: a failing set shows where no
// order fits, a passing history one order that does. It also returns
// porcupine's own verdict on those operations.
func Picture(h History, idx []int, timeout time.Duration) ([]byte, Verdict, error) {
	v, info := Porcupine(h, idx, timeout)
	var b bytes.Buffer
	if err := porcupine.Visualize(Model(h.Stock), info, &b); err != nil {
		return nil, v, err
	}
	return b.Bytes(), v, nil
}

// Drawable is h as a picture of a linearizable history draws it best:
// unanswered sends that cannot matter are left out, since porcupine's
// search otherwise tries each of them at every place. Left out: the
// unanswered sends of a buyer or key that got an answer, except the one a
// replay proves made the order, which is drawn as ending by that replay's
// answer; of the sends of one that got none, or only refusals that do not
// rule out a later order (a key's, or a seckill buyer's when units come
// back), all but the earliest. None of this changes the verdict: every send
// left out can only replay or refuse, and the earliest send of an identity
// can do all that a later one can.
func Drawable(h History) History {
	byID := map[string][]int{}
	for i, o := range h.Ops {
		byID[o.Identity] = append(byID[o.Identity], i)
	}
	keep := make([]bool, len(h.Ops))
	out := History{Stock: h.Stock, Returns: h.Returns}
	bound := map[int]int64{}
	hasAdds := slices.ContainsFunc(h.Ops, func(o Op) bool { return o.Answer == Added })
	for _, idx := range byID {
		answered, created := false, false
		minEnd := int64(-1)
		for _, i := range idx {
			switch h.Ops[i].Answer {
			case Unknown:
				continue
			case Created:
				created = true
			case Replayed:
				if minEnd < 0 || h.Ops[i].Return < minEnd {
					minEnd = h.Ops[i].Return
				}
			}
			answered, keep[i] = true, true
		}
		// A key that was refused may have been refused first by an
		// unanswered send: with units coming back that can matter (its
		// later refusals replay that one whatever the stock). A seckill
		// buyer's refusal is not remembered, so once units come back its
		// unanswered send may still buy one after the refusal.
		refusedKey := false
		for _, i := range idx {
			refusedKey = refusedKey || h.Ops[i].Answer == Refused && (!h.Ops[i].Seckill || hasAdds)
		}
		first := -1
		for _, i := range idx {
			if h.Ops[i].Answer == Unknown && (!answered || refusedKey || !created && minEnd >= 0 && h.Ops[i].Call <= minEnd) &&
				(first < 0 || h.Ops[i].Call < h.Ops[first].Call) {
				first = i
			}
		}
		if first >= 0 {
			keep[first] = true
			if answered && !refusedKey {
				bound[first] = minEnd
			}
		}
	}
	for i, o := range h.Ops {
		if !keep[i] {
			continue
		}
		if end, ok := bound[i]; ok {
			o.bounded, o.Return = true, end
		}
		out.Ops = append(out.Ops, o)
	}
	return out
}
