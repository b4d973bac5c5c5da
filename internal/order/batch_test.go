package order

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/testenv/stocktest"
)

// These tests hand the batch runner batches made by hand, so what shares a
// transaction is not left to timing.

type batchFixture struct{ *stocktest.Fixture }

func newBatchFixture(t *testing.T) *batchFixture { return &batchFixture{stocktest.New(t)} }

func (f *batchFixture) service(t *testing.T, inv inventory.Config) *Service {
	t.Helper()
	inv.SoldOutRecheck = time.Minute
	stock, _ := f.Inventory(t, inv)
	s := New(f.DB, stock, f.Markers(), Config{BatchMax: 64, Packets: f.Packets(t)}, NewMetrics(prometheus.NewRegistry()), stocktest.Discard())
	t.Cleanup(s.Wait)
	return s
}

func (f *batchFixture) product(t *testing.T, s *Service, stock int64) int64 {
	t.Helper()
	return f.Product(t, s.inv, 100, stock)
}

func seckillReq(user, product int64) *request {
	return &request{o: Order{OrderNo: SeckillNo(user, product), UserID: user, ProductID: product, Quantity: 1, Kind: KindSeckill}, done: make(chan result, 1)}
}

func regularReq(user, product, quantity int64, key string) *request {
	k := key
	return &request{o: Order{OrderNo: RegularNo(user, key), UserID: user, ProductID: product, Quantity: quantity,
		Kind: KindRegular, IdemKey: &k, RequestHash: "h-" + key}, done: make(chan result, 1)}
}

func answers(batch []*request) []result {
	out := make([]result, len(batch))
	for i, r := range batch {
		out[i] = <-r.done
	}
	return out
}

// A batch with a buyer twice, a buyer whose twin another instance already
// committed, and more new buyers than units: one transaction, no abort, each
// answer exact, arrival order decides who gets the last units.
func TestBatchMixesRepeatsTwinsAndSoldOut(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	a, b := f.service(t, inventory.Config{}), f.service(t, inventory.Config{})
	id := f.product(t, a, 3)
	twin, created, err := b.Seckill(context.Background(), 30, id) // another instance, before the batch
	if err != nil || !created {
		t.Fatalf("twin: created %v, %v", created, err)
	}
	batch := []*request{seckillReq(10, id), seckillReq(20, id), seckillReq(10, id), seckillReq(30, id), seckillReq(40, id), seckillReq(50, id)}
	a.runBatch(id, batch)
	got := answers(batch)

	if !got[0].created || !got[1].created {
		t.Errorf("first two new buyers: %+v, %+v; want both created", got[0], got[1])
	}
	if got[2].err != nil || got[2].created || got[2].o.OrderNo != got[0].o.OrderNo {
		t.Errorf("the same buyer again in the batch: %+v; want a replay of %s", got[2], got[0].o.OrderNo)
	}
	if got[3].err != nil || got[3].created || got[3].o.OrderNo != twin.OrderNo {
		t.Errorf("buyer whose twin committed elsewhere: %+v; want a replay of %s", got[3], twin.OrderNo)
	}
	for _, i := range []int{4, 5} {
		if !errors.Is(got[i].err, inventory.ErrSoldOut) {
			t.Errorf("buyer %d after the last unit: %+v; want ErrSoldOut", i, got[i])
		}
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM orders WHERE product_id = ?", id); n != 3 {
		t.Errorf("orders = %d, want 3", n)
	}
	if s := f.Count(t, "SELECT stock FROM products WHERE id = ?", id); s != 0 {
		t.Errorf("stock = %d, want 0", s)
	}
}

