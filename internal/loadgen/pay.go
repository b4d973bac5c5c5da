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
	r, err := planPay(ctx, cfg)
	if err != nil {
		return r.out, err
	}
	stop := progress(r.rec, cfg.Progress, r.rc.ProgressEvery)
	r.out.Started = time.Now()
	r.credit(ctx)
	lastOrder := r.orderAndPay(ctx)
	r.settle(ctx, lastOrder)
	r.payCancelled(ctx)
	r.readWallets(ctx)
	r.out.Ended = time.Now()
	stop()
	r.record()
	return r.out, ctx.Err()
}

// payRun is one run of the payment scenario: its settings, client and
// recorder, and the result it fills in.
type payRun struct {
	cfg PayConfig
	rc  Config
	c   *Client
	rec *Recorder
	out PayResult
}

// planPay fills in the defaults, creates the product (one unit per buyer),
// plans the buyers and their groups and logs them in.
func planPay(ctx context.Context, cfg PayConfig) (*payRun, error) {
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
	r := &payRun{cfg: cfg, rc: Config{BaseURLs: cfg.BaseURLs, AdminToken: cfg.AdminToken, Users: cfg.Buyers, Stock: int64(cfg.Buyers),
		UserIDBase: cfg.UserIDBase, Concurrency: cfg.Concurrency, Timeout: cfg.Timeout, RunID: cfg.RunID,
		Failover: true, Client: cfg.Client, ProgressEvery: cfg.ProgressEvery,
		// Every buyer should get its order, so payments have something to
		// race: a buyer answered busy keeps trying for a while.
		MaxResends: 10}}
	if err := r.rc.defaults(); err != nil {
		return r, err
	}
	rc := &r.rc
	r.c = rc.Client
	r.out = PayResult{Result: Result{RunID: rc.RunID, Stock: rc.Stock, Created: map[int64]int{}}, Groups: map[int64]string{}, Wallets: map[int64]int64{}}
	p, err := r.c.CreateProduct(ctx, "pay "+rc.RunID, payPrice, rc.Stock, "lt-pay-product-"+rc.RunID)
	if err != nil {
		return r, err
	}
	r.out.ProductID = p.ID
	r.out.Buyers = planBuyers(*rc, p.ID, nil, 0)
	for i, b := range r.out.Buyers {
		r.out.Groups[b.UserID] = payGroup(i)
	}
	if err := login(ctx, r.c, r.out.Buyers, rc.Concurrency); err != nil {
		return r, err
	}
	r.rec = NewRecorder(cfg.Buyers * 5)
	return r, nil
}

// credit credits every wallet, each credit sent twice at once with one key
// to two instances; the broke group gets one cent less than the price.
func (r *payRun) credit(ctx context.Context) {
	pool(ctx, len(r.out.Buyers), r.rc.Concurrency, 0, func(i int) {
		b := r.out.Buyers[i]
		amount := int64(payPrice * 3)
		if payGroup(i) == GroupBroke {
			amount = payPrice - 1
		}
		key := "lt-credit-" + r.rc.RunID + "-" + strconv.FormatInt(b.UserID, 10)
		call := Call{Method: http.MethodPost, Path: "/api/v1/admin/wallets/" + strconv.FormatInt(b.UserID, 10) + "/credit",
			Token: r.c.AdminToken, Key: key, Body: map[string]int64{"amount_cents": amount}, Timeout: r.rc.Timeout}
		ps := payer{c: r.c, rec: r.rec, b: b, target: i, resends: 5}
		ps.parallel(ctx, OpCredit, call, amount, 2)
	})
}

// orderAndPay has every buyer order, then pay as its group does; it
// returns when the last order was answered.
func (r *payRun) orderAndPay(ctx context.Context) (lastOrder time.Time) {
	var late sync.WaitGroup
	var mu sync.Mutex
	pool(ctx, len(r.out.Buyers), r.rc.Concurrency, 0, func(i int) {
		b := r.out.Buyers[i]
		s := sender{c: r.c, cfg: &r.rc, rec: r.rec, b: b, target: i}
		s.send(ctx, 0, r.rc.Timeout)
		o, at, ok := r.rec.orderOf(b.UserID)
		if !ok {
			return
		}
		mu.Lock()
		if at.After(lastOrder) {
			lastOrder = at
		}
		mu.Unlock()
		r.payAsGroup(ctx, i, o, at, &late)
	})
	late.Wait()
	return lastOrder
}

