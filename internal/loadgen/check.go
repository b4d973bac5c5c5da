package loadgen

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/linear"
)

// Invariants the client records judge (docs/invariants.md), beside audit's.
const (
	O3 = "O3" // every acknowledged order exists, as asked
	// O3q: every accepted order (202, queued mode) ends as an order or a
	// rejection.
	O3q = "O3q"
	O4  = "O4" // every replay names the first order
	O5  = "O5" // sold out is true (no undersell)
	// PAY is the payment scenario's own rule: once the sweeper has had its
	// chance, every order is paid or cancelled, never left pending.
	PAY = "PAY"
	M1  = audit.M1 // client side: no payment or credit acknowledged twice; balance = credits - payments
)

// OrderFact is an order as the database holds it.
type OrderFact struct {
	OrderNo     string `json:"order_no"`
	UserID      int64  `json:"user_id"`
	ProductID   int64  `json:"product_id"`
	Quantity    int64  `json:"quantity"`
	AmountCents int64  `json:"amount_cents"`
	Kind        string `json:"kind"`
	Status      string `json:"status"`
}

// Addition is units that became sellable again (restock, cancellation) at
// a time the database recorded.
type Addition struct {
	At    time.Time
	Units int64
}

// StockFact is a product's stock after a run and what was added to it
// during the run, for the undersell check.
type StockFact struct {
	Final     int64 // what the stock ledger sums to at the end
	Additions []Addition
	// Unknown counts units added at times not known (the audit route gives
	// totals only); they are assumed to have come after every answer.
	Unknown int64
}

// Facts are what the database says after a run.
type Facts struct {
	// Orders by order number: every order a record names (absent: the
	// database has no such order), plus every order of the users whose
	// wallets are checked.
	Orders map[string]OrderFact
	// Rejected holds the order numbers of accepted orders the queued mode
	// rejected (seckill_rejections) among those the records name.
	Rejected map[string]bool
	// Stock by product; products absent are not checked for undersell.
	Stock map[int64]StockFact
	// Wallets holds balances by user; nil leaves the wallet check out.
	Wallets map[int64]int64
	// Settled asks that every acknowledged order be paid or cancelled.
	Settled bool
	// Slack widens the window in which an addition counts as "after" an
	// answer, for clock differences (default 100ms).
	Slack time.Duration
	// SoldOutCache is the shops' SHOP_SOLD_OUT_CACHE (default 1s): a
	// refusal from a sold-out book may be that much older than units that
	// came back (plus the database round trips, as in CheckLinear), so O5
	// counts such units as possibly not back yet.
	SoldOutCache time.Duration
	// MaxRows caps the rows attached to one violation (default 20).
	MaxRows int
}

// Check judges the records against the facts and returns the violations of
// O3, O4, O5, A3 and the client-side money rules, in audit's format.
func Check(recs []Record, f Facts) []audit.Violation {
	if f.Slack <= 0 {
		f.Slack = 100 * time.Millisecond
	}
	if f.SoldOutCache <= 0 {
		f.SoldOutCache = time.Second
	}
	if f.MaxRows <= 0 {
		f.MaxRows = 20
	}
	v := &violations{max: f.MaxRows, m: map[string]*vbucket{}}
	checkOrders(recs, f, v)
	checkUndersell(recs, f, v)
	checkMoney(recs, f, v)
	checkDoubts(recs, f, v)
	return v.list()
}

func isOrderOp(op string) bool { return op == OpSeckill || op == OpOrder }

// identity is the logical request a record belongs to: one seckill buyer
// and product, or one user's Idempotency-Key.
func identity(r Record) string {
	if r.Op == OpSeckill {
		return fmt.Sprintf("seckill u%d p%d", r.UserID, r.ProductID)
	}
	return fmt.Sprintf("%s u%d key %s", r.Op, r.UserID, r.Key)
}

