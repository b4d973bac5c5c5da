package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/lockx"
	"github.com/seckill-lab/shop/internal/testenv/stocktest"
)

// fixture is stocktest's, with this package's helpers on top.
type fixture struct{ *stocktest.Fixture }

func newFixture(t *testing.T) *fixture { return &fixture{stocktest.New(t)} }

// instance is one shop instance's inventory: its own lock client and metrics
// on the shared database and Redis prefix.
type instance struct {
	*inventory.Service
	reg *prometheus.Registry
	db  *gorm.DB
}

func (f *fixture) service(t *testing.T, cfg inventory.Config) instance {
	t.Helper()
	inv, reg := f.Inventory(t, cfg)
	return instance{inv, reg, f.DB}
}

func (f *fixture) product(t *testing.T, s instance, stock int64) int64 {
	t.Helper()
	return f.Product(t, s.Service, 100, stock)
}

// state reads what the audit would judge: stock, ledger sum, and the number
// of units sold (order ledger rows).
func (f *fixture) state(t *testing.T, id int64) (stock, ledger, sold int64) {
	t.Helper()
	row := f.DB.Raw(`SELECT p.stock,
		(SELECT COALESCE(SUM(delta), 0) FROM stock_ledger WHERE product_id = p.id),
		(SELECT COALESCE(-SUM(delta), 0) FROM stock_ledger WHERE product_id = p.id AND reason = 'order')
		FROM products p WHERE p.id = ?`, id).Row()
	if err := row.Scan(&stock, &ledger, &sold); err != nil {
		t.Fatal(err)
	}
	return stock, ledger, sold
}

func (f *fixture) fenceKey(id int64) string {
	return f.Prefix + "lock:{product:" + strconv.FormatInt(id, 10) + "}:fence"
}

var orderSeq atomic.Int64

// deduct takes quantity units for a fresh order number, the way the order
// book does (gate, guard, one transaction).
func deduct(ctx context.Context, s instance, id, quantity int64) error {
	return deductThen(ctx, s, id, quantity, nil)
}

// deductThen is deduct with more work in the same transaction (the order
// book inserts its orders there).
func deductThen(ctx context.Context, s instance, id, quantity int64, then func(tx *gorm.DB) error) error {
	no := fmt.Sprintf("T%d-%d", time.Now().UnixNano(), orderSeq.Add(1))
	w := inventory.Want{OrderNo: no, Quantity: quantity}
	return s.Guard(ctx, id, []inventory.Want{w}, func(ctx context.Context, take *inventory.Take) error {
		return takeTx(ctx, s, take, w, then)
	})
}

// takeTx writes one want under t in a transaction of its own, as a batch
// does, and then (if not nil) more work in the same transaction; the
// want's refusal is its error.
func takeTx(ctx context.Context, s instance, t *inventory.Take, w inventory.Want, then func(tx *gorm.DB) error) error {
	return dbx.Tx(ctx, s.db, func(tx *gorm.DB) error {
		taken, err := s.DeductTx(tx, t, []inventory.Want{w})
		if err != nil {
			return err
		}
		if err := taken.Refused[0]; err != nil {
			return err
		}
		if then != nil {
			return then(tx)
		}
		return nil
	})
}

// counter sums a counter family of a registry.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// race runs n deductions at once and counts the outcomes.
func race(t *testing.T, s instance, id int64, n int) (ok int, errs map[string]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	errs = map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			err := deduct(ctx, s, id, 1)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				ok++
			} else {
				errs[err.Error()]++
			}
		})
	}
	close(start)
	wg.Wait()
	return ok, errs
}

// twoInstances is a fixture with two lock-fence instances on it and a
// product of stock units.
func twoInstances(t *testing.T, stock int64) (f *fixture, a, b instance, id int64) {
	t.Helper()
	f = newFixture(t)
	a = f.service(t, inventory.Config{Strategy: inventory.LockFence})
	b = f.service(t, inventory.Config{Strategy: inventory.LockFence})
	return f, a, b, f.product(t, a, stock)
}

