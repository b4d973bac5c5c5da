package order_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/inventory"
)

// TestRedisGateSettlesEveryAdmission: two instances sell a redis-gate
// product to buyers who each send their request twice at once (a double
// click, a retry racing the first), some asking more than is left. Every
// admission is settled: afterwards nothing is held, the gate equals the
// stock, and the audit (R1 included) is clean; a cancellation gives its
// units back to the gate too.
func TestRedisGateSettlesEveryAdmission(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a, b := f.shop(t), f.shop(t)
	id := f.product(t, a, 10)
	for _, s := range []shop{a, b} {
		s.inv.UseStrategy(id, inventory.RedisGate)
	}
	ctx := context.Background()
	// The audit runs all through the sale: units in flight are never R1's
	// fault, whichever order its reads fall in.
	auditing, stopAudit := context.WithCancel(ctx)
	audited := make(chan []audit.Violation, 1)
	go func() {
		var r1 []audit.Violation
		for auditing.Err() == nil {
			r, err := audit.Check(ctx, f.DB, audit.Options{ProductID: id, StockMirror: b.inv.GateLevel})
			if err != nil {
				t.Errorf("audit during the sale: %v", err)
				break
			}
			for _, v := range r.Violations {
				if v.Invariant == audit.R1 {
					r1 = append(r1, v)
				}
			}
		}
		audited <- r1
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstNo string
	for u := int64(1); u <= 12; u++ {
		for i, s := range []shop{a, b} {
			wg.Go(func() {
				var no string
				if u%3 == 0 { // a regular order, the same key twice, quantities 1 and 2
					o, _, err := s.orders.Regular(ctx, u, id, int64(i+1), "k-"+strconv.FormatInt(u, 10), "h"+strconv.Itoa(i))
					if err == nil {
						no = o.OrderNo
					}
				} else {
					o, _, err := s.orders.Seckill(ctx, u, id)
					if err == nil {
						no = o.OrderNo
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if firstNo == "" && no != "" && u%3 != 0 {
					firstNo = no
				}
			})
		}
	}
	wg.Wait()
	stopAudit()
	if r1 := <-audited; len(r1) != 0 {
		t.Errorf("R1 during the sale: %+v", r1)
	}

	check := func(when string) {
		t.Helper()
		// A batch settles its gate holds when its deduction closes, after
		// the release and so after its answers: within moments, where a
		// hold left unsettled would stay until its lease (a minute) ends.
		var units, held int64
		var ok bool
		var err error
		for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			units, held, ok, err = a.inv.GateLevel(ctx, id)
			if err != nil || !ok || held == 0 || time.Now().After(end) {
				break
			}
		}
		if err != nil || !ok {
			t.Fatalf("%s: gate level: %v (exists %v)", when, err, ok)
		}
		if stock := f.stock(t, id); units != stock || held != 0 {
			t.Errorf("%s: gate %d, held %d, stock %d; want gate = stock and nothing held", when, units, held, stock)
		}
		r, err := audit.Check(ctx, f.DB, audit.Options{ProductID: id, StockMirror: a.inv.GateLevel})
		if err != nil {
			t.Fatal(err)
		}
		if !r.OK {
			t.Errorf("%s: audit: %+v", when, r.Violations)
		}
	}
	check("after the sale")
	if firstNo == "" {
		t.Fatal("no seckill order was created")
	}
	var o struct {
		UserID int64
	}
	if err := f.DB.Raw("SELECT user_id FROM orders WHERE order_no = ?", firstNo).Scan(&o).Error; err != nil {
		t.Fatal(err)
	}
	if _, err := a.orders.Cancel(ctx, o.UserID, firstNo); err != nil {
		t.Fatal(err)
	}
	check("after a cancellation")
}