// checkOrders: O3 (each acknowledged order exists with what was asked) and
// O4 (every 2xx of one logical request names one order; a buyer who holds
// an order is never told sold out afterwards).
func checkOrders(recs []Record, f Facts, v *violations) {
	type group struct {
		first    *Record // earliest answered 2xx
		orders   map[string]bool
		rows     []Record
		negative []Record // business "no" after a 2xx arrived
	}
	groups := map[string]*group{}
	var keys []string
	lostAccepted := map[string]bool{} // an accepted order lost is counted once, however often it was answered
	for i := range recs {
		r := &recs[i]
		if !isOrderOp(r.Op) {
			continue
		}
		k := identity(*r)
		g := groups[k]
		if g == nil {
			g = &group{orders: map[string]bool{}}
			groups[k] = g
			keys = append(keys, k)
		}
		g.rows = append(g.rows, *r)
		if !r.OK() {
			continue
		}
		if g.first == nil || r.End.Before(g.first.End) {
			g.first = r
		}
		g.orders[r.OrderNo] = true
		// O3: the order the client was told about exists as asked; O3q:
		// an accepted one exists or was rejected.
		o, ok := f.Orders[r.OrderNo]
		switch {
		case r.Accepted() && !ok && f.Rejected[r.OrderNo]:
		case r.Accepted() && !ok && lostAccepted[r.OrderNo]:
		case r.Accepted() && !ok:
			lostAccepted[r.OrderNo] = true
			v.add(O3q, r.ProductID, r.UserID, "accepted orders (202 or a queued replay) that ended neither as an order nor as a rejection: %d", row(*r))
		case r.OrderNo == "":
			v.add(O3, r.ProductID, r.UserID, "acknowledgements (2xx) naming no order number: %d", row(*r))
		case !ok:
			v.add(O3, r.ProductID, r.UserID, "acknowledged orders (2xx) the database does not have: %d", row(*r))
		case o.Quantity != r.Quantity || o.UserID != r.UserID || o.ProductID != r.ProductID:
			m := row(*r)
			m["db_quantity"], m["db_user_id"], m["db_product_id"] = o.Quantity, o.UserID, o.ProductID
			v.add(O3, r.ProductID, r.UserID, "acknowledged orders whose database row differs from the request (quantity, user or product): %d", m)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		g := groups[k]
		if len(g.orders) > 1 {
			for _, r := range g.rows {
				if r.OK() {
					v.add(O4, r.ProductID, r.UserID, "answers (2xx) of one logical request naming different orders: %d", row(r))
				}
			}
		}
		if g.first == nil {
			continue
		}
		for _, r := range g.rows {
			if r.Start.After(g.first.End) && (r.Code == "sold_out" || r.Code == "insufficient_stock") {
				m := row(r)
				m["first_order_no"] = g.first.OrderNo
				v.add(O4, r.ProductID, r.UserID, "repeats of a request that already had its order, answered with a refusal instead of the order: %d", m)
			}
		}
	}
}

// checkUndersell: O5. A refusal for lack of stock is false when, at the
// moment of the request, at least the asked quantity was provably unsold:
// the final stock minus everything added back since the request started
// (or shortly before: a shop's sold-out book may not know of it yet, see
// Facts.SoldOutCache) is a lower bound of the stock at that moment.
func checkUndersell(recs []Record, f Facts, v *violations) {
	for _, r := range recs {
		var q int64
		switch {
		case r.Op == OpSeckill && r.Code == "sold_out":
			q = 1
		case r.Op == OpOrder && r.Code == "insufficient_stock":
			q = r.Quantity
		default:
			continue
		}
		s, ok := f.Stock[r.ProductID]
		if !ok {
			continue
		}
		bound := s.Final - s.Unknown
		for _, a := range s.Additions {
			if !a.At.Before(r.Start.Add(-f.Slack - f.SoldOutCache - additionReadSlack)) {
				bound -= a.Units
			}
		}
		if bound >= q {
			m := row(r)
			m["unsold_at_least"], m["final_stock"] = bound, s.Final
			v.add(O5, r.ProductID, r.UserID, "refusals for lack of stock while enough stock was provably unsold (undersell): %d", m)
		}
	}
}

// checkMoney: payments and credits. A pay answered 2xx names the paid
// order, and the database has it paid; one order is charged (a fresh,
// non-replayed 2xx) at most once; one credit key is applied at most once;
// each checked wallet holds the acknowledged credits minus its paid orders;
// and, when Settled, no acknowledged order is left pending.
func checkMoney(recs []Record, f Facts, v *violations) {
	fresh := map[string][]Record{} // pay: by order; credit: by key
	credited := map[int64]map[string]int64{}
	uncertain := map[int64]bool{}
	creditSeen := map[string]bool{}
	for _, r := range recs {
		switch r.Op {
		case OpPay:
			if !r.OK() {
				continue
			}
			if r.PaidOrderNo != r.OrderNo {
				m := row(r)
				m["answer_order_no"] = r.PaidOrderNo
				v.add(O4, r.ProductID, r.UserID, "payments answered (2xx) with another order than the one paid: %d", m)
			}
			if !r.Replayed {
				fresh["pay "+r.OrderNo] = append(fresh["pay "+r.OrderNo], r)
			}
			if o, ok := f.Orders[r.OrderNo]; !ok || o.Status != "paid" {
				m := row(r)
				m["db_status"] = o.Status
				if !ok {
					m["db_status"] = "missing"
				}
				v.add(M1, r.ProductID, r.UserID, "payments acknowledged (2xx) whose order is not paid in the database: %d", m)
			}
		case OpCredit:
			if credited[r.UserID] == nil {
				credited[r.UserID] = map[string]int64{}
			}
			creditSeen[r.Key] = creditSeen[r.Key] || r.OK()
			if r.OK() {
				credited[r.UserID][r.Key] = r.AmountCents
				if !r.Replayed {
					fresh["credit "+r.Key] = append(fresh["credit "+r.Key], r)
				}
			}
		}
	}
	for _, r := range recs {
		if r.Op == OpCredit && !creditSeen[r.Key] && r.Failed() {
			uncertain[r.UserID] = true // applied or not: nobody can tell
		}
	}
	keys := make([]string, 0, len(fresh))
	for k := range fresh {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if rs := fresh[k]; len(rs) > 1 {
			for _, r := range rs {
				v.add(M1, r.ProductID, r.UserID, "charges or credits acknowledged as new (2xx, not replayed) more than once for one order or credit key: %d", row(r))
			}
		}
	}
	if f.Wallets != nil {
		paid := map[int64]int64{}
		for _, o := range f.Orders {
			if o.Status == "paid" {
				paid[o.UserID] += o.AmountCents
			}
		}
		users := make([]int64, 0, len(credited))
		for u := range credited {
			users = append(users, u)
		}
		sort.Slice(users, func(i, j int) bool { return users[i] < users[j] })
		for _, u := range users {
			bal, ok := f.Wallets[u]
			if !ok || uncertain[u] {
				continue
			}
			var in int64
			for _, a := range credited[u] {
				in += a
			}
			if bal != in-paid[u] {
				v.add(M1, 0, u, "wallets whose balance is not the acknowledged credits minus the paid orders: %d",
					map[string]any{"user_id": u, "balance_cents": bal, "credited_cents": in, "paid_cents": paid[u], "difference": bal - (in - paid[u])})
			}
		}
	}
	if f.Settled {
		seen := map[string]bool{}
		for _, r := range recs {
			if !isOrderOp(r.Op) || !r.OK() || seen[r.OrderNo] {
				continue
			}
			seen[r.OrderNo] = true
			if o, ok := f.Orders[r.OrderNo]; ok && o.Status != "paid" && o.Status != "cancelled" {
				m := row(r)
				m["db_status"] = o.Status
				v.add(PAY, r.ProductID, r.UserID, "orders neither paid nor cancelled after the payment timeout and the sweeper: %d", m)
			}
		}
	}
}

func row(r Record) map[string]any {
	m := map[string]any{
		"op": r.Op, "user_id": r.UserID, "target": r.Target, "attempt": r.Attempt,
		"start": r.Start.UTC().Format("15:04:05.000000"), "latency_ms": r.Latency().Milliseconds(), "status": r.Status,
	}
	if r.ProductID != 0 {
		m["product_id"] = r.ProductID
	}
	if r.Quantity != 0 {
		m["quantity"] = r.Quantity
	}
	if r.Key != "" {
		m["key"] = r.Key
	}
	if r.Code != "" {
		m["code"] = r.Code
	}
	if r.Err != "" {
		m["err"] = r.Err
	}
	if r.OrderNo != "" {
		m["order_no"] = r.OrderNo
	}
	if r.Replayed {
		m["replayed"] = true
	}
	return m
}

// violations gathers rows under one violation per (invariant, product,
// fault), like audit does.
type violations struct {
	max   int
	m     map[string]*vbucket
	order []string
}

type vbucket struct {
	inv     string
	product int64
	users   map[int64]bool
	fault   string
	n       int
	rows    []map[string]any
}

func (v *violations) add(inv string, product, user int64, fault string, r map[string]any) {
	k := fmt.Sprintf("%s|%d|%s", inv, product, fault)
	b := v.m[k]
	if b == nil {
		b = &vbucket{inv: inv, product: product, fault: fault, users: map[int64]bool{}}
		v.m[k] = b
		v.order = append(v.order, k)
	}
	b.n++
	if user != 0 {
		b.users[user] = true
	}
	if len(b.rows) < v.max {
		b.rows = append(b.rows, r)
	}
}

func (v *violations) list() []audit.Violation {
	out := make([]audit.Violation, 0, len(v.order))
	for _, k := range v.order {
		b := v.m[k]
		var user int64
		if len(b.users) == 1 {
			for u := range b.users {
				user = u
			}
		}
		out = append(out, audit.Violation{Invariant: b.inv, ProductID: b.product, UserID: user,
			Detail: fmt.Sprintf(b.fault, b.n), Rows: b.rows})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Invariant != out[j].Invariant {
			return out[i].Invariant < out[j].Invariant
		}
		return out[i].ProductID < out[j].ProductID
	})
	return out
}