func TestLockFenceNeverOversells(t *testing.T) {
	t.Parallel()
	f, a, b, id := twoInstances(t, 15)

	// Two instances, 40 buyers for 15 units.
	var okA, okB int
	errs := map[string]int{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, s := range []instance{a, b} {
		wg.Go(func() {
			n, e := race(t, s, id, 20)
			mu.Lock()
			defer mu.Unlock()
			if s.Service == a.Service {
				okA = n
			} else {
				okB = n
			}
			for k, v := range e {
				errs[k] += v
			}
		})
	}
	wg.Wait()
	stock, ledger, sold := f.state(t, id)
	if okA+okB != 15 || errs[inventory.ErrSoldOut.Error()] != 25 || len(errs) != 1 {
		t.Errorf("outcomes: %d+%d ok, errors %v; want 15 ok and 25 sold out", okA, okB, errs)
	}
	if stock != 0 || ledger != 0 || sold != 15 {
		t.Errorf("stock %d, ledger %d, sold %d; want 0, 0, 15", stock, ledger, sold)
	}
}

func TestStaleFenceRefusedThenRaised(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.service(t, inventory.Config{Strategy: inventory.LockFence})
	id := f.product(t, s, 10)
	ctx := context.Background()
	for range 3 {
		if err := deduct(ctx, s, id, 1); err != nil {
			t.Fatal(err)
		}
	}
	var dbFence int64
	f.DB.Raw("SELECT fence FROM products WHERE id = ?", id).Row().Scan(&dbFence)
	if dbFence != 3 {
		t.Fatalf("database fence after 3 writes = %d, want 3", dbFence)
	}

	// Redis loses the fence counter: the next holder gets fence 1, which the
	// database refuses; the service raises the counter and tries again.
	if err := f.RDB.Del(ctx, f.fenceKey(id)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := deduct(ctx, s, id, 1); err != nil {
		t.Fatalf("deduct after the fence counter was lost: %v", err)
	}
	if got := counter(t, s.reg, "shop_inventory_stale_fence_rejections_total"); got != 1 {
		t.Errorf("stale fence rejections = %v, want 1", got)
	}
	f.DB.Raw("SELECT fence FROM products WHERE id = ?", id).Row().Scan(&dbFence)
	redisFence, _ := f.RDB.Get(ctx, f.fenceKey(id)).Int64()
	if dbFence != 4 || redisFence != 4 {
		t.Errorf("fences after recovery: database %d, redis %d; want 4, 4", dbFence, redisFence)
	}
	if stock, ledger, sold := f.state(t, id); stock != 6 || ledger != 6 || sold != 4 {
		t.Errorf("stock %d, ledger %d, sold %d; want 6, 6, 4", stock, ledger, sold)
	}
}

// TestEqualFenceFromSecondHolderRefused is a failover that loses the fence
// counter's last INCR together with the lock: holder A (instance a) has
// written under fence N, and holder B (instance b) then obtains the lock
// with the same N. The row records who wrote its fence, so B's write is
// refused (b raises the counter and writes under N+1), while A's later
// writes under its own N still pass until B's newer fence lands; then A is
// refused too. Every refused write changes nothing.
func TestEqualFenceFromSecondHolderRefused(t *testing.T) {
	t.Parallel()
	f, a, b, id := twoInstances(t, 10)
	ctx := context.Background()
	one := func(s instance, t *inventory.Take) error {
		return takeTx(ctx, s, t, inventory.Want{OrderNo: fmt.Sprintf("E%d-%d", id, orderSeq.Add(1)), Quantity: 1}, nil)
	}
	fenceKey := f.fenceKey(id)
	lockKey := strings.TrimSuffix(fenceKey, ":fence")

	var takeA *inventory.Take
	var fencesB []inventory.Fence
	var refusedB, againA, lateA error
	err := a.Guard(ctx, id, nil, func(_ context.Context, t *inventory.Take) error {
		takeA = t
		if err := one(a, t); err != nil {
			return fmt.Errorf("A's first write: %w", err)
		}
		// The failover: the promoted replica has neither A's lock nor the
		// INCR that gave A its fence. A does not know (its writes below run
		// on the test's context, as a paused holder's would).
		if err := f.RDB.Del(ctx, lockKey).Err(); err != nil {
			return err
		}
		if err := f.RDB.Decr(ctx, fenceKey).Err(); err != nil {
			return err
		}
		err := b.Guard(ctx, id, nil, func(_ context.Context, t *inventory.Take) error {
			fencesB = append(fencesB, t.Fence)
			if len(fencesB) > 1 {
				return one(b, t)
			}
			refusedB = one(b, t)
			againA = one(a, takeA) // A again, under its own fence
			return refusedB
		})
		if err != nil {
			return fmt.Errorf("holder B: %w", err)
		}
		lateA = one(a, takeA) // after B's newer fence
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	fenceA := takeA.Fence
	if len(fencesB) == 0 || fencesB[0].Number != fenceA.Number || fencesB[0].Holder == fenceA.Holder {
		t.Fatalf("A's fence %+v, B's fences %+v: want B to get A's number first (the counter lost its INCR)", fenceA, fencesB)
	}
	if !errors.Is(refusedB, inventory.ErrStaleFence) {
		t.Fatalf("B's write under A's fence number: %v, want it refused as stale", refusedB)
	}
	if len(fencesB) != 2 || fencesB[1].Number != fenceA.Number+1 {
		t.Fatalf("B's fences %+v: want its retry under the next number, %d", fencesB, fenceA.Number+1)
	}
	if againA != nil {
		t.Errorf("A's second write under its own fence: %v, want it accepted", againA)
	}
	if !errors.Is(lateA, inventory.ErrStaleFence) {
		t.Errorf("A's write after B's newer fence: %v, want it refused as stale", lateA)
	}
	if got := counter(t, b.reg, "shop_inventory_stale_fence_rejections_total"); got != 1 {
		t.Errorf("b's stale fence rejections = %v, want 1", got)
	}
	var dbFence int64
	var holder string
	if err := f.DB.Raw("SELECT fence, fence_holder FROM products WHERE id = ?", id).Row().Scan(&dbFence, &holder); err != nil {
		t.Fatal(err)
	}
	if dbFence != fencesB[1].Number || holder != fencesB[1].Holder {
		t.Errorf("row's fence %d by %q, want B's %+v", dbFence, holder, fencesB[1])
	}
	// A twice, B once: the refused writes left nothing.
	if stock, ledger, sold := f.state(t, id); stock != 7 || ledger != 7 || sold != 3 {
		t.Errorf("stock %d, ledger %d, sold %d; want 7, 7, 3", stock, ledger, sold)
	}
}

func TestRedisGateGivesTokensBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.service(t, inventory.Config{Strategy: inventory.RedisGate, LockWait: 100 * time.Millisecond})
	id := f.product(t, s, 5)
	ctx := context.Background()
	gate := func() int64 {
		t.Helper()
		v, held, ok, err := s.GateLevel(ctx, id)
		if err != nil || !ok || held != 0 {
			t.Fatalf("gate level: %v (exists %v, held %d)", err, ok, held)
		}
		return v
	}
	if err := deduct(ctx, s, id, 1); err != nil {
		t.Fatal(err)
	}
	if g := gate(); g != 4 {
		t.Fatalf("gate after one sale = %d, want 4", g)
	}

	// The order insert fails: the unit goes back to the gate.
	boom := errors.New("boom")
	err := deductThen(ctx, s, id, 2, func(*gorm.DB) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("deduct with a failing insert: %v, want boom", err)
	}
	if g := gate(); g != 4 {
		t.Errorf("gate after a failed deduction = %d, want 4", g)
	}

	// The product lock is held elsewhere: busy, and the unit goes back.
	other := lockx.New(f.RDB, lockx.Options{Prefix: f.Prefix + "lock:"})
	defer other.Close()
	l, err := other.Acquire(ctx, "product:"+strconv.FormatInt(id, 10), lockx.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := deduct(ctx, s, id, 1); !errors.Is(err, inventory.ErrBusy) {
		t.Errorf("deduct while the lock is held: %v, want ErrBusy", err)
	}
	_ = l.Release(ctx)
	if g := gate(); g != 4 {
		t.Errorf("gate after busy = %d, want 4", g)
	}

	// A restock adds to the gate once, even when retried.
	for range 2 {
		if _, _, err := s.Restock(ctx, id, 3, "restock-1", "h1"); err != nil {
			t.Fatal(err)
		}
	}
	if g := gate(); g != 7 {
		t.Errorf("gate after a restock and its retry = %d, want 7", g)
	}
	// The same reference with a different request adds nothing: 422's error.
	if _, _, err := s.Restock(ctx, id, 30, "restock-1", "h2"); !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Errorf("restock reusing a reference for another request: %v, want ErrFingerprintMismatch", err)
	}
	if g := gate(); g != 7 {
		t.Errorf("gate after a mismatched restock = %d, want 7", g)
	}
	// Ten buyers for the seven units, waiting for the lock as long as needed:
	// seven admitted; the three refused are told sold out (or busy while
	// admitted units are still in flight).
	patient := f.service(t, inventory.Config{Strategy: inventory.RedisGate})
	ok, errs := race(t, patient, id, 10)
	if stock, ledger, _ := f.state(t, id); ok != 7 || stock != 0 || ledger != 0 || gate() != 0 {
		t.Errorf("selling out: %d ok (errors %v), stock %d, ledger %d, gate %d; want 7 ok and all 0", ok, errs, stock, ledger, gate())
	}
}

// TestStockReturnedHeardEverywhere: stock returned in one instance is
// announced to every instance, which is how their sold-out states end at
// once (the book is trusted for an hour here, so only the message can end
// it).
func TestStockReturnedHeardEverywhere(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := f.service(t, inventory.Config{Strategy: inventory.LockFence, SoldOutRecheck: time.Hour})
	b := f.service(t, inventory.Config{Strategy: inventory.LockFence, SoldOutRecheck: time.Hour})
	go a.Follow(ctx)
	go b.Follow(ctx)
	channel := f.Prefix + "soldout:reset"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if subs, _ := f.RDB.PubSubNumSub(ctx, channel).Result(); subs[channel] >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the instances did not subscribe to the stock-returned channel")
		}
	}
	id := f.product(t, a, 1)
	for round, tc := range []struct{ seller, restocker instance }{{a, b}, {b, a}} {
		if err := deduct(ctx, tc.seller, id, 1); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if _, known := tc.seller.SoldOut(ctx, id); !known {
			t.Fatalf("round %d: the instance that sold the last unit does not know the product sold out", round)
		}
		if _, _, err := tc.restocker.Restock(ctx, id, 1, "r"+strconv.Itoa(round), ""); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, known := tc.seller.SoldOut(ctx, id); !known {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the restock in the other instance was not heard within 5s", round)
			}
		}
	}
}

