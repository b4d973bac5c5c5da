package inventory_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/inventory"
)

// A short lease, so a dead holder's units come back within the test.
const testLease = 300 * time.Millisecond

func (f *fixture) gated(t *testing.T) instance {
	t.Helper()
	return f.service(t, inventory.Config{Strategy: inventory.RedisGate, GateLease: testLease})
}

// level reads the gate and the units held for requests in flight.
func level(t *testing.T, s instance, id int64) (units, held int64) {
	t.Helper()
	units, held, ok, err := s.GateLevel(context.Background(), id)
	if err != nil || !ok {
		t.Fatalf("gate level: %v (exists %v)", err, ok)
	}
	return units, held
}

// r1 runs the audit with the gate as its stock mirror and returns the
// details of its R1 violations.
func r1(t *testing.T, f *fixture, s instance, id int64) []string {
	t.Helper()
	r, err := audit.Check(context.Background(), f.DB, audit.Options{ProductID: id, StockMirror: s.GateLevel})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range r.Violations {
		if v.Invariant == audit.R1 {
			out = append(out, v.Detail)
		}
	}
	return out
}

// commit writes the want of order no the way a batch does (lock, fenced
// update, ledger row), without touching the gate.
func commit(t *testing.T, s instance, id int64, no string, quantity int64) {
	t.Helper()
	ctx := context.Background()
	err := s.Guard(ctx, id, nil, func(ctx context.Context, take *inventory.Take) error {
		return dbx.Tx(ctx, s.db, func(tx *gorm.DB) error {
			taken, err := s.DeductTx(tx, take, []inventory.Want{{OrderNo: no, Quantity: quantity}})
			if err != nil {
				return err
			}
			return taken.Refused[0]
		})
	})
	if err != nil {
		t.Fatalf("commit %s: %v", no, err)
	}
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGateUnitsOfADeadHolderComeBack: an instance takes units from the gate
// and dies before committing or giving them back. While its lease runs the
// units are in flight (R1 clean); once it ended and before a reaper ran they
// are lost (R1 flags the gate below the database); another instance's
// reaper brings them back (R1 clean, every unit admittable again).
func TestGateUnitsOfADeadHolderComeBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dead, alive := f.gated(t), f.gated(t)
	id := f.product(t, alive, 5)
	ctx := context.Background()

	if _, err := dead.Admit(ctx, id, "dead-1", 2); err != nil {
		t.Fatal(err)
	}
	// The process dies here: no commit, no Settle.
	if u, h := level(t, alive, id); u != 3 || h != 2 {
		t.Fatalf("after the admission: gate %d, held %d; want 3, 2", u, h)
	}
	if v := r1(t, f, alive, id); len(v) != 0 {
		t.Fatalf("R1 while the units are in flight: %v", v)
	}

	time.Sleep(testLease + 50*time.Millisecond)
	if v := r1(t, f, alive, id); len(v) != 1 || !strings.Contains(v[0], "2 units lost") {
		t.Fatalf("R1 after the lease ended, before any reaper: %v; want 2 units lost", v)
	}

	bg, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); alive.RunGateReaper(bg, 20*time.Millisecond) }()
	waitFor(t, "the reaper", func() bool { u, _ := level(t, alive, id); return u == 5 })
	stop()
	<-done
	if u, h := level(t, alive, id); u != 5 || h != 0 {
		t.Errorf("after the reaper: gate %d, held %d; want 5, 0", u, h)
	}
	if v := r1(t, f, alive, id); len(v) != 0 {
		t.Errorf("R1 after the reaper: %v", v)
	}
	// All five can be sold.
	if ok, errs := race(t, alive, id, 7); ok != 5 {
		t.Errorf("selling after the reap: %d ok (errors %v), want 5", ok, errs)
	}
}

// TestGateRefusalReaps: a gate emptied by a dead holder is reaped by the
// next buyer it would refuse, without a background reaper.
func TestGateRefusalReaps(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dead, alive := f.gated(t), f.gated(t)
	id := f.product(t, alive, 2)
	ctx := context.Background()
	if _, err := dead.Admit(ctx, id, "dead-1", 2); err != nil {
		t.Fatal(err)
	}
	if err := deduct(ctx, alive, id, 1); !errors.Is(err, inventory.ErrBusy) {
		t.Fatalf("buyer while the dead holder's lease runs: %v, want ErrBusy", err)
	}
	time.Sleep(testLease + 50*time.Millisecond)
	if err := deduct(ctx, alive, id, 1); err != nil {
		t.Fatalf("buyer after the lease ended: %v, want admitted and sold", err)
	}
	if u, h := level(t, alive, id); u != 1 || h != 0 {
		t.Errorf("gate %d, held %d; want 1, 0", u, h)
	}
}