// OrderNumbers lists every order number the records name.
func OrderNumbers(recs []Record) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range recs {
		for _, no := range []string{r.OrderNo, r.PaidOrderNo} {
			if no != "" && !seen[no] {
				seen[no] = true
				out = append(out, no)
			}
		}
	}
	sort.Strings(out)
	return out
}

// FactsFromAPI gathers the facts through the API alone (for shops the
// harness cannot reach the database of): each order the records name, read
// as its owner, and each product's stock from the admin audit route. The
// times of additions are not known that way, so every unit returned or
// restocked since the start counts as added after every answer.
func FactsFromAPI(ctx context.Context, c *Client, recs []Record, tokens map[int64]string, initial map[int64]int64) (Facts, error) {
	f := Facts{Orders: map[string]OrderFact{}, Stock: map[int64]StockFact{}}
	owner := map[string]int64{}
	for _, r := range recs {
		if r.OrderNo != "" {
			owner[r.OrderNo] = r.UserID
		}
	}
	nos := OrderNumbers(recs)
	var mu sync.Mutex
	var firstErr error
	pool(ctx, len(nos), 32, 0, func(i int) {
		no := nos[i]
		o, found, err := c.Order(ctx, i, tokens[owner[no]], no)
		mu.Lock()
		defer mu.Unlock()
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("order %s: %w", no, err)
		}
		if found {
			f.Orders[no] = OrderFact{OrderNo: o.OrderNo, UserID: o.UserID, ProductID: o.ProductID, Quantity: o.Quantity,
				AmountCents: o.AmountCents, Kind: o.Kind, Status: o.Status}
		}
	})
	if firstErr != nil {
		return f, firstErr
	}
	for id, start := range initial {
		r, err := c.Audit(ctx, id)
		if err != nil {
			return f, err
		}
		for _, p := range r.Products {
			if p.ProductID == id {
				// The ledger's sum: it equals the stock on a sound shop (I3)
				// and still says what was sold after a lost update.
				f.Stock[id] = StockFact{Final: p.Ledger, Unknown: max(0, p.Added-start) + p.Returned}
			}
		}
	}
	return f, nil
}

