package payment_test

import (
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/payment"
	"github.com/seckill-lab/shop/internal/platform"
	"github.com/seckill-lab/shop/internal/testenv"
	"github.com/seckill-lab/shop/internal/testenv/testdb"
)

func render(t testing.TB, r payment.Result) string {
	t.Helper()
	b, err := json.Marshal(struct {
		Order     order.Order
		PaymentID int64
		RequestID string
	}{r.Order, r.Payment.ID, r.Payment.RequestID})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPayDuplicatesChargeOnce fires one pay request 20 times at once and then
// 5 more times: one payment, one debit, the same result every time.
func TestPayDuplicatesChargeOnce(t *testing.T) {
	t.Parallel()
	s := newShop(t, payment.Config{})
	p := s.product(250, 10)
	const user = 7
	s.credit(user, 1000)
	o := s.order(user, p.ID)
	req := payment.PayRequest{UserID: user, OrderNo: o.OrderNo, Key: "pay-1", RequestHash: "h1"}

	const n = 20
	results, errs := make([]payment.Result, n+5), make([]error, n+5)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { <-start; results[i], errs[i] = s.pay.Pay(bg, req) })
	}
	close(start)
	wg.Wait()
	for i := n; i < n+5; i++ {
		results[i], errs[i] = s.pay.Pay(bg, req)
	}
	fresh := 0
	want := ""
	for i := range results {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if !results[i].Replayed {
			fresh++
		}
		got := render(t, results[i])
		if want == "" {
			want = got
		} else if got != want {
			t.Fatalf("request %d answered\n%s\nwant\n%s", i, got, want)
		}
		if results[i].Order.Status != order.StatusPaid {
			t.Fatalf("request %d: order %s", i, results[i].Order.Status)
		}
	}
	if fresh != 1 {
		t.Fatalf("%d requests paid afresh, want 1", fresh)
	}
	if c := s.count("SELECT COUNT(*) FROM payments WHERE order_no = ?", o.OrderNo); c != 1 {
		t.Fatalf("%d payment rows", c)
	}
	if c := s.count("SELECT COUNT(*) FROM wallet_ledger WHERE reason = 'payment' AND user_id = ?", user); c != 1 {
		t.Fatalf("%d debits", c)
	}
	if b := s.balance(user); b != 750 {
		t.Fatalf("balance %d, want 750", b)
	}
}

// TestPayRacesSweeper runs a payment against the timeout sweeper 100 times:
// each order ends paid with its stock kept, or cancelled with its stock
// returned and no charge, never both.
func TestPayRacesSweeper(t *testing.T) {
	t.Parallel()
	s := newShop(t, payment.Config{})
	const rounds, price, user = 100, 100, 8
	p := s.product(price, rounds)
	s.credit(user, rounds*price)
	paid, cancelled := 0, 0
	for i := range rounds {
		o := s.order(user, p.ID)
		var payErr, sweepErr error
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			_, payErr = s.pay.Pay(bg, payment.PayRequest{UserID: user, OrderNo: o.OrderNo, Key: "k"})
		})
		wg.Go(func() {
			<-start
			time.Sleep(time.Duration(rand.IntN(12)) * time.Millisecond) // shift who gets there first
			_, sweepErr = s.orders.Sweep(bg, time.Nanosecond, 10)
		})
		close(start)
		wg.Wait()
		if sweepErr != nil {
			t.Fatalf("round %d: sweep: %v", i, sweepErr)
		}
		got := s.orderNow(o.OrderNo)
		payments := s.count("SELECT COUNT(*) FROM payments WHERE order_no = ?", o.OrderNo)
		debits := s.count("SELECT COUNT(*) FROM wallet_ledger WHERE reason = 'payment' AND ref = ?", o.OrderNo)
		returns := s.count("SELECT COUNT(*) FROM stock_ledger WHERE reason = 'cancel' AND order_no = ?", o.OrderNo)
		switch got.Status {
		case order.StatusPaid:
			paid++
			if payErr != nil || payments != 1 || debits != 1 || returns != 0 {
				t.Fatalf("round %d: paid order: pay err %v, payments %d, debits %d, stock returns %d", i, payErr, payments, debits, returns)
			}
		case order.StatusCancelled:
			cancelled++
			if !errors.Is(payErr, order.ErrInvalidState) || payments != 0 || debits != 0 || returns != 1 {
				t.Fatalf("round %d: cancelled order: pay err %v, payments %d, debits %d, stock returns %d", i, payErr, payments, debits, returns)
			}
		default:
			t.Fatalf("round %d: order still %s (pay err %v)", i, got.Status, payErr)
		}
	}
	t.Logf("payment won %d, sweeper won %d of %d races", paid, cancelled, rounds)
	if b := s.balance(user); b != int64((rounds-paid)*price) {
		t.Fatalf("balance %d, want %d", b, (rounds-paid)*price)
	}
	if pr, _ := s.products.Get(bg, p.ID); pr.Stock != int64(rounds-paid) {
		t.Fatalf("stock %d, want %d", pr.Stock, rounds-paid)
	}
}

