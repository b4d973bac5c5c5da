package linear

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// randomHistory runs a correct counter through random purchases and, in
// about half the histories, additions (restocks, returns), each taking
// effect at a random moment inside a random interval, and then breaks some
// answers (and drops others, or moves an addition's interval), so that
// about half the histories are linearizable. Times come from a small range, so ties
// between a send and an answer are common (porcupine's intervals are closed).
func randomHistory(r *rand.Rand) History {
	h := History{Stock: r.Int64N(4)}
	type ident struct {
		name    string
		seckill bool
		q       int64
	}
	var ids []ident
	for i := range 1 + r.IntN(4) {
		seckill := r.IntN(2) == 0
		q := int64(1)
		if !seckill {
			q = 1 + r.Int64N(2)
		}
		ids = append(ids, ident{fmt.Sprintf("i%d", i), seckill, q})
	}
	n := 1 + r.IntN(8)
	type pending struct {
		op    Op
		point int64
		skip  bool // unanswered and never took effect
	}
	ps := make([]pending, n)
	adds := 0
	if r.IntN(2) == 0 {
		adds = 1 + r.IntN(3)
	}
	for i := range ps {
		if i < adds {
			point := r.Int64N(40)
			ps[i] = pending{op: Op{Identity: "restock", Quantity: 1 + r.Int64N(2), Call: point - r.Int64N(10), Return: point + r.Int64N(10), Answer: Added}, point: point}
			continue
		}
		id := ids[r.IntN(len(ids))]
		point := r.Int64N(40)
		call := point - r.Int64N(10)
		ps[i] = pending{op: Op{Identity: id.name, Seckill: id.seckill, Quantity: id.q, Call: call, Return: point + r.Int64N(10)}, point: point}
		if r.IntN(6) == 0 {
			ps[i].op.Answer = Unknown
			ps[i].skip = r.IntN(2) == 0
		}
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return compareInt(ps[a].point, ps[b].point) })
	s := state{stock: h.Stock}
	for _, i := range order {
		p := &ps[i]
		if p.skip {
			continue
		}
		if p.op.Answer == Added {
			_, s = step(s, p.op)
			continue
		}
		unknown := p.op.Answer == Unknown
		held, has := s.lookup(p.op.Identity)
		switch {
		case has && held == refusedMark:
			p.op.Answer = Refused
		case has:
			p.op.Answer, p.op.OrderNo = Replayed, "O-"+p.op.Identity
		case s.stock >= p.op.quantity():
			p.op.Answer, p.op.OrderNo = Created, "O-"+p.op.Identity
		default:
			p.op.Answer = Refused
		}
		_, s = step(s, p.op)
		if unknown {
			p.op.Answer, p.op.OrderNo = Unknown, ""
		}
	}
	for i := range ps {
		if p := &ps[i]; p.op.Answer == Added {
			if r.IntN(5) == 0 { // the units came back later than recorded
				shift := 1 + r.Int64N(20)
				p.op.Call, p.op.Return = p.op.Call+shift, p.op.Return+shift
			}
		} else if r.IntN(5) == 0 { // a wrong answer
			p := &ps[i]
			p.op.Answer = Answer(r.IntN(4))
			p.op.OrderNo = []string{"O-" + p.op.Identity, "X"}[r.IntN(2)]
			if p.op.Answer == Refused || p.op.Answer == Unknown {
				p.op.OrderNo = ""
			}
		}
		h.Ops = append(h.Ops, ps[i].op)
	}
	return h
}

// TestExactAgreesWithPorcupine: on thousands of random small histories the
// specialised checker and porcupine's search give the same verdict.
func TestExactAgreesWithPorcupine(t *testing.T) {
	n := 5000
	if testing.Short() {
		n = 1000
	}
	r := rand.New(rand.NewPCG(16, 2026))
	count := map[Verdict]int{}
	for i := range n {
		h := randomHistory(r)
		want, _ := Porcupine(h, nil, 0)
		got := Check(context.Background(), h)
		count[want]++
		if got.Verdict != want {
			t.Fatalf("history %d: exact %s, porcupine %s\nstock %d\n%s\nfailures %+v", i, got.Verdict, want, h.Stock, dump(h), got.Failures)
		}
		if want == NotLinearizable {
			// Every failure's set is itself not linearizable.
			for _, f := range got.Failures {
				if v, _ := Porcupine(h, f.Ops, 0); v != NotLinearizable {
					t.Fatalf("history %d: failing set %v (%s) is %s to porcupine\nstock %d\n%s", i, f.Ops, f.Reason, v, h.Stock, dump(h))
				}
			}
		}
	}
	t.Logf("verdicts: %d linearizable, %d not", count[Linearizable], count[NotLinearizable])
	if count[Linearizable] < n/5 || count[NotLinearizable] < n/5 {
		t.Fatalf("the generator is lopsided: %v", count)
	}
}

func dump(h History) string {
	var s string
	for i, o := range h.Ops {
		s += fmt.Sprintf("  %d: [%d,%d] %s\n", i, o.Call, o.Return, o)
	}
	return s
}

// BenchmarkCheck: a correct 5,000-purchase sale of 500 units, 256 in flight.
func BenchmarkCheck(b *testing.B) {
	h := sale(5000, 500)
	for b.Loop() {
		if r := Check(context.Background(), h); r.Verdict != Linearizable {
			b.Fatal(r)
		}
	}
}

// BenchmarkPorcupine: the same history through porcupine's search.
func BenchmarkPorcupine(b *testing.B) {
	h := sale(5000, 500)
	for b.Loop() {
		if v, _ := Porcupine(h, nil, time.Minute); v != Linearizable {
			b.Fatal(v)
		}
	}
}

// sale is a correct history: buyers sent 1ms apart, each answered 256ms
// later, taking effect in the order sent.
func sale(buyers, stock int) History {
	h := History{Stock: int64(stock)}
	for i := range buyers {
		o := buy(fmt.Sprintf("u%d", i), int64(i)*1e6, int64(i+256)*1e6, Refused, "")
		if i < stock {
			o.Answer, o.OrderNo = Created, fmt.Sprintf("S%d", i)
		}
		h.Ops = append(h.Ops, o)
	}
	return h
}

// TestDrawableKeepsTheVerdict: leaving out the sends that cannot matter
// changes no verdict.
func TestDrawableKeepsTheVerdict(t *testing.T) {
	// A seckill buyer refused before a restock whose send got no answer
	// may have bought the unit that came back, which explains the later
	// refusal of another buyer: that send must stay.
	restocked := History{Ops: []Op{
		buy("a", 0, 0, Unknown, ""),
		buy("a", 1, 2, Refused, ""),
		{Identity: "restock", Quantity: 1, Call: 3, Return: 4, Answer: Added},
		buy("b", 5, 6, Refused, ""),
	}}
	for i, h := range []History{restocked} {
		want, _ := Porcupine(h, nil, 0)
		if got, _ := Porcupine(Drawable(h), nil, 0); got != want {
			t.Fatalf("hand-made history %d: %s, drawable %s\nstock %d\n%s", i, want, got, h.Stock, dump(h))
		}
	}
	r := rand.New(rand.NewPCG(7, 2026))
	for i := range 3000 {
		h := randomHistory(r)
		want, _ := Porcupine(h, nil, 0)
		if got, _ := Porcupine(Drawable(h), nil, 0); got != want {
			t.Fatalf("history %d: %s, drawable %s\nstock %d\n%s", i, want, got, h.Stock, dump(h))
		}
	}
}