// LIN is linearizability: one order of all the purchases of a product,
// each taking effect between its send and its answer, under which every
// answer is what one correct stock counter would have given.
const LIN = "LIN"

// LinearOptions bound the linearizability check of one run.
type LinearOptions struct {
	// Timeout bounds the exact check of all products (default 30s); a
	// product not decided in time is "unknown", never passed. Pictures are
	// bounded apart (PictureTimeout each).
	Timeout time.Duration
	// PictureOps: a linearizable product's whole history is drawn (and
	// cross-checked by porcupine) when it has at most this many operations
	// (default 1000). A failing product's smallest failing set is always drawn.
	PictureOps int
	// PictureTimeout bounds porcupine's search for one picture (default 2s).
	PictureTimeout time.Duration
	// SoldOutCache is the shops' SHOP_SOLD_OUT_CACHE (default 1s, the
	// shop's): a shop may refuse from its sold-out book for that long after
	// units came back, so an addition may take effect that late.
	SoldOutCache time.Duration
}

// LinearReport is the linearizability verdict of one run's histories.
type LinearReport struct {
	// Linearizable: true when every product's history is, false when one
	// is not, null (nil) when one could not be decided.
	Linearizable *bool           `json:"linearizable"`
	Reason       string          `json:"reason,omitempty"` // why null
	Products     []ProductLinear `json:"products"`
	Operations   int             `json:"operations"`
	// LeftOut counts answers that promise no effect (503 busy or
	// unavailable, 429, other 4xx): they are not operations of the history.
	LeftOut int `json:"left_out"`
	// Took is the exact check's time; PicturesTook porcupine's, drawing.
	Took         time.Duration `json:"took_ns"`
	PicturesTook time.Duration `json:"pictures_took_ns"`
}