// TestGateReapKeepsSoldUnits: a holder that died after its commit and before
// settling sold its units: the reaper finds the order's ledger row and gives
// nothing back.
func TestGateReapKeepsSoldUnits(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.gated(t)
	id := f.product(t, s, 5)
	ctx := context.Background()
	if _, err := s.Admit(ctx, id, "sold-1", 2); err != nil {
		t.Fatal(err)
	}
	commit(t, s, id, "sold-1", 2)
	time.Sleep(testLease + 50*time.Millisecond)
	// A refusal reaps: ask for more than the gate has.
	if err := deduct(ctx, s, id, 4); !errors.Is(err, inventory.ErrInsufficientStock) {
		t.Fatalf("asking for 4 of 3: %v, want ErrInsufficientStock", err)
	}
	if u, h := level(t, s, id); u != 3 || h != 0 {
		t.Errorf("gate %d, held %d; want 3 (sold units stay sold), 0", u, h)
	}
	// A repeat of the sold order number takes nothing: it can only replay.
	a, err := s.Admit(ctx, id, "sold-1", 2)
	if err != nil {
		t.Fatal(err)
	}
	s.Settle(ctx, a, false)
	if u, _ := level(t, s, id); u != 3 {
		t.Errorf("gate after a repeat of a sold order = %d, want 3", u)
	}
}

// TestGateSlowHolderAfterReap: a holder that was only slow commits after its
// hold was reaped (its units given back, no order then). Its settle takes
// the units back, so the gate ends equal to the database.
func TestGateSlowHolderAfterReap(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	slow, other := f.gated(t), f.gated(t)
	id := f.product(t, other, 5)
	ctx := context.Background()
	a, err := slow.Admit(ctx, id, "slow-1", 2)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(testLease + 50*time.Millisecond)
	// A refusal reaps: the units come back while no order exists.
	if err := deduct(ctx, other, id, 6); !errors.Is(err, inventory.ErrInsufficientStock) {
		t.Fatalf("asking for 6 of 5: %v, want ErrInsufficientStock", err)
	}
	if u, h := level(t, other, id); u != 5 || h != 0 {
		t.Fatalf("after the reap: gate %d, held %d; want 5, 0", u, h)
	}
	commit(t, slow, id, "slow-1", 2)
	slow.Settle(ctx, a, true)
	if u, h := level(t, other, id); u != 3 || h != 0 {
		t.Errorf("after the slow holder's commit: gate %d, held %d; want 3 (= stock), 0", u, h)
	}
	if v := r1(t, f, other, id); len(v) != 0 {
		t.Errorf("R1: %v", v)
	}
}

// TestGateSharedOrderNumber: requests for one order number share its hold;
// the units the order took stay sold, the rest come back once all settle.
func TestGateSharedOrderNumber(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.gated(t)
	id := f.product(t, s, 10)
	ctx := context.Background()
	small, err := s.Admit(ctx, id, "twin-1", 1)
	if err != nil {
		t.Fatal(err)
	}
	big, err := s.Admit(ctx, id, "twin-1", 3) // the same key, another quantity
	if err != nil {
		t.Fatal(err)
	}
	if u, h := level(t, s, id); u != 7 || h != 3 {
		t.Fatalf("two requests for one number: gate %d, held %d; want 7, 3", u, h)
	}
	commit(t, s, id, "twin-1", 1)
	s.Settle(ctx, small, true)
	if u, h := level(t, s, id); u != 7 || h != 2 {
		t.Fatalf("after the sale: gate %d, held %d; want 7, 2", u, h)
	}
	s.Settle(ctx, big, false) // refused: its key was used for another request
	if u, h := level(t, s, id); u != 9 || h != 0 {
		t.Errorf("after both settled: gate %d, held %d; want 9, 0", u, h)
	}
}

// TestAuditFlagsUnitsLostWithoutHold: units gone from the gate that no
// hold accounts for (what a dead process left before holds existed) are
// R1's fault, not only a gate above the database.
func TestAuditFlagsUnitsLostWithoutHold(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.gated(t)
	id := f.product(t, s, 5)
	if err := deduct(context.Background(), s, id, 1); err != nil {
		t.Fatal(err)
	}
	if v := r1(t, f, s, id); len(v) != 0 {
		t.Fatalf("R1 after a sale: %v", v)
	}
	gate := f.Prefix + "gate:{" + strconv.FormatInt(id, 10) + "}"
	if err := f.RDB.DecrBy(context.Background(), gate, 2).Err(); err != nil {
		t.Fatal(err)
	}
	if v := r1(t, f, s, id); len(v) != 1 || !strings.Contains(v[0], "2 units lost") {
		t.Errorf("R1 with 2 units gone from the gate: %v; want 2 units lost", v)
	}
	if err := f.RDB.IncrBy(context.Background(), gate, 3).Err(); err != nil {
		t.Fatal(err)
	}
	if v := r1(t, f, s, id); len(v) != 1 || !strings.Contains(v[0], "1 too many") {
		t.Errorf("R1 with the gate one above the database: %v; want 1 too many", v)
	}
}