// TestPayRacesUserCancel: a payment and the owner's cancel, 30 times.
func TestPayRacesUserCancel(t *testing.T) {
	t.Parallel()
	s := newShop(t, payment.Config{})
	const rounds, price, user = 30, 100, 9
	p := s.product(price, rounds)
	s.credit(user, rounds*price)
	paid := 0
	for i := range rounds {
		o := s.order(user, p.ID)
		var payErr, cancelErr error
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			_, payErr = s.pay.Pay(bg, payment.PayRequest{UserID: user, OrderNo: o.OrderNo, Key: "k"})
		})
		wg.Go(func() {
			<-start
			time.Sleep(time.Duration(rand.IntN(12)) * time.Millisecond) // shift who gets there first
			_, cancelErr = s.orders.Cancel(bg, user, o.OrderNo)
		})
		close(start)
		wg.Wait()
		switch got := s.orderNow(o.OrderNo); got.Status {
		case order.StatusPaid:
			paid++
			if payErr != nil || !errors.Is(cancelErr, order.ErrInvalidState) {
				t.Fatalf("round %d: paid, pay %v, cancel %v", i, payErr, cancelErr)
			}
		case order.StatusCancelled:
			if !errors.Is(payErr, order.ErrInvalidState) || cancelErr != nil {
				t.Fatalf("round %d: cancelled, pay %v, cancel %v", i, payErr, cancelErr)
			}
		default:
			t.Fatalf("round %d: order %s", i, got.Status)
		}
	}
	t.Logf("payment won %d of %d", paid, rounds)
	if b := s.balance(user); b != int64((rounds-paid)*price) {
		t.Fatalf("balance %d, want %d", b, (rounds-paid)*price)
	}
}

