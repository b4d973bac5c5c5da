package linear

import (
	"context"
	"strings"
	"testing"
	"time"
)

// buy is a seckill purchase of buyer id over [call, ret].
func buy(id string, call, ret int64, a Answer, no string) Op {
	return Op{Identity: id, Seckill: true, Quantity: 1, Call: call, Return: ret, Answer: a, OrderNo: no, Note: id}
}

// order is a regular order of quantity q under key id.
func order(id string, q, call, ret int64, a Answer, no string) Op {
	return Op{Identity: id, Quantity: q, Call: call, Return: ret, Answer: a, OrderNo: no, Note: id}
}

func TestHandMadeHistories(t *testing.T) {
	cases := []struct {
		name  string
		h     History
		want  Verdict
		fails string // a word of the first failure's reason
		ops   int    // size of the first failure's set
	}{
		{"two creations of the last unit", History{Stock: 1, Ops: []Op{
			buy("u1", 0, 10, Created, "S1"), buy("u2", 5, 15, Created, "S2")}}, NotLinearizable, "orders created", 2},
		{"sold out while a unit was free during the whole request", History{Stock: 1, Ops: []Op{
			buy("u1", 0, 10, Refused, ""), buy("u2", 20, 30, Created, "S2")}}, NotLinearizable, "free during the whole request", 1},
		{"a replay naming another order", History{Stock: 2, Ops: []Op{
			buy("u1", 0, 10, Created, "S1"), buy("u1", 20, 30, Replayed, "S9")}}, NotLinearizable, "named order S9", 2},
		{"one buyer, two creations (idempotency off)", History{Stock: 5, Ops: []Op{
			buy("u1", 0, 10, Created, "S1"), buy("u1", 20, 30, Created, "S2")}}, NotLinearizable, "two new orders", 2},
		{"a replay answered before its creation was sent", History{Stock: 1, Ops: []Op{
			buy("u1", 0, 10, Replayed, "S1"), buy("u1", 20, 30, Created, "S1")}}, NotLinearizable, "before the send", 2},
		{"a buyer with an order told sold out", History{Stock: 1, Ops: []Op{
			buy("u1", 0, 10, Created, "S1"), buy("u1", 20, 30, Refused, "")}}, NotLinearizable, "both given", 2},
		{"overlapping: fits only creation first", History{Stock: 1, Ops: []Op{
			buy("u1", 0, 20, Created, "S1"), buy("u2", 5, 15, Refused, "")}}, Linearizable, "", 0},
		{"overlapping quantities: fits only one way round", History{Stock: 3, Ops: []Op{
			order("k1", 2, 0, 20, Created, "R1"), order("k2", 2, 5, 15, Refused, ""), order("k3", 1, 16, 30, Created, "R3")}}, Linearizable, "", 0},
		{"the same, but the refusal came first", History{Stock: 3, Ops: []Op{
			order("k2", 2, 0, 4, Refused, ""), order("k1", 2, 5, 20, Created, "R1")}}, NotLinearizable, "free during the whole request", 1},
		{"a no-answer request that took effect", History{Stock: 1, Ops: []Op{
			buy("u1", 0, 0, Unknown, ""), buy("u2", 10, 20, Refused, ""), buy("u1", 30, 40, Replayed, "S1")}}, Linearizable, "", 0},
		{"a no-answer request that took effect after its client gave up", History{Stock: 1, Ops: []Op{
			buy("u1", 0, 0, Unknown, ""), buy("u2", 100, 120, Refused, "")}}, Linearizable, "", 0},
		{"a no-answer request that did not take effect", History{Stock: 1, Ops: []Op{
			buy("u1", 0, 0, Unknown, ""), buy("u2", 10, 20, Created, "S2"), buy("u3", 30, 40, Refused, "")}}, Linearizable, "", 0},
		{"a replay no send could have created", History{Stock: 1, Ops: []Op{
			buy("u1", 0, 10, Replayed, "S1"), buy("u1", 20, 0, Unknown, "")}}, NotLinearizable, "no send", 1},
		{"refused key replayed, then still refused", History{Stock: 1, Ops: []Op{
			order("k1", 1, 0, 10, Created, "R1"), order("k2", 2, 5, 15, Refused, ""), order("k2", 2, 20, 30, Refused, "")}}, Linearizable, "", 0},
		{"no answer fills in only with the right quantity", History{Stock: 3, Ops: []Op{
			order("k1", 2, 0, 0, Unknown, ""), order("k2", 2, 0, 0, Unknown, ""), order("k3", 2, 10, 20, Refused, ""), order("k4", 1, 30, 40, Created, "R4")}}, Linearizable, "", 0},
		{"no answer cannot fill in more than the stock left", History{Stock: 3, Ops: []Op{
			order("k1", 2, 0, 0, Unknown, ""), order("k4", 2, 30, 40, Created, "R4"), order("k3", 2, 10, 20, Refused, "")}}, NotLinearizable, "free during the whole request", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Check(context.Background(), c.h)
			if got.Verdict != c.want {
				t.Fatalf("exact: %s, want %s: %+v", got.Verdict, c.want, got)
			}
			if pv, _ := Porcupine(c.h, nil, 10*time.Second); pv != c.want {
				t.Fatalf("porcupine: %s, want %s", pv, c.want)
			}
			if c.want != NotLinearizable {
				return
			}
			f := got.Failures[0]
			if !strings.Contains(f.Reason, c.fails) || len(f.Ops) != c.ops {
				t.Fatalf("first failure %q with %d ops, want %q with %d", f.Reason, len(f.Ops), c.fails, c.ops)
			}
			// The failing set alone cannot be ordered either (porcupine agrees).
			if pv, _ := Porcupine(c.h, f.Ops, 10*time.Second); pv != NotLinearizable {
				t.Fatalf("porcupine on the failing set %v: %s", f.Ops, pv)
			}
		})
	}
}