// TestGateSeedRacingRestock: a restock that commits while a gate is being
// seeded from the database must end up in the gate. A restock adds to the
// gate only when it exists, so one that committed between the seed's read
// and its write would be missing from the gate for good: buyers told busy
// while the database has stock. The seed holds the product lock, so the
// restock waits for it (here it gives up, busy, and is sent again).
func TestGateSeedRacingRestock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	seeder := f.gated(t)
	restocker := f.service(t, inventory.Config{Strategy: inventory.RedisGate, GateLease: testLease, LockWait: 200 * time.Millisecond})
	id := f.product(t, seeder, 1)
	ctx := context.Background()
	var first error
	seeder.PauseSeeding(func() { _, _, first = restocker.Restock(ctx, id, 5, "seed-race", "") })
	if _, err := seeder.Admit(ctx, id, "buyer-1", 1); err != nil {
		t.Fatal(err)
	}
	if first != nil {
		if !errors.Is(first, inventory.ErrBusy) {
			t.Fatalf("restock during the seed: %v, want success or ErrBusy", first)
		}
		if _, _, err := restocker.Restock(ctx, id, 5, "seed-race", ""); err != nil {
			t.Fatal(err)
		}
	}
	stock, _, _ := f.state(t, id)
	if u, h := level(t, seeder, id); u+h != stock {
		t.Fatalf("gate %d + held %d = %d, database stock %d: the restock is missing from the gate", u, h, u+h, stock)
	}
	if _, err := seeder.Admit(ctx, id, "buyer-2", 5); err != nil {
		t.Errorf("a buyer of the restocked units: %v, want admitted", err)
	}
}

// TestDeductionGatesItsBatch: a batch's Deduction lets each want through
// the gate when it begins (a want the gate cannot cover is refused, with
// the database's reason, and never deducted) and settles them all in
// Close: the units of the orders its transaction created stay sold, the
// twin of an order number gives its share back, nothing stays held.
func TestDeductionGatesItsBatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.gated(t)
	id := f.product(t, s, 3)
	ctx := context.Background()
	wants := []inventory.Want{{OrderNo: "x", Quantity: 1}, {OrderNo: "x", Quantity: 1}, {OrderNo: "y", Quantity: 5}, {OrderNo: "z", Quantity: 1}}
	d := s.Deduct(ctx, id, wants)
	defer d.Close()
	refused := d.Refused()
	if len(refused) != 4 || refused[0] != nil || refused[1] != nil || !errors.Is(refused[2], inventory.ErrInsufficientStock) || refused[3] != nil {
		t.Fatalf("the gate's refusals: %v; want only y (5 of 3 units) refused, insufficient stock", refused)
	}
	if u, h := level(t, s, id); u != 1 || h != 2 {
		t.Fatalf("admitted: gate %d, held %d; want 1, 2 (x's twin shares its hold)", u, h)
	}
	served := []inventory.Want{wants[0], wants[3]} // a batch deducts each order number once
	for d.Next() {
		take := d.Take()
		err := dbx.Tx(d.Context(), s.db, func(tx *gorm.DB) error {
			taken, err := s.DeductTx(tx, take, served)
			if err == nil && taken.Granted() != 2 {
				err = errors.New("not both served")
			}
			return err
		})
		d.Done(take.Taken(), err)
	}
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if u, h := level(t, s, id); u != 1 || h != 0 {
		t.Errorf("settled: gate %d, held %d; want 1, 0", u, h)
	}
	if v := r1(t, f, s, id); len(v) != 0 {
		t.Errorf("R1: %v", v)
	}

	// The gate seeded and its script loaded, a batch is admitted in one
	// round trip: p takes the last unit; q finds the gate empty while p's
	// unit is in flight, busy, not sold out. A deduction closed without a
	// commit gives p's unit back.
	d2 := s.Deduct(ctx, id, []inventory.Want{{OrderNo: "p", Quantity: 1}, {OrderNo: "q", Quantity: 1}})
	if r := d2.Refused(); len(r) != 2 || r[0] != nil || !errors.Is(r[1], inventory.ErrBusy) {
		t.Errorf("second batch's refusals: %v; want p admitted, q busy", r)
	}
	if u, h := level(t, s, id); u != 0 || h != 1 {
		t.Errorf("second batch admitted: gate %d, held %d; want 0, 1", u, h)
	}
	d2.Close()
	if u, h := level(t, s, id); u != 1 || h != 0 {
		t.Errorf("second batch closed without a commit: gate %d, held %d; want 1, 0", u, h)
	}
}

// TestDeductionGateAllRefused: a batch whose every want the gate turns
// away takes no hold at all.
func TestDeductionGateAllRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.gated(t)
	id := f.product(t, s, 1)
	ctx := context.Background()
	d := s.Deduct(ctx, id, []inventory.Want{{OrderNo: "big", Quantity: 2}})
	defer d.Close()
	if r := d.Refused(); len(r) != 1 || !errors.Is(r[0], inventory.ErrInsufficientStock) {
		t.Fatalf("refusals %v; want insufficient stock", r)
	}
	if d.Next() {
		t.Fatal("a hold was taken for a batch the gate refused whole")
	}
	if err := d.Err(); err != nil {
		t.Errorf("err %v; want none (the refusal is the want's answer)", err)
	}
}