// TestLabPause: a holder paused past its lock's TTL. With the unfenced lock
// strategy two holders overlap and a read-modify-write loses an update (the
// ledger and the stock disagree, or more units sell than existed); the fenced
// conditional update never lets that happen.
func TestLabPause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		strategy string
		safe     bool
	}{{inventory.Lock, false}, {inventory.LockFence, true}} {
		t.Run(tc.strategy, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			s := f.service(t, inventory.Config{Strategy: tc.strategy, LockTTL: 200 * time.Millisecond,
				LockWait: 20 * time.Second, PauseAfterLock: 600 * time.Millisecond, PauseProbability: 1})
			const initial = 2
			id := f.product(t, s, initial)
			ok, errs := race(t, s, id, 5)
			stock, ledger, sold := f.state(t, id)
			t.Logf("%s: %d ok, errors %v; stock %d, ledger %d, sold %d", tc.strategy, ok, errs, stock, ledger, sold)
			consistent := stock >= 0 && ledger == stock && sold <= initial && int64(ok) == sold
			if tc.safe && (!consistent || ok != initial) {
				t.Errorf("lock-fence under pauses: %d ok, stock %d, ledger %d, sold %d; want %d sold and a consistent ledger", ok, stock, ledger, sold, initial)
			}
			if !tc.safe && consistent {
				t.Errorf("lock without fence under pauses stayed consistent (%d ok, stock %d, ledger %d); the lab fault did not show", ok, stock, ledger)
			}
		})
	}
}