func TestReturnsLeaveOnlyWhatTheyCannotChange(t *testing.T) {
	ops := []Op{buy("u1", 0, 10, Created, "S1"), buy("u2", 5, 15, Created, "S2")}
	if r := Check(context.Background(), History{Stock: 1, Returns: 1, Ops: ops}); r.Verdict != Undecided || !strings.Contains(r.Reason, "returns") {
		t.Fatalf("oversell with returns: %+v", r)
	}
	if r := Check(context.Background(), History{Stock: 2, Returns: 1, Ops: ops}); r.Verdict != Linearizable {
		t.Fatalf("no refusal, fits: %+v", r)
	}
	dup := append(ops, buy("u1", 20, 30, Replayed, "S9"))
	if r := Check(context.Background(), History{Stock: 1, Returns: 1, Ops: dup}); r.Verdict != NotLinearizable {
		t.Fatalf("a wrong replay is wrong whatever came back: %+v", r)
	}
}

func TestOversellSetIsMinimal(t *testing.T) {
	h := History{Stock: 3}
	for i := range 6 {
		h.Ops = append(h.Ops, order(string(rune('a'+i)), int64(1+i%3), int64(i), int64(i+100), Created, "R"))
	}
	r := Check(context.Background(), h)
	if r.Verdict != NotLinearizable || len(r.Failures[0].Ops) != 2 {
		t.Fatalf("12 units for 3: the smallest set is two orders of 3 (or 3 and 2): %+v", r)
	}
}

// Units that come back (Added) are judged, not left unknown: sold again
// when they came back in time, and a refusal after a restock had answered,
// with the unit still free, is caught.
func TestAdditionsAreJudged(t *testing.T) {
	restock := func(q, call, ret int64) Op {
		return Op{Identity: "restock", Quantity: q, Call: call, Return: ret, Answer: Added}
	}
	cases := []struct {
		name string
		ops  []Op
		want Verdict
	}{
		{"a restock sold again", []Op{buy("u1", 0, 10, Created, "S1"), restock(1, 12, 14), buy("u2", 20, 30, Created, "S2")}, Linearizable},
		{"a refusal while the restock was under way", []Op{buy("u1", 0, 10, Created, "S1"), restock(1, 12, 40), buy("u2", 20, 30, Refused, "")}, Linearizable},
		{"refused after the restock answered", []Op{buy("u1", 0, 10, Created, "S1"), restock(1, 12, 14), buy("u2", 20, 30, Refused, "")}, NotLinearizable},
		{"sold before the restock began", []Op{buy("u1", 0, 10, Created, "S1"), buy("u2", 5, 11, Created, "S2"), restock(1, 12, 14)}, NotLinearizable},
		{"a seckill buyer refused, then sold the unit that came back", []Op{buy("u1", 0, 10, Created, "S1"), buy("u2", 11, 12, Refused, ""), restock(1, 13, 14), buy("u2", 20, 30, Created, "S2")}, Linearizable},
		{"a key refused is refused again whatever came back", []Op{order("k1", 1, 0, 10, Created, "R1"), order("k2", 1, 11, 12, Refused, ""), restock(1, 13, 14), order("k2", 1, 20, 30, Refused, "")}, Linearizable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := History{Stock: 1, Ops: c.ops}
			got := Check(context.Background(), h)
			if got.Verdict != c.want {
				t.Fatalf("exact: %s (%s %+v), want %s", got.Verdict, got.Reason, got.Failures, c.want)
			}
			if v, _ := Porcupine(h, nil, 0); v != c.want {
				t.Fatalf("porcupine: %s, want %s", v, c.want)
			}
		})
	}
}