// payAsGroup pays buyer i's order o (answered at at) the way its group
// does; the late group's pays run on late.
func (r *payRun) payAsGroup(ctx context.Context, i int, o string, at time.Time, late *sync.WaitGroup) {
	b := r.out.Buyers[i]
	ps := payer{c: r.c, rec: r.rec, b: b, target: i, resends: 3}
	key := func(n int) string { return "lt-pay-" + r.rc.RunID + "-" + o + "-" + strconv.Itoa(n) }
	call := func(k string, timeout time.Duration) Call {
		return Call{Method: http.MethodPost, Path: "/api/v1/orders/" + o + "/pay", Token: b.Token, Key: k, Timeout: timeout}
	}
	timeout := r.rc.Timeout
	switch payGroup(i) {
	case GroupDuplicate:
		ps.parallel(ctx, OpPay, call(key(1), timeout), 0, 3)
		sleep(ctx, 50*time.Millisecond)
		ps.once(ctx, OpPay, call(key(1), timeout), 0)
	case GroupRetry:
		ps.single(ctx, OpPay, call(key(1), r.cfg.TinyTimeout), 0, 0)
		sleep(ctx, 50*time.Millisecond)
		ps.once(ctx, OpPay, call(key(1), timeout), 0)
		ps.once(ctx, OpPay, call(key(2), timeout), 0)
	case GroupLate:
		// Aim around the timeout, from half a second before it to 2.5s
		// after (the sweeper may be held up by the product lock under
		// load): some pay before the sweeper, some race it, some come
		// after it and must be refused.
		due := at.Add(r.cfg.PaymentTimeout + time.Duration((i*37)%31-5)*100*time.Millisecond)
		late.Go(func() {
			sleep(ctx, time.Until(due))
			ps.parallel(ctx, OpPay, call(key(1), timeout), 0, 2)
		})
	case GroupBroke:
		ps.once(ctx, OpPay, call(key(1), timeout), 0)
		ps.once(ctx, OpPay, call(key(1), timeout), 0)
	}
}

// settle lets the sweeper settle every order left pending, then reads the
// orders (as their owners) until none is pending or the wait is over.
func (r *payRun) settle(ctx context.Context, lastOrder time.Time) {
	cfg := r.cfg
	settle := lastOrder.Add(cfg.PaymentTimeout + 3*cfg.SweepInterval + 500*time.Millisecond)
	sleep(ctx, time.Until(settle))
	deadline := time.Now().Add(cfg.PaymentTimeout + 20*cfg.SweepInterval + 10*time.Second)
	for {
		pending := 0
		for _, b := range r.out.Buyers {
			no, _, ok := r.rec.orderOf(b.UserID)
			if !ok {
				continue
			}
			if o, found, err := r.c.Order(ctx, int(b.UserID), b.Token, no); err == nil && found && o.Status == "pending" {
				pending++
			}
		}
		r.out.Unsettled = pending
		if pending == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		sleep(ctx, cfg.SweepInterval*2)
	}
}

// payCancelled: the buyers who never paid now pay their swept order. It is
// cancelled, so the answer must be 409 invalid_state, and nothing is charged.
func (r *payRun) payCancelled(ctx context.Context) {
	pool(ctx, len(r.out.Buyers), r.rc.Concurrency, 0, func(i int) {
		b := r.out.Buyers[i]
		no, _, ok := r.rec.orderOf(b.UserID)
		if payGroup(i) != GroupNever || !ok {
			return
		}
		ps := payer{c: r.c, rec: r.rec, b: b, target: i, resends: 3}
		ps.once(ctx, OpPay, Call{Method: http.MethodPost, Path: "/api/v1/orders/" + no + "/pay", Token: b.Token,
			Key: "lt-pay-" + r.rc.RunID + "-" + no + "-late", Timeout: r.rc.Timeout}, 0)
	})
}

// readWallets reads every buyer's balance as that buyer.
func (r *payRun) readWallets(ctx context.Context) {
	for _, b := range r.out.Buyers {
		if w, err := r.c.Wallet(ctx, int(b.UserID), b.Token); err == nil {
			r.out.Wallets[b.UserID] = w.BalanceCents
		}
	}
}

// record puts the client records and their summary into the result.
func (r *payRun) record() {
	r.out.Records = r.rec.Records()
	r.out.Summary = Summarize(r.out.Records)
	for _, rec := range r.out.Records {
		if rec.Status == http.StatusCreated && (rec.Op == OpSeckill || rec.Op == OpOrder) {
			r.out.Created[rec.ProductID]++
		}
	}
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
