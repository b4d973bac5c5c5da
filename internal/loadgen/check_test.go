package loadgen

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func invariants(t *testing.T, recs []Record, f Facts) []string {
	t.Helper()
	var out []string
	for _, v := range Check(recs, f) {
		if len(v.Rows) == 0 {
			t.Errorf("%s violation without rows", v.Invariant)
		}
		if !slices.Contains(out, v.Invariant) {
			out = append(out, v.Invariant)
		}
	}
	return out
}

func TestCheck(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sk := func(user int64, status int, code, no string, replayed bool, start int) Record {
		return Record{Op: OpSeckill, UserID: user, ProductID: 1, Quantity: 1, Status: status, Code: code, OrderNo: no,
			Replayed: replayed, Start: at(start), End: at(start + 10)}
	}
	pay := func(user int64, no, key string, status int, replayed bool) Record {
		r := Record{Op: OpPay, UserID: user, ProductID: 1, OrderNo: no, Key: key, Status: status, Replayed: replayed, Start: at(0), End: at(5)}
		if status == 200 {
			r.PaidOrderNo = no
		}
		return r
	}
	orders := map[string]OrderFact{
		"S1": {OrderNo: "S1", UserID: 1, ProductID: 1, Quantity: 1, AmountCents: 100, Status: "paid"},
		"S2": {OrderNo: "S2", UserID: 2, ProductID: 1, Quantity: 1, AmountCents: 100, Status: "cancelled"},
	}
	stock := func(final int64, adds ...Addition) map[int64]StockFact {
		return map[int64]StockFact{1: {Final: final, Additions: adds}}
	}
	cases := []struct {
		name string
		recs []Record
		f    Facts
		want []string
	}{
		{"clean: 201, replays, sold out when none left", []Record{
			sk(1, 201, "", "S1", false, 0), sk(1, 200, "", "S1", true, 20), sk(2, 201, "", "S2", false, 0),
			sk(3, 409, "sold_out", "", false, 30), pay(1, "S1", "k1", 200, false), pay(1, "S1", "k1", 200, true),
			pay(1, "S1", "k2", 409, false)}, Facts{Orders: orders, Stock: stock(0)}, nil},
		{"O3: 201 naming a missing order", []Record{sk(3, 201, "", "S3", false, 0)}, Facts{Orders: orders}, []string{O3}},
		{"queued: 202s placed or rejected, a queued replay", []Record{sk(1, 202, "", "S1", false, 0), sk(4, 202, "", "S4", false, 0),
			{Op: OpSeckill, UserID: 4, ProductID: 1, Quantity: 1, Status: 200, Replayed: true, OrderNo: "S4", OrderStatus: "rejected", Start: at(20), End: at(30)}},
			Facts{Orders: orders, Rejected: map[string]bool{"S4": true}}, nil},
		{"O3q: a 202 neither placed nor rejected", []Record{sk(5, 202, "", "S5", false, 0)}, Facts{Orders: orders, Rejected: map[string]bool{}}, []string{O3q}},
		{"O3: 201 with another quantity", []Record{{Op: OpOrder, UserID: 1, ProductID: 1, Quantity: 2, Key: "k", Status: 201, OrderNo: "S1"}},
			Facts{Orders: orders}, []string{O3}},
		{"O4: one buyer, two orders", []Record{sk(1, 201, "", "S1", false, 0), sk(1, 201, "", "S9", false, 5)},
			Facts{Orders: map[string]OrderFact{"S1": orders["S1"], "S9": {OrderNo: "S9", UserID: 1, ProductID: 1, Quantity: 1}}}, []string{O4}},
		{"O4: a buyer with an order told sold out later", []Record{sk(1, 201, "", "S1", false, 0), sk(1, 409, "sold_out", "", false, 50)},
			Facts{Orders: orders, Stock: stock(0)}, []string{O4}},
		{"O5: sold out with stock left", []Record{sk(3, 409, "sold_out", "", false, 0)}, Facts{Orders: orders, Stock: stock(2)}, []string{O5}},
		{"O5: stock that came back later excuses a sold out", []Record{sk(3, 409, "sold_out", "", false, 0)},
			Facts{Orders: orders, Stock: stock(1, Addition{At: at(500), Units: 1})}, nil},
		{"O5: a sold-out book may not know yet of stock that came back just before", []Record{sk(3, 409, "sold_out", "", false, 1500)},
			Facts{Orders: orders, Stock: stock(1, Addition{At: at(500), Units: 1})}, nil},
		{"O5: nor for longer than its cache", []Record{sk(3, 409, "sold_out", "", false, 1500)},
			Facts{Orders: orders, Stock: stock(1, Addition{At: at(500), Units: 1}), SoldOutCache: 100 * time.Millisecond}, []string{O5}},
		{"M1: two fresh charges of one order", []Record{pay(1, "S1", "k1", 200, false), pay(1, "S1", "k2", 200, false)},
			Facts{Orders: orders}, []string{M1}},
		{"M1: a charge acknowledged on an order the database has cancelled", []Record{pay(2, "S2", "k1", 200, false)},
			Facts{Orders: orders}, []string{M1}},
		{"M1: wallet not credits minus payments", []Record{{Op: OpCredit, UserID: 1, Key: "c1", Status: 200, AmountCents: 500}},
			Facts{Orders: orders, Wallets: map[int64]int64{1: 300}}, []string{M1}},
		{"M1: wallet credits minus payments is fine", []Record{{Op: OpCredit, UserID: 1, Key: "c1", Status: 200, AmountCents: 500},
			{Op: OpCredit, UserID: 1, Key: "c1", Status: 200, Replayed: true, AmountCents: 500}},
			Facts{Orders: orders, Wallets: map[int64]int64{1: 400}}, nil},
		{"PAY: an order left pending", []Record{sk(3, 201, "", "S3", false, 0)},
			Facts{Orders: map[string]OrderFact{"S3": {OrderNo: "S3", UserID: 3, ProductID: 1, Quantity: 1, Status: "pending"}}, Settled: true}, []string{PAY}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := invariants(t, c.recs, c.f)
			if !slices.Equal(got, c.want) {
				t.Fatalf("violations %v, want %v: %+v", got, c.want, Check(c.recs, c.f))
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	t0 := time.Now()
	var recs []Record
	for i := 1; i <= 100; i++ {
		recs = append(recs, Record{Status: 201, Start: t0, End: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	recs = append(recs, Record{Status: 0, Err: "refused", Start: t0, End: t0})
	s := Summarize(recs)
	if s.Requests != 101 || s.Answered != 100 || s.Errors != 1 {
		t.Fatalf("counts: %+v", s)
	}
	if s.P50 != 50*time.Millisecond || s.P99 != 99*time.Millisecond || s.Max != 100*time.Millisecond {
		t.Fatalf("percentiles: p50 %s p99 %s max %s", s.P50, s.P99, s.Max)
	}
	if pts := Series(recs, 10); len(pts) == 0 || pts[0].Requests == 0 {
		t.Fatalf("series: %+v", pts)
	}
}

func TestParseMetrics(t *testing.T) {
	text := []byte(`# HELP shop_inventory_stale_fence_rejections_total x
# TYPE shop_inventory_stale_fence_rejections_total counter
shop_inventory_stale_fence_rejections_total 3
shop_http_requests_total{code="200",route="/a"} 5
shop_http_requests_total{code="503",route="/a"} 2
go_goroutines 7
`)
	m := ParseMetrics(text, "shop_")
	if m["shop_inventory_stale_fence_rejections_total"] != 3 || m["shop_http_requests_total"] != 7 || len(m) != 2 {
		t.Fatalf("%v", m)
	}
}

func TestParseMetricsBy(t *testing.T) {
	text := []byte(`# TYPE shop_order_turn_seconds histogram
shop_order_turn_seconds_bucket{size="1",le="0.005"} 3
shop_order_turn_seconds_bucket{size="1",le="+Inf"} 4
shop_order_turn_seconds_sum{size="1"} 0.02
shop_order_turn_seconds_count{size="1"} 4
shop_order_turn_seconds_sum{size="4-7"} 0.5
shop_order_turn_seconds_count{size="4-7"} 10
shop_order_turn_orders_total{instance="a, \"b\"",size="64+"} 640
shop_order_turn_orders_total{instance="c",size="64+"} 60
shop_lock_holds_total 9
`)
	m := ParseMetricsBy(text, "shop_order_turn_", "size")
	want := map[string]map[string]float64{
		"shop_order_turn_seconds_bucket": {"1": 7},
		"shop_order_turn_seconds_sum":    {"1": 0.02, "4-7": 0.5},
		"shop_order_turn_seconds_count":  {"1": 4, "4-7": 10},
		"shop_order_turn_orders_total":   {"64+": 700},
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %v\nwant %v", m, want)
	}
	if v := ParseMetricsBy(text, "shop_lock_", "size"); v["shop_lock_holds_total"][""] != 9 {
		t.Fatalf("a sample without the label: %v", v)
	}
}

func TestCheckLinear(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sk := func(user int64, status int, code, no string, replayed bool, start, end int) Record {
		return Record{Op: OpSeckill, UserID: user, ProductID: 1, Quantity: 1, Status: status, Code: code, OrderNo: no,
			Replayed: replayed, Start: at(start), End: at(end)}
	}
	initial := map[int64]int64{1: 2}
	cases := []struct {
		name    string
		recs    []Record
		f       Facts
		want    *bool
		setSize int
	}{
		{"clean sale, busy and no answer included", []Record{
			sk(1, 201, "", "S1", false, 0, 10), sk(2, 503, "busy", "", false, 0, 5), sk(2, 0, "", "", false, 6, 50),
			sk(2, 200, "", "S2", true, 60, 70), sk(3, 409, "sold_out", "", false, 80, 90), sk(1, 200, "", "S1", true, 95, 99)},
			Facts{}, ptr(true), 0},
		{"oversold: three creations of two units", []Record{
			sk(1, 201, "", "S1", false, 0, 10), sk(2, 201, "", "S2", false, 5, 15), sk(3, 201, "", "S3", false, 20, 30)},
			Facts{}, ptr(false), 3},
		{"sold out while a unit was free, shown with the later sale", []Record{
			sk(1, 201, "", "S1", false, 0, 10), sk(3, 409, "sold_out", "", false, 20, 30), sk(2, 201, "", "S2", false, 40, 50)},
			Facts{}, ptr(false), 2},
		{"a regular order's replay repeats its stored 201", []Record{
			{Op: OpOrder, UserID: 1, ProductID: 1, Quantity: 2, Key: "k", Status: 201, OrderNo: "R1", Start: at(0), End: at(10)},
			{Op: OpOrder, UserID: 1, ProductID: 1, Quantity: 2, Key: "k", Status: 201, Replayed: true, OrderNo: "R1", Start: at(20), End: at(30)},
			{Op: OpOrder, UserID: 2, ProductID: 1, Quantity: 1, Key: "k", Status: 409, Code: "insufficient_stock", Start: at(40), End: at(50)},
			{Op: OpOrder, UserID: 2, ProductID: 1, Quantity: 1, Key: "k", Status: 409, Code: "insufficient_stock", Replayed: true, Start: at(60), End: at(70)}},
			Facts{}, ptr(true), 0},
		{"a busy answer took no effect: its buyer may buy later", []Record{
			sk(1, 503, "busy", "", false, 0, 10), sk(1, 201, "", "S1", false, 20, 30)}, Facts{}, ptr(true), 0},
		{"a unit the ledger dates before the third order is sold to it", []Record{
			sk(1, 201, "", "S1", false, 0, 10), sk(2, 201, "", "S2", false, 5, 15), sk(3, 201, "", "S3", false, 20, 30)},
			Facts{Stock: map[int64]StockFact{1: {Additions: []Addition{{At: at(12), Units: 1}}}}}, ptr(true), 0},
		{"a unit that came back after the sale cannot have been sold in it", []Record{
			sk(1, 201, "", "S1", false, 0, 10), sk(2, 201, "", "S2", false, 5, 15), sk(3, 201, "", "S3", false, 20, 30)},
			Facts{Stock: map[int64]StockFact{1: {Additions: []Addition{{At: at(5000), Units: 1}}}}}, ptr(false), 3},
		{"returns at moments nobody knows leave an oversell undecided", []Record{
			sk(1, 201, "", "S1", false, 0, 10), sk(2, 201, "", "S2", false, 5, 15), sk(3, 201, "", "S3", false, 20, 30)},
			Facts{Stock: map[int64]StockFact{1: {Unknown: 1}}}, nil, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep, vs := CheckLinear(c.recs, initial, c.f, LinearOptions{})
			if (rep.Linearizable == nil) != (c.want == nil) || c.want != nil && *rep.Linearizable != *c.want {
				t.Fatalf("linearizable %v, want %v: %+v", rep.Linearizable, c.want, rep)
			}
			if c.want == nil && rep.Reason == "" {
				t.Fatal("an undecided verdict without a reason")
			}
			if c.want != nil && !*c.want {
				if len(vs) != 1 || vs[0].Invariant != LIN || len(vs[0].Rows) != c.setSize {
					t.Fatalf("violations %+v, want one LIN with %d rows", vs, c.setSize)
				}
				if p := rep.Products[0]; len(p.PictureHTML) == 0 || p.Porcupine != "not linearizable" {
					t.Fatalf("picture of the failing set: %d bytes, porcupine %q", len(p.PictureHTML), p.Porcupine)
				}
			} else if len(vs) != 0 {
				t.Fatalf("violations %+v", vs)
			}
			if c.want != nil && *c.want && rep.Products[0].Porcupine != "linearizable" {
				t.Fatalf("porcupine on the whole history: %q", rep.Products[0].Porcupine)
			}
		})
	}
	rep, _ := CheckLinear(cases[0].recs, initial, Facts{}, LinearOptions{})
	if rep.LeftOut != 1 || rep.Operations != 5 || rep.Products[0].Unanswered != 1 {
		t.Fatalf("counts: %+v", rep)
	}
}

func ptr[T any](v T) *T { return &v }

// TestCheckLinearTimedOutIsUnknown: a history not checked within the time
// bound is reported unknown, with the reason, never passed.
func TestCheckLinearTimedOutIsUnknown(t *testing.T) {
	t0 := time.Now()
	recs := []Record{{Op: OpSeckill, UserID: 1, ProductID: 1, Quantity: 1, Status: 201, OrderNo: "S1", Start: t0, End: t0.Add(time.Millisecond)}}
	rep, vs := CheckLinear(recs, map[int64]int64{1: 1}, Facts{}, LinearOptions{Timeout: time.Nanosecond})
	if rep.Linearizable != nil || len(vs) != 0 || !strings.Contains(rep.Reason, "timed out") || rep.Products[0].Verdict != "unknown" {
		t.Fatalf("%+v", rep)
	}
}

// TestCheckLinearSoldOutCache: units that came back may reach the shops'
// sold-out books as late as their SHOP_SOLD_OUT_CACHE and the database
// round trips around it, so a refusal within that is no violation, and one
// after it is.
func TestCheckLinearSoldOutCache(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	f := Facts{Stock: map[int64]StockFact{1: {Additions: []Addition{{At: at(100), Units: 1}}}}}
	for _, c := range []struct {
		cache   time.Duration
		refused int // ms
		want    bool
	}{
		{0, 2000, false}, {time.Second, 2000, false}, {3 * time.Second, 2000, true},
		{time.Second, 1250, true}, // past the cache duration by less than a round trip on a loaded machine
	} {
		recs := []Record{
			{Op: OpSeckill, UserID: 1, ProductID: 1, Quantity: 1, Status: 201, OrderNo: "S1", Start: at(0), End: at(10)},
			{Op: OpSeckill, UserID: 2, ProductID: 1, Quantity: 1, Status: 409, Code: "sold_out", Start: at(c.refused), End: at(c.refused + 10)},
		}
		rep, _ := CheckLinear(recs, map[int64]int64{1: 1}, f, LinearOptions{SoldOutCache: c.cache})
		if rep.Linearizable == nil || *rep.Linearizable != c.want {
			t.Errorf("sold-out cache %s, refused at %dms: linearizable %v, want %v", c.cache, c.refused, rep.Linearizable, c.want)
		}
	}
}

// TestCheckDoubts: A3 from records and facts. An outcome_unknown resolved
// by its order (or, with none, by its placement or a refusal) is clean;
// one never resolved, one resolved to two orders, and a refusal while the
// order exists are violations; the summary counts the answers and the
// unresolved requests.
func TestCheckDoubts(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	reg := func(status int, code, no string, start int) Record {
		return Record{Op: OpOrder, UserID: 7, ProductID: 2, Quantity: 1, Key: "k", Status: status, Code: code, OrderNo: no,
			Replayed: status == 200, Start: at(start), End: at(start + 10)}
	}
	sk := func(status int, code, no string, start int) Record {
		return Record{Op: OpSeckill, UserID: 8, ProductID: 1, Quantity: 1, Status: status, Code: code, OrderNo: no, Start: at(start), End: at(start + 10)}
	}
	r1 := OrderFact{OrderNo: "R1", UserID: 7, ProductID: 2, Quantity: 1, Kind: OpOrder}
	s1 := OrderFact{OrderNo: "S1", UserID: 8, ProductID: 1, Quantity: 1, Kind: OpSeckill}
	s2 := OrderFact{OrderNo: "S2", UserID: 8, ProductID: 1, Quantity: 1, Kind: OpSeckill}
	unknown := func(r Record) Record { r.Status, r.Code = 503, CodeOutcomeUnknown; return r }
	cases := []struct {
		name       string
		recs       []Record
		orders     map[string]OrderFact
		want       []string
		unresolved int
	}{
		{"regular: landed, the retry replays it", []Record{unknown(reg(0, "", "R1", 0)), reg(409, "idempotency_key_in_use", "", 20), reg(200, "", "R1", 40)},
			map[string]OrderFact{"R1": r1}, nil, 0},
		{"regular: not landed, the retry places it", []Record{unknown(reg(0, "", "R1", 0)), reg(201, "", "R1", 40)},
			map[string]OrderFact{"R1": r1}, nil, 0},
		{"seckill: not landed, sold out since", []Record{unknown(sk(0, "", "", 0)), sk(409, "sold_out", "", 40)},
			map[string]OrderFact{}, nil, 0},
		{"never resolved", []Record{unknown(reg(0, "", "R1", 0)), reg(503, "unavailable", "", 40)},
			map[string]OrderFact{"R1": r1}, []string{A3}, 1},
		{"refused while its order exists", []Record{unknown(sk(0, "", "", 0)), sk(409, "sold_out", "", 40)},
			map[string]OrderFact{"S1": s1}, []string{A3}, 0},
		{"two orders", []Record{unknown(sk(0, "", "", 0)), sk(201, "", "S2", 40)},
			map[string]OrderFact{"S1": s1, "S2": s2}, []string{A3}, 0},
	}
	for _, c := range cases {
		got := invariants(t, c.recs, Facts{Orders: c.orders, Stock: map[int64]StockFact{}})
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: violated %v, want %v", c.name, got, c.want)
		}
		s := Summarize(c.recs)
		if s.OutcomeUnknown != 1 || s.OutcomeUnknownUnresolved != c.unresolved {
			t.Errorf("%s: summary outcome_unknown %d, unresolved %d; want 1, %d", c.name, s.OutcomeUnknown, s.OutcomeUnknownUnresolved, c.unresolved)
		}
	}
}

// A 202 is an invocation whose completion (the consumer's commit) the
// client never sees: Unknown to the linearizability model; a rejected one
// took no effect.
func TestLinearAnswerOfQueuedOrders(t *testing.T) {
	for _, tt := range []struct {
		r      Record
		want   string
		effect bool
	}{
		{Record{Status: 202, OrderStatus: "queued"}, "no answer", true},
		{Record{Status: 200, Replayed: true, OrderStatus: "queued"}, "no answer", true},
		{Record{Status: 200, Replayed: true, OrderStatus: "rejected"}, "no answer", false},
		{Record{Status: 200, Replayed: true, OrderStatus: "pending"}, "replay", true},
	} {
		a, effect := linearAnswer(tt.r)
		if effect != tt.effect || (effect && a.String() != tt.want) {
			t.Errorf("%+v: %v %v, want %s %v", tt.r, a, effect, tt.want, tt.effect)
		}
	}
}