// A regular order asking for more than what is left, in the middle of a
// batch, is refused alone; those before and after it are served.
func TestBatchRegularOrderLargerThanWhatIsLeft(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	s := f.service(t, inventory.Config{})
	id := f.product(t, s, 4)
	batch := []*request{regularReq(1, id, 2, "k1"), regularReq(2, id, 5, "k2"), regularReq(3, id, 1, "k3"), regularReq(4, id, 2, "k4"), regularReq(5, id, 1, "k5")}
	s.runBatch(id, batch)
	got := answers(batch)
	want := []error{nil, inventory.ErrInsufficientStock, nil, inventory.ErrInsufficientStock, nil}
	for i, w := range want {
		if !errors.Is(got[i].err, w) || (w == nil && !got[i].created) {
			t.Errorf("request %d: %+v; want %v", i, got[i], w)
		}
	}
	if got[0].o.AmountCents != 200 {
		t.Errorf("amount of 2 units at 100 = %d", got[0].o.AmountCents)
	}
	if st := f.Count(t, "SELECT stock FROM products WHERE id = ?", id); st != 0 {
		t.Errorf("stock = %d, want 0", st)
	}
	if sold := f.Count(t, "SELECT COALESCE(-SUM(delta), 0) FROM stock_ledger WHERE product_id = ? AND reason = 'order'", id); sold != 4 {
		t.Errorf("ledger sold = %d, want 4", sold)
	}
}

// A leader whose fence is older than the one the database last accepted
// writes nothing; the batch is run again under a fresh hold with a raised
// fence, and every request is answered once.
func TestBatchStaleFenceWritesNothingThenRetries(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	s := f.service(t, inventory.Config{})
	id := f.product(t, s, 10)
	if err := f.DB.Exec("UPDATE products SET fence = 1000 WHERE id = ?", id).Error; err != nil {
		t.Fatal(err)
	}
	batch := []*request{seckillReq(1, id), seckillReq(2, id), seckillReq(3, id)}
	s.runBatch(id, batch)
	for i, r := range answers(batch) {
		if r.err != nil || !r.created {
			t.Errorf("request %d: %+v; want created after the fence was raised", i, r)
		}
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM stock_ledger WHERE product_id = ? AND reason = 'order' AND fence <= 1000", id); n != 0 {
		t.Errorf("%d ledger rows written with the stale fence", n)
	}
	if st := f.Count(t, "SELECT stock FROM products WHERE id = ?", id); st != 7 {
		t.Errorf("stock = %d, want 7", st)
	}
}

// Leaders paused past their lock's TTL in two instances (the lab pause):
// batches overlap in time, the fence keeps every stale batch from writing,
// and exactly the units on sale are sold.
func TestBatchesUnderLabPauseNeverOversell(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	cfg := inventory.Config{LockTTL: 200 * time.Millisecond, LockWait: 20 * time.Second, PauseAfterLock: 500 * time.Millisecond, PauseProbability: 1}
	a, b := f.service(t, cfg), f.service(t, cfg)
	id := f.product(t, a, 5)
	ctx := context.Background()
	var created, soldOut, busy atomic.Int64
	done := make(chan struct{})
	for i := range 24 {
		s := []*Service{a, b}[i%2]
		go func() {
			defer func() { done <- struct{}{} }()
			_, c, err := s.Seckill(ctx, int64(100+i), id)
			switch {
			case err == nil && c:
				created.Add(1)
			case errors.Is(err, inventory.ErrSoldOut):
				soldOut.Add(1)
			case errors.Is(err, inventory.ErrBusy):
				busy.Add(1)
			default:
				t.Errorf("seckill: created %v, %v", c, err)
			}
		}()
	}
	for range 24 {
		<-done
	}
	orders := f.Count(t, "SELECT COUNT(*) FROM orders WHERE product_id = ?", id)
	stock := f.Count(t, "SELECT stock FROM products WHERE id = ?", id)
	ledger := f.Count(t, "SELECT COALESCE(SUM(delta), 0) FROM stock_ledger WHERE product_id = ?", id)
	t.Logf("created %d, sold out %d, busy %d; orders %d, stock %d", created.Load(), soldOut.Load(), busy.Load(), orders, stock)
	if orders != created.Load() || orders+stock != 5 || ledger != stock || stock < 0 {
		t.Errorf("orders %d (created answers %d), stock %d, ledger %d: want orders = answers, orders + stock = 5, ledger = stock", orders, created.Load(), stock, ledger)
	}
}

