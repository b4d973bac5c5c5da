package loadgen

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seckill-lab/shop/internal/wire"
)

// PayConfig is one payment run: every buyer gets a seckill order and pays it
// by one of the pay groups, against a short payment timeout whose sweeper
// races the late payers.
type PayConfig struct {
	BaseURLs   []string
	AdminToken string
	Buyers     int   // default 500; the product has exactly that many units
	UserIDBase int64 // 0: random
	// Concurrency bounds buyers in flight (default 64; payments must start
	// well within the payment timeout).
	Concurrency int
	// PaymentTimeout and SweepInterval are the shop's SHOP_PAYMENT_TIMEOUT
	// and SHOP_SWEEP_INTERVAL (defaults 2s and 200ms): late payers aim at
	// the timeout, and the run waits for the sweeper to settle every order.
	PaymentTimeout time.Duration
	SweepInterval  time.Duration
	// TinyTimeout is the client timeout of the payments given up early
	// (default 3ms), Timeout of the others (default 10s).
	TinyTimeout   time.Duration
	Timeout       time.Duration
	RunID         string
	Progress      func(Stats)
	ProgressEvery time.Duration
	Client        *Client
}

// Pay groups, by buyer index modulo 10.
const (
	GroupDuplicate = "concurrent-duplicates" // 0-3: three pays at once with one key, then a retry
	GroupRetry     = "timeout-retry-newkey"  // 4-5: a pay given up early, its retry, then a new key
	GroupLate      = "late"                  // 6-7: two pays at once, around the payment timeout
	GroupNever     = "never"                 // 8: does not pay; the sweeper cancels; then pays (409 invalid_state)
	GroupBroke     = "insufficient-funds"    // 9: credited one cent too little; pays twice
)

func payGroup(i int) string {
	switch i % 10 {
	case 0, 1, 2, 3:
		return GroupDuplicate
	case 4, 5:
		return GroupRetry
	case 6, 7:
		return GroupLate
	case 8:
		return GroupNever
	default:
		return GroupBroke
	}
}

// PayResult is what a payment run did and saw.
type PayResult struct {
	Result
	Groups  map[int64]string `json:"-"` // pay group by user
	Wallets map[int64]int64  `json:"-"` // balance read after the sweeper settled
	// Unsettled counts orders still pending when the run stopped waiting.
	Unsettled int `json:"unsettled"`
}

const payPrice = 990