// ProductLinear is one product's history and verdict.
type ProductLinear struct {
	ProductID  int64  `json:"product_id"`
	Stock      int64  `json:"stock"`
	Operations int    `json:"operations"`
	Unanswered int    `json:"unanswered"`
	Verdict    string `json:"verdict"` // linearizable, not linearizable, unknown
	Reason     string `json:"reason,omitempty"`
	// Failures, each with its smallest set of operations that cannot be
	// ordered (role "failing") and what shows why (role "evidence").
	Failures []LinearFailure `json:"failures,omitempty"`
	// Picture says what porcupine's visualization of this product shows
	// ("" when none was drawn), and Porcupine porcupine's own verdict on it.
	Picture     string `json:"picture,omitempty"`
	PictureFile string `json:"picture_file,omitempty"` // set by whoever writes it
	Porcupine   string `json:"porcupine,omitempty"`
	NoPicture   string `json:"no_picture,omitempty"` // why none was drawn
	PictureHTML []byte `json:"-"`
}

// LinearFailure is one reason a history is not linearizable.
type LinearFailure struct {
	Reason string           `json:"reason"`
	Rows   []map[string]any `json:"rows"`
}

// CheckLinear judges the purchase records (seckill and regular orders) of
// each product whose starting stock is in initial, against facts' stock
// additions. It returns the report and one LIN violation per product that
// is not linearizable, its rows the smallest failing set.
func CheckLinear(recs []Record, initial map[int64]int64, f Facts, o LinearOptions) (LinearReport, []audit.Violation) {
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.PictureOps <= 0 {
		o.PictureOps = 1000
	}
	if o.PictureTimeout <= 0 {
		o.PictureTimeout = 2 * time.Second
	}
	if o.SoldOutCache <= 0 {
		o.SoldOutCache = time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	t0 := time.Now()
	hs, src, leftOut := linearHistories(recs, initial, f, o.SoldOutCache)
	rep := LinearReport{LeftOut: leftOut, Products: []ProductLinear{}, Took: time.Since(t0)}
	var vs []audit.Violation
	ids := make([]int64, 0, len(hs))
	for id := range hs {
		ids = append(ids, id)
	}
	// Smallest first: one product whose check runs out of time (a search
	// over a hot product's thousands of operations) leaves the others
	// decided rather than unchecked. The report lists them by id.
	sort.Slice(ids, func(i, j int) bool {
		if a, b := len(hs[ids[i]].Ops), len(hs[ids[j]].Ops); a != b {
			return a < b
		}
		return ids[i] < ids[j]
	})
	verdict, reason := linear.Linearizable, ""
	for _, id := range ids {
		h := hs[id]
		t := time.Now()
		p, res, v := judgeProduct(ctx, id, h, src[id], o)
		rep.Took += time.Since(t)
		t = time.Now()
		drawProduct(&p, h, res, o)
		rep.PicturesTook += time.Since(t)
		rep.Operations += len(h.Ops)
		rep.Products = append(rep.Products, p)
		switch {
		case v != nil:
			vs = append(vs, *v)
			verdict = linear.NotLinearizable
		case res.Verdict == linear.Undecided && verdict == linear.Linearizable:
			verdict, reason = linear.Undecided, fmt.Sprintf("product %d: %s", id, res.Reason)
		}
	}
	sort.Slice(rep.Products, func(i, j int) bool { return rep.Products[i].ProductID < rep.Products[j].ProductID })
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].ProductID < vs[j].ProductID })
	switch verdict {
	case linear.Linearizable:
		t := true
		rep.Linearizable = &t
	case linear.NotLinearizable:
		f := false
		rep.Linearizable = &f
	default:
		rep.Reason = reason
	}
	return rep, vs
}