// TestPayTwoKeysOneOrder: two requests with different keys for one order
// make one payment; the other is ErrAlreadyPaid, also when retried.
func TestPayTwoKeysOneOrder(t *testing.T) {
	t.Parallel()
	s := newShop(t, payment.Config{})
	const user = 10
	p := s.product(100, 10)
	s.credit(user, 1000)
	for i := range 10 {
		o := s.order(user, p.ID)
		keys := []string{"a", "b"}
		res, errs := make([]payment.Result, 2), make([]error, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for j := range 2 {
			wg.Go(func() {
				<-start
				res[j], errs[j] = s.pay.Pay(bg, payment.PayRequest{UserID: user, OrderNo: o.OrderNo, Key: keys[j]})
			})
		}
		close(start)
		wg.Wait()
		win := 0
		if errs[0] != nil {
			win = 1
		}
		if errs[win] != nil || !errors.Is(errs[1-win], payment.ErrAlreadyPaid) {
			t.Fatalf("round %d: errors %v", i, errs)
		}
		again, err := s.pay.Pay(bg, payment.PayRequest{UserID: user, OrderNo: o.OrderNo, Key: keys[win]})
		if err != nil || !again.Replayed || again.Payment.ID != res[win].Payment.ID {
			t.Fatalf("round %d: winner's retry: %+v %v", i, again, err)
		}
		if _, err := s.pay.Pay(bg, payment.PayRequest{UserID: user, OrderNo: o.OrderNo, Key: keys[1-win]}); !errors.Is(err, payment.ErrAlreadyPaid) {
			t.Fatalf("round %d: loser's retry: %v", i, err)
		}
		if c := s.count("SELECT COUNT(*) FROM payments WHERE order_no = ?", o.OrderNo); c != 1 {
			t.Fatalf("round %d: %d payments", i, c)
		}
	}
	if b := s.balance(user); b != 0 {
		t.Fatalf("balance %d, want 0", b)
	}
}

// TestPayRefusals: insufficient funds change nothing; other users' and
// unknown orders are not found; cancelled ones are in the wrong state; a key
// reused for another request is refused from the database.
func TestPayRefusals(t *testing.T) {
	t.Parallel()
	s := newShop(t, payment.Config{})
	const user, other, never = 11, 12, 13
	p := s.product(100, 10)
	s.credit(user, 50)
	o := s.order(user, p.ID)
	req := payment.PayRequest{UserID: user, OrderNo: o.OrderNo, Key: "k", RequestHash: "h"}
	if _, err := s.pay.Pay(bg, req); !errors.Is(err, payment.ErrInsufficientFunds) {
		t.Fatalf("short of funds: %v", err)
	}
	if b := s.balance(user); b != 50 || s.orderNow(o.OrderNo).Status != order.StatusPending ||
		s.count("SELECT COUNT(*) FROM payments") != 0 || s.count("SELECT version FROM wallets WHERE user_id = ?", user) != 1 {
		t.Fatalf("a refused payment changed something (balance %d)", b)
	}
	on := s.order(never, p.ID)
	if _, err := s.pay.Pay(bg, payment.PayRequest{UserID: never, OrderNo: on.OrderNo, Key: "k"}); !errors.Is(err, payment.ErrInsufficientFunds) {
		t.Fatalf("never credited: %v", err)
	}
	if c := s.count("SELECT COUNT(*) FROM wallets WHERE user_id = ?", never); c != 0 {
		t.Fatal("a refused payment created a wallet")
	}
	if _, err := s.orders.Cancel(bg, never, on.OrderNo); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pay.Pay(bg, payment.PayRequest{UserID: other, OrderNo: o.OrderNo, Key: "k"}); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("another user's order: %v", err)
	}
	if _, err := s.pay.Pay(bg, payment.PayRequest{UserID: user, OrderNo: "RNOSUCHORDER", Key: "k"}); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("unknown order: %v", err)
	}
	s.credit(user, 50)
	res, err := s.pay.Pay(bg, req)
	if err != nil || res.Replayed {
		t.Fatalf("funded retry: %+v %v", res, err)
	}
	req.RequestHash = "other"
	if _, err := s.pay.Pay(bg, req); !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Fatalf("key reused with another request: %v", err)
	}
	c := s.order(user, p.ID)
	if _, err := s.orders.Cancel(bg, user, c.OrderNo); err != nil {
		t.Fatal(err)
	}
	s.credit(user, 100)
	if _, err := s.pay.Pay(bg, payment.PayRequest{UserID: user, OrderNo: c.OrderNo, Key: "k"}); !errors.Is(err, order.ErrInvalidState) {
		t.Fatalf("cancelled order: %v", err)
	}
	if b := s.balance(user); b != 100 {
		t.Fatalf("balance %d, want 100", b)
	}
}