// Pay runs the payment scenario and returns every client record (credits,
// orders and payments) and the wallets as read at the end.
func Pay(ctx context.Context, cfg PayConfig) (PayResult, error) {
	if cfg.Buyers <= 0 {
		cfg.Buyers = 500
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 64
	}
	if cfg.PaymentTimeout <= 0 {
		cfg.PaymentTimeout = 2 * time.Second
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 200 * time.Millisecond
	}
	if cfg.TinyTimeout <= 0 {
		cfg.TinyTimeout = 3 * time.Millisecond
	}
	rc := Config{BaseURLs: cfg.BaseURLs, AdminToken: cfg.AdminToken, Users: cfg.Buyers, Stock: int64(cfg.Buyers),
		UserIDBase: cfg.UserIDBase, Concurrency: cfg.Concurrency, Timeout: cfg.Timeout, RunID: cfg.RunID,
		Failover: true, Client: cfg.Client, ProgressEvery: cfg.ProgressEvery,
		// Every buyer should get its order, so payments have something to
		// race: a buyer answered busy keeps trying for a while.
		MaxResends: 10}
	if err := rc.defaults(); err != nil {
		return PayResult{}, err
	}
	c := rc.Client
	out := PayResult{Result: Result{RunID: rc.RunID, Stock: rc.Stock, Created: map[int64]int{}}, Groups: map[int64]string{}, Wallets: map[int64]int64{}}
	p, err := c.CreateProduct(ctx, "pay "+rc.RunID, payPrice, rc.Stock, "lt-pay-product-"+rc.RunID)
	if err != nil {
		return out, err
	}
	out.ProductID = p.ID
	out.Buyers = planBuyers(rc, p.ID, nil, 0)
	for i, b := range out.Buyers {
		out.Groups[b.UserID] = payGroup(i)
	}
	if err := login(ctx, c, out.Buyers, rc.Concurrency); err != nil {
		return out, err
	}

	rec := NewRecorder(cfg.Buyers * 5)
	stop := progress(rec, cfg.Progress, rc.ProgressEvery)
	out.Started = time.Now()
	// Credits first, each sent twice at once with one key to two instances.
	pool(ctx, len(out.Buyers), rc.Concurrency, 0, func(i int) {
		b := out.Buyers[i]
		amount := int64(payPrice * 3)
		if payGroup(i) == GroupBroke {
			amount = payPrice - 1
		}
		key := "lt-credit-" + rc.RunID + "-" + strconv.FormatInt(b.UserID, 10)
		call := Call{Method: http.MethodPost, Path: "/api/v1/admin/wallets/" + strconv.FormatInt(b.UserID, 10) + "/credit",
			Token: c.AdminToken, Key: key, Body: map[string]int64{"amount_cents": amount}, Timeout: rc.Timeout}
		ps := payer{c: c, rec: rec, b: b, target: i, resends: 5}
		ps.parallel(ctx, OpCredit, call, amount, 2)
	})

	var late sync.WaitGroup
	var lastOrder time.Time
	var mu sync.Mutex
	pool(ctx, len(out.Buyers), rc.Concurrency, 0, func(i int) {
		b := out.Buyers[i]
		s := sender{c: c, cfg: &rc, rec: rec, b: b, target: i}
		s.send(ctx, 0, rc.Timeout)
		o, at, ok := rec.orderOf(b.UserID)
		if !ok {
			return
		}
		mu.Lock()
		if at.After(lastOrder) {
			lastOrder = at
		}
		mu.Unlock()
		ps := payer{c: c, rec: rec, b: b, target: i, resends: 3}
		key := func(n int) string { return "lt-pay-" + rc.RunID + "-" + o + "-" + strconv.Itoa(n) }
		call := func(k string, timeout time.Duration) Call {
			return Call{Method: http.MethodPost, Path: "/api/v1/orders/" + o + "/pay", Token: b.Token, Key: k, Timeout: timeout}
		}
		switch payGroup(i) {
		case GroupDuplicate:
			ps.parallel(ctx, OpPay, call(key(1), rc.Timeout), 0, 3)
			sleep(ctx, 50*time.Millisecond)
			ps.once(ctx, OpPay, call(key(1), rc.Timeout), 0)
		case GroupRetry:
			ps.single(ctx, OpPay, call(key(1), cfg.TinyTimeout), 0, 0)
			sleep(ctx, 50*time.Millisecond)
			ps.once(ctx, OpPay, call(key(1), rc.Timeout), 0)
			ps.once(ctx, OpPay, call(key(2), rc.Timeout), 0)
		case GroupLate:
			// Aim around the timeout, from half a second before it to 2.5s
			// after (the sweeper may be held up by the product lock under
			// load): some pay before the sweeper, some race it, some come
			// after it and must be refused.
			due := at.Add(cfg.PaymentTimeout + time.Duration((i*37)%31-5)*100*time.Millisecond)
			late.Go(func() {
				sleep(ctx, time.Until(due))
				ps.parallel(ctx, OpPay, call(key(1), rc.Timeout), 0, 2)
			})
		case GroupBroke:
			ps.once(ctx, OpPay, call(key(1), rc.Timeout), 0)
			ps.once(ctx, OpPay, call(key(1), rc.Timeout), 0)
		}
	})
	late.Wait()

	// Let the sweeper settle every order left pending, then read the
	// orders (as their owners) until none is pending or the wait is over.
	settle := lastOrder.Add(cfg.PaymentTimeout + 3*cfg.SweepInterval + 500*time.Millisecond)
	sleep(ctx, time.Until(settle))
	deadline := time.Now().Add(cfg.PaymentTimeout + 20*cfg.SweepInterval + 10*time.Second)
	for {
		pending := 0
		for _, b := range out.Buyers {
			no, _, ok := rec.orderOf(b.UserID)
			if !ok {
				continue
			}
			if o, found, err := c.Order(ctx, int(b.UserID), b.Token, no); err == nil && found && o.Status == "pending" {
				pending++
			}
		}
		out.Unsettled = pending
		if pending == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleep(ctx, cfg.SweepInterval*2)
	}
	// The buyers who never paid now pay their swept order: it is cancelled,
	// so the answer must be 409 invalid_state, and nothing is charged.
	pool(ctx, len(out.Buyers), rc.Concurrency, 0, func(i int) {
		b := out.Buyers[i]
		no, _, ok := rec.orderOf(b.UserID)
		if payGroup(i) != GroupNever || !ok {
			return
		}
		ps := payer{c: c, rec: rec, b: b, target: i, resends: 3}
		ps.once(ctx, OpPay, Call{Method: http.MethodPost, Path: "/api/v1/orders/" + no + "/pay", Token: b.Token,
			Key: "lt-pay-" + rc.RunID + "-" + no + "-late", Timeout: rc.Timeout}, 0)
	})
	for _, b := range out.Buyers {
		if w, err := c.Wallet(ctx, int(b.UserID), b.Token); err == nil {
			out.Wallets[b.UserID] = w.BalanceCents
		}
	}
	out.Ended = time.Now()
	stop()
	out.Records = rec.Records()
	out.Summary = Summarize(out.Records)
	for _, r := range out.Records {
		if r.Status == http.StatusCreated && (r.Op == OpSeckill || r.Op == OpOrder) {
			out.Created[r.ProductID]++
		}
	}
	return out, ctx.Err()
}