// judgeProduct checks one product's history with the exact checker; a
// history that is not linearizable gives a LIN violation whose rows are its
// smallest failing set.
func judgeProduct(ctx context.Context, id int64, h linear.History, src []Record, o LinearOptions) (ProductLinear, linear.Result, *audit.Violation) {
	p := ProductLinear{ProductID: id, Stock: h.Stock, Operations: len(h.Ops)}
	for _, op := range h.Ops {
		if op.Answer == linear.Unknown {
			p.Unanswered++
		}
	}
	res := linear.Result{Verdict: linear.Undecided, Reason: "timed out before this product (" + o.Timeout.String() + ")"}
	if ctx.Err() == nil {
		res = linear.Check(ctx, h)
	}
	p.Verdict, p.Reason = res.Verdict.String(), res.Reason
	if res.Verdict != linear.NotLinearizable {
		return p, res, nil
	}
	for _, fl := range res.Failures {
		p.Failures = append(p.Failures, LinearFailure{Reason: fl.Reason, Rows: linearRows(h, src, fl)})
	}
	first := res.Failures[0]
	return p, res, &audit.Violation{Invariant: LIN, ProductID: id, Detail: fmt.Sprintf(
		"not linearizable: %s (smallest failing set: %d operations; %d reasons found)", first.Reason, len(first.Ops), len(res.Failures)),
		Rows: p.Failures[0].Rows}
}

// drawProduct has porcupine draw the product: the smallest failing set, or
// a passing history small enough; porcupine's own verdict on what it drew
// is a cross-check of the exact checker's.
func drawProduct(p *ProductLinear, h linear.History, res linear.Result, o LinearOptions) {
	var draw []int
	switch {
	case res.Verdict == linear.NotLinearizable:
		draw, p.Picture = res.Failures[0].Set(h), "the smallest failing set, with its evidence"
	case res.Verdict == linear.Linearizable && len(h.Ops) <= o.PictureOps:
		h, p.Picture = linear.Drawable(h), "the whole history (of the sends that got no answer, only those that can matter)"
	case res.Verdict == linear.Linearizable:
		p.NoPicture = fmt.Sprintf("%d operations, more than the %d a passing picture draws", len(h.Ops), o.PictureOps)
		return
	default:
		return
	}
	html, pv, err := linear.Picture(h, draw, o.PictureTimeout)
	p.Porcupine = pv.String()
	switch {
	case pv == linear.Undecided:
		p.Porcupine = "unknown (its search timed out after " + o.PictureTimeout.String() + "; the picture shows how far it got)"
	case pv != res.Verdict:
		p.Porcupine += " (DISAGREES with the exact checker: a bug in one of them)"
	}
	if err != nil {
		p.NoPicture = err.Error()
		return
	}
	p.PictureHTML = html
}