// TestCredit: a retried credit adds nothing; concurrent first credits create
// one wallet; credits racing payments on one wallet keep balance = credits -
// payments, never negative.
func TestCredit(t *testing.T) {
	t.Parallel()
	s := newShop(t, payment.Config{})
	ref := payment.CreditRef("admin", 20, "c1")
	w1, rep1, err := s.pay.Credit(bg, 20, 500, ref, "h")
	if err != nil || rep1 || w1.BalanceCents != 500 {
		t.Fatalf("first credit: %+v %v %v", w1, rep1, err)
	}
	w2, rep2, err := s.pay.Credit(bg, 20, 500, ref, "h")
	if err != nil || !rep2 || w2.BalanceCents != 500 {
		t.Fatalf("retried credit: %+v %v %v", w2, rep2, err)
	}
	if _, _, err := s.pay.Credit(bg, 20, 700, ref, "h2"); !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Fatalf("key reused: %v", err)
	}

	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 20 {
		wg.Go(func() {
			<-start
			if _, _, err := s.pay.Credit(bg, 21, 100, payment.CreditRef("admin", 21, "k"+string(rune('a'+i))), ""); err != nil {
				t.Errorf("credit %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if b := s.balance(21); b != 2000 {
		t.Fatalf("balance after 20 concurrent credits %d, want 2000", b)
	}

	const user, orders = 22, 10
	p := s.product(100, orders)
	os := make([]order.Order, orders)
	for i := range os {
		os[i] = s.order(user, p.ID)
	}
	start = make(chan struct{})
	var mu sync.Mutex
	paid := 0
	for i := range orders {
		wg.Go(func() {
			<-start
			if _, _, err := s.pay.Credit(bg, user, 100, payment.CreditRef("admin", user, "r"+string(rune('a'+i))), ""); err != nil {
				t.Errorf("credit: %v", err)
			}
		})
		wg.Go(func() {
			<-start
			for range 20 { // bounded: retry while the credits have not arrived yet
				_, err := s.pay.Pay(bg, payment.PayRequest{UserID: user, OrderNo: os[i].OrderNo, Key: "k"})
				if err == nil {
					mu.Lock()
					paid++
					mu.Unlock()
					return
				}
				if !errors.Is(err, payment.ErrInsufficientFunds) {
					t.Errorf("pay: %v", err)
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	close(start)
	wg.Wait()
	if b := s.balance(user); b != int64(orders-paid)*100 || b < 0 {
		t.Fatalf("balance %d after %d payments, want %d", b, paid, (orders-paid)*100)
	}
	t.Logf("%d of %d payments went through while credits raced them", paid, orders)
}

// TestSlowPaymentKeepsLockThroughRenewal holds the account lock for 3x its
// TTL inside a payment: the watchdog renews it, a competitor that does not
// wait long gets ErrBusy and changes nothing, and one that waits commits
// only after the slow payment did.
func TestSlowPaymentKeepsLockThroughRenewal(t *testing.T) {
	t.Parallel()
	const ttl, slow = 300 * time.Millisecond, 900 * time.Millisecond
	s := newShop(t, payment.Config{LockTTL: ttl, LockWait: 10 * time.Second, SlowPayment: slow})
	impatient := payment.New(s.db, s.locks, payment.Config{LockTTL: ttl, LockWait: 50 * time.Millisecond}, nil, nil)
	const user = 30
	p := s.product(100, 10)
	s.credit(user, 10000)
	// A renewal is due every 100ms; on a starved machine one can come late
	// and the payment then (rightly) refuses to commit with ErrBusy. Such a
	// round proves nothing about renewal, so it is run again.
	for round := range 3 {
		lostBefore := s.lockMetric("shop_lock_lost_total")
		a, b := s.order(user, p.ID), s.order(user, p.ID)
		type outcome struct {
			res payment.Result
			err error
		}
		slowDone := make(chan outcome, 1)
		go func() {
			r, err := s.pay.Pay(bg, payment.PayRequest{UserID: user, OrderNo: a.OrderNo, Key: "a"})
			slowDone <- outcome{r, err}
		}()
		// Wait until the slow payment holds the account lock.
		deadline := time.Now().Add(5 * time.Second)
		for {
			l, err := s.locks.Acquire(bg, payment.AccountLockKey(user), lockx.AcquireOptions{TTL: time.Second})
			if errors.Is(err, lockx.ErrNotObtained) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			_ = l.Release(bg)
			if time.Now().After(deadline) {
				t.Fatal("the slow payment never took the account lock")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := impatient.Pay(bg, payment.PayRequest{UserID: user, OrderNo: b.OrderNo, Key: "b-busy"}); !errors.Is(err, payment.ErrBusy) {
			t.Fatalf("competing pay during the hold: %v, want ErrBusy", err)
		}
		if s.orderNow(b.OrderNo).Status != order.StatusPending || s.count("SELECT COUNT(*) FROM payments WHERE order_no = ?", b.OrderNo) != 0 {
			t.Fatal("a busy payment changed something")
		}
		rb, errB := s.pay.Pay(bg, payment.PayRequest{UserID: user, OrderNo: b.OrderNo, Key: "b"})
		ra := <-slowDone
		if lost := s.lockMetric("shop_lock_lost_total") - lostBefore; lost > 0 {
			for _, err := range []error{ra.err, errB} {
				if err != nil && !errors.Is(err, payment.ErrBusy) {
					t.Fatalf("after a lost lock: %v", err)
				}
			}
			t.Logf("round %d: %v account locks lost to a late renewal (machine starved): %v / %v; again", round, lost, ra.err, errB)
			continue
		}
		if ra.err != nil || errB != nil {
			t.Fatalf("slow payment: %v; waiting competitor: %v", ra.err, errB)
		}
		if !rb.Order.PaidAt.After(ra.res.Order.PaidAt.Add(slow)) {
			t.Fatalf("competitor wrote at %v, before the slow payment (wrote at %v, committed after +%v) was done",
				rb.Order.PaidAt, ra.res.Order.PaidAt, slow)
		}
		if n := s.lockMetric("shop_lock_renewals_total"); n < 2 {
			t.Fatalf("%v watchdog renewals during holds of 3x the TTL, want >= 2", n)
		}
		paid := s.count("SELECT COALESCE(SUM(amount_cents), 0) FROM payments WHERE user_id = ?", user)
		if b := s.balance(user); b != 10000-paid {
			t.Fatalf("balance %d, want %d", b, 10000-paid)
		}
		return
	}
	t.Fatal("every round lost its lock to late renewals: the machine is too busy for a 300ms TTL")
}

// TestAuditFlagsMoneyFaults seeds a double debit and a stray charge after a
// real payment and checks the audit (shop verify) reports M1, then repairs.
func TestAuditFlagsMoneyFaults(t *testing.T) {
	t.Parallel()
	s := newShop(t, payment.Config{})
	const user = 40
	p := s.product(100, 10)
	s.credit(user, 1000)
	o := s.order(user, p.ID)
	if _, err := s.pay.Pay(bg, payment.PayRequest{UserID: user, OrderNo: o.OrderNo, Key: "k"}); err != nil {
		t.Fatal(err)
	}
	s.mustAudit()
	flagged := func(what string) {
		t.Helper()
		r, err := audit.Check(bg, s.db, audit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range r.Violations {
			if v.Invariant == audit.M1 && v.UserID == user {
				return
			}
		}
		t.Fatalf("%s not flagged as M1: %+v", what, r.Violations)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if err := s.db.Exec(q, args...).Error; err != nil {
			t.Fatal(err)
		}
	}
	exec("UPDATE wallets SET balance_cents = balance_cents - 100 WHERE user_id = ?", user)
	flagged("a second debit of the balance without a ledger row")
	exec("UPDATE wallets SET balance_cents = balance_cents + 100 WHERE user_id = ?", user)

	exec("INSERT INTO wallet_ledger (user_id, delta, reason, ref, created_at) VALUES (?, -100, 'payment', 'RSTRAY', ?)", user, time.Now().UTC())
	exec("UPDATE wallets SET balance_cents = balance_cents - 100 WHERE user_id = ?", user)
	flagged("a charge with no payment row")
	exec("DELETE FROM wallet_ledger WHERE ref = 'RSTRAY'")
	exec("UPDATE wallets SET balance_cents = balance_cents + 100 WHERE user_id = ?", user)
}

// TestSQLiteDemo runs the money path on the embedded SQLite database (the
// demo default): pay, replay, already paid, credit replay, audit.
func TestSQLiteDemo(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	db := testdb.MigratedSQLite(t)
	url, prefix := testenv.Redis(t)
	rdb, err := platform.OpenRedis(url, "", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	locks := lockx.New(rdb, lockx.Options{Prefix: prefix + "lock:"})
	t.Cleanup(func() { _ = locks.Close() })
	inv := inventory.New(db.DB, locks, rdb, inventory.Config{LockTTL: 2 * time.Second, LockWait: 5 * time.Second, KeyPrefix: prefix}, nil, log)
	orders := order.New(db.DB, inv, idem.NewMarkers(rdb, prefix+"done:", time.Hour), order.Config{}, nil, log)
	pay := payment.New(db.DB, locks, payment.Config{LockTTL: 2 * time.Second, LockWait: 5 * time.Second}, nil, log)

	p, _, err := inv.Create(bg, "w", 100, 5, false, "", "")
	if err != nil {
		t.Fatal(err)
	}
	ref := payment.CreditRef("admin", 1, "c")
	if _, _, err := pay.Credit(bg, 1, 150, ref, ""); err != nil {
		t.Fatal(err)
	}
	if w, replayed, err := pay.Credit(bg, 1, 150, ref, ""); err != nil || !replayed || w.BalanceCents != 150 {
		t.Fatalf("credit replay: %+v %v %v", w, replayed, err)
	}
	o, _, err := orders.Regular(bg, 1, p.ID, 1, "k", "")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = pay.Pay(bg, payment.PayRequest{UserID: 1, OrderNo: o.OrderNo, Key: "same"})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pay.Pay(bg, payment.PayRequest{UserID: 1, OrderNo: o.OrderNo, Key: "other"}); !errors.Is(err, payment.ErrAlreadyPaid) {
		t.Fatalf("second key: %v", err)
	}
	if w, _ := pay.Wallet(bg, 1); w.BalanceCents != 50 {
		t.Fatalf("balance %d, want 50", w.BalanceCents)
	}
	r, err := audit.Check(bg, db.DB, audit.Options{})
	if err != nil || !r.OK {
		t.Fatalf("audit: %v %+v", err, r.Violations)
	}
}