// orderOf returns the order number the user's order requests were answered
// with, and when the first such answer arrived.
func (r *Recorder) orderOf(user int64) (string, time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.records {
		if rec.UserID == user && (rec.Op == OpSeckill || rec.Op == OpOrder) && rec.OK() && rec.OrderNo != "" {
			return rec.OrderNo, rec.End, true
		}
	}
	return "", time.Time{}, false
}

// payer sends one buyer's money requests.
type payer struct {
	c       *Client
	rec     *Recorder
	b       Buyer
	target  int
	resends int
}

// parallel sends n copies of call at once to n instances, each with its
// resends.
func (p payer) parallel(ctx context.Context, op string, call Call, amount int64, n int) {
	var wg sync.WaitGroup
	for k := range n {
		wg.Go(func() { p.single(ctx, op, call, amount, k) })
	}
	wg.Wait()
}

// once sends call with its resends.
func (p payer) once(ctx context.Context, op string, call Call, amount int64) {
	p.single(ctx, op, call, amount, 0)
}

func (p payer) single(ctx context.Context, op string, call Call, amount int64, k int) {
	tiny := call.Timeout > 0 && call.Timeout < 100*time.Millisecond
	for r := 0; r <= p.resends; r++ {
		if ctx.Err() != nil {
			return
		}
		call.Target = (p.target + k + r) % len(p.c.BaseURLs)
		a := p.c.Do(ctx, call)
		p.rec.Add(moneyRecord(op, p.b, call, a, amount, k*100+r))
		if tiny || !retryable(a) {
			return
		}
		sleep(ctx, time.Duration(50+50*r)*time.Millisecond)
	}
}

func moneyRecord(op string, b Buyer, call Call, a Answer, amount int64, attempt int) Record {
	r := Record{Op: op, UserID: b.UserID, Key: call.Key, Target: call.Target, Attempt: attempt,
		Start: a.Start, End: a.End, Status: a.Status, Code: a.Code, Replayed: a.Replayed, AmountCents: amount}
	if a.Err != nil {
		r.Err, r.Status = a.Err.Error(), 0
	}
	if op == OpPay {
		r.ProductID = b.ProductID
		r.OrderNo = strings.TrimSuffix(strings.TrimPrefix(call.Path, "/api/v1/orders/"), "/pay")
	}
	if !r.OK() {
		return r
	}
	switch op {
	case OpCredit:
		var w wire.Wallet
		if json.Unmarshal(a.Body, &w) == nil {
			r.Balance = w.BalanceCents
		}
	case OpPay:
		var o wire.Order
		if json.Unmarshal(a.Body, &o) == nil {
			r.PaidOrderNo = o.OrderNo
			r.OrderQuantity, r.OrderUserID, r.OrderProduct = o.Quantity, o.UserID, o.ProductID
			r.OrderStatus, r.AmountCents, r.ProductID = o.Status, o.AmountCents, o.ProductID
		}
	}
	return r
}