// linearHistories turns the order records into one history per product
// with a known starting stock; src maps each operation back to its record.
func linearHistories(recs []Record, initial map[int64]int64, f Facts, lag time.Duration) (map[int64]linear.History, map[int64][]Record, int) {
	hs := map[int64]linear.History{}
	src := map[int64][]Record{}
	var t0 time.Time
	for _, r := range recs {
		if isOrderOp(r.Op) && (t0.IsZero() || r.Start.Before(t0)) {
			t0 = r.Start
		}
	}
	leftOut := 0
	for _, r := range recs {
		stock, ok := initial[r.ProductID]
		if !isOrderOp(r.Op) || !ok {
			continue
		}
		a, effect := linearAnswer(r)
		if !effect {
			leftOut++
			continue
		}
		h := hs[r.ProductID]
		if h.Ops == nil {
			h.Stock = stock
			if s, ok := f.Stock[r.ProductID]; ok {
				h.Returns = s.Unknown
				for _, ad := range s.Additions {
					// The ledger row's time is taken inside the transaction
					// that returns the units: they are sellable from its
					// commit, which follows it, and the sold-out book
					// learns of them a little later still.
					from, to := ad.At.Add(-additionSlack), ad.At.Add(lag+additionReadSlack)
					h.Ops = append(h.Ops, linear.Op{Identity: "addition", Quantity: ad.Units, Answer: linear.Added,
						Call: from.Sub(t0).Nanoseconds(), Return: to.Sub(t0).Nanoseconds(),
						Note: fmt.Sprintf("%d units back at %s (restock or cancellation, as the stock ledger dates it)", ad.Units, ad.At.UTC().Format("15:04:05.000"))})
					src[r.ProductID] = append(src[r.ProductID], Record{Op: "addition", ProductID: r.ProductID, Quantity: ad.Units, Start: from, End: to, Status: 200})
				}
			}
		}
		id := fmt.Sprintf("buyer %d", r.UserID)
		if r.Op == OpOrder {
			id = fmt.Sprintf("user %d key %s", r.UserID, r.Key)
		}
		h.Ops = append(h.Ops, linear.Op{Identity: id, Seckill: r.Op == OpSeckill, Quantity: max(1, r.Quantity),
			Call: r.Start.Sub(t0).Nanoseconds(), Return: r.End.Sub(t0).Nanoseconds(), Answer: a, OrderNo: r.OrderNo,
			Note: fmt.Sprintf("user %d, instance %d, attempt %d: %s, %s", r.UserID, r.Target+1, r.Attempt, Outcome(r), r.Latency().Round(time.Microsecond))})
		hs[r.ProductID] = h
		src[r.ProductID] = append(src[r.ProductID], r)
	}
	return hs, src, leftOut
}

// An addition (a stock ledger row of a restock or cancellation) takes effect
// between additionSlack before the row's time (clocks) and, after it, the
// shops' sold-out cache duration (LinearOptions.SoldOutCache) plus
// additionReadSlack. A shop's sold-out book trusts an entry for the cache
// duration from the end of the row read that made it, and meanwhile its
// requests are refused from memory; the units come back at the commit that
// follows the ledger row, and while one request re-reads the row the
// others still use the entry. Those database round trips are the slack:
// chaos runs on a loaded 2-core machine were refused up to 100ms past the
// cache duration (not linearizable with the cache duration alone).
const (
	additionSlack     = 100 * time.Millisecond
	additionReadSlack = 500 * time.Millisecond
)

// linearAnswer is what an answer tells the model; effect is false for
// answers that promise nothing changed (every 503 but outcome_unknown).
func linearAnswer(r Record) (a linear.Answer, effect bool) {
	switch {
	case r.OrderStatus == "rejected": // accepted, then never placed: no effect
		return 0, false
	case r.Accepted(): // a 202 completes at the consumer's commit, unseen here
		return linear.Unknown, true
	case r.OK() && r.Replayed: // a regular order's replay repeats the stored 201
		return linear.Replayed, true
	case r.Status == 201:
		return linear.Created, true
	case r.OK():
		return linear.Replayed, true
	case r.Code == "sold_out" || r.Code == "insufficient_stock":
		return linear.Refused, true
	case r.Status == 0 || (r.Status >= 500 && r.Status != 503) || r.Code == CodeOutcomeUnknown:
		// No answer, or one that says the order may exist: it may have
		// taken effect at any time since it was sent.
		return linear.Unknown, true
	}
	return 0, false
}

// linearRows are a failure's operations as report rows, in time order.
func linearRows(h linear.History, src []Record, fl linear.Failure) []map[string]any {
	failing := map[int]bool{}
	for _, i := range fl.Ops {
		failing[i] = true
	}
	var out []map[string]any
	for _, i := range fl.Set(h) {
		r := src[i]
		m := row(r)
		m["role"] = "evidence"
		if failing[i] {
			m["role"] = "failing"
		}
		m["answer"] = Outcome(r)
		if r.Status != 0 {
			m["end"] = r.End.UTC().Format("15:04:05.000000")
		} else {
			m["end"] = "never (may take effect later)"
		}
		out = append(out, m)
	}
	return out
}