// The unpaid-units cap counts what the user already holds and the earlier
// wants of the same batch.
func TestBatchUnpaidCap(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	s := f.service(t, inventory.Config{})
	s.cfg.UnpaidLimit = 3
	id := f.product(t, s, 100)
	first := []*request{regularReq(1, id, 1, "a")}
	s.runBatch(id, first)
	if r := answers(first)[0]; !r.created {
		t.Fatalf("first order: %+v", r)
	}
	batch := []*request{regularReq(1, id, 2, "b"), regularReq(1, id, 1, "c"), regularReq(2, id, 3, "d"), regularReq(1, id, 1, "a")}
	s.runBatch(id, batch)
	got := answers(batch)
	if !got[0].created || !errors.Is(got[1].err, ErrUnpaidLimit) || !got[2].created {
		t.Errorf("answers %+v; want created, ErrUnpaidLimit, created", got[:3])
	}
	if got[3].err != nil || got[3].created {
		t.Errorf("a repeat of an order the user holds: %+v; want its replay, never the cap", got[3])
	}
}

// A request that arrives after Wait (one that outlived the server's
// shutdown wait) is placed alone, not queued for a leader no one waits for.
func TestPlaceAfterWait(t *testing.T) {
	t.Parallel()
	f := newBatchFixture(t)
	s := f.service(t, inventory.Config{})
	id := f.product(t, s, 2)
	s.Wait()
	if _, created, err := s.Seckill(context.Background(), 1, id); err != nil || !created {
		t.Fatalf("seckill after Wait: created %v, %v", created, err)
	}
	s.batches.mu.Lock()
	queued := len(s.batches.queues)
	s.batches.mu.Unlock()
	if queued != 0 {
		t.Errorf("%d queues after Wait, want none", queued)
	}
}

// A request still queued behind a batch can be withdrawn (its deadline
// passed: it is answered busy and nothing happens to it); one a batch took
// cannot, and gets that batch's outcome. The earliest deadline of a batch
// bounds its wait for the lock.
func TestQueuedRequestWithdraws(t *testing.T) {
	release := make(chan struct{})
	ran := make(chan []*request, 2)
	c := newCoalescer(10, 0, func(int64) leader {
		return leaderFunc(func(batch []*request) {
			ran <- batch
			<-release
		})
	})
	now := time.Now()
	first := &request{o: Order{ProductID: 1}, done: make(chan result, 1), deadline: now.Add(time.Second)}
	second := &request{o: Order{ProductID: 1}, done: make(chan result, 1)}
	third := &request{o: Order{ProductID: 1}, done: make(chan result, 1), deadline: now.Add(2 * time.Second)}
	c.submit(first)
	<-ran // first is in a batch that holds on
	c.submit(second)
	c.submit(third)
	if c.withdraw(first) {
		t.Fatal("withdrew a request its batch had taken")
	}
	if !c.withdraw(second) {
		t.Fatal("could not withdraw a queued request")
	}
	close(release)
	if batch := <-ran; len(batch) != 1 || batch[0] != third {
		t.Fatalf("next batch %v, want only the request not withdrawn", batch)
	}
	c.wait()
	for _, tc := range []struct {
		batch []*request
		want  time.Time
		ok    bool
	}{
		{[]*request{second}, time.Time{}, false},
		{[]*request{third, second, first}, first.deadline, true},
	} {
		if got, ok := earliestDeadline(tc.batch); ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("earliestDeadline = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
		}
	}
}

// leaderFunc is a leader with nothing to do when idle.
type leaderFunc func(batch []*request)

func (f leaderFunc) run(batch []*request) { f(batch) }
func (leaderFunc) idle()                  {}

// runBatch runs one batch as a leader would, then lets the leader go idle
// (a hold it kept is released).
func (s *Service) runBatch(productID int64, batch []*request) {
	l := s.leadBatches(productID)
	l.run(batch)
	l.idle()
}
