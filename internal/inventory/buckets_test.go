package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/inventory"
)

// bucketed is an instance that creates products in k stock buckets and
// deducts from home first.
func (f *fixture) bucketed(t *testing.T, k, home int) instance {
	t.Helper()
	return f.service(t, inventory.Config{Strategy: inventory.LockFence, Buckets: k, HomeBucket: home, SoldOutRecheck: time.Hour})
}

// bucketedProduct is a service of K buckets with this home bucket and a
// product of stock units spread over them.
func (f *fixture) bucketedProduct(t *testing.T, k, home int, stock int64) (instance, int64) {
	t.Helper()
	s := f.bucketed(t, k, home)
	return s, f.product(t, s, stock)
}

// buckets reads a product's stock bucket by bucket (0: the products row).
func (f *fixture) buckets(t *testing.T, id int64) []int64 {
	t.Helper()
	out := []int64{f.Count(t, "SELECT stock FROM products WHERE id = ?", id)}
	rows, err := f.DB.Raw("SELECT stock FROM stock_buckets WHERE product_id = ? ORDER BY bucket", id).Rows()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// buy deducts quantity for a fresh order number the way a batch does: its
// fn commits whatever a bucket served and leaves the want open when the
// bucket refused it with ErrElsewhere, so Guard can walk on. The want's
// final refusal is the error.
func buy(ctx context.Context, s instance, id, quantity int64) error {
	no := fmt.Sprintf("B%d-%d", time.Now().UnixNano(), orderSeq.Add(1))
	var refused error
	err := s.Guard(ctx, id, []inventory.Want{{OrderNo: no, Quantity: quantity}}, func(ctx context.Context, take *inventory.Take) error {
		return dbx.Tx(ctx, s.db, func(tx *gorm.DB) error {
			taken, err := s.DeductTx(tx, take, []inventory.Want{{OrderNo: no, Quantity: quantity}})
			if err != nil {
				return err
			}
			refused = taken.Refused[0]
			return nil
		})
	})
	if err != nil {
		return err
	}
	if errors.Is(refused, inventory.ErrElsewhere) {
		return fmt.Errorf("a want left open after the walk: %w", refused)
	}
	return refused
}

// TestBucketWalk is the unit test of the walk: the home bucket serves
// first; an empty own bucket sends the batch to the next; the last unit,
// in the last bucket tried, is sold; all empty is sold out (and the
// sold-out book learns it); a restock refills every bucket and the sale
// reopens.
func TestBucketWalk(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s, id := f.bucketedProduct(t, 3, 1, 4) // home bucket 1
	ctx := context.Background()
	if got := f.buckets(t, id); !reflect.DeepEqual(got, []int64{2, 1, 1}) {
		t.Fatalf("4 units over 3 buckets: %v, want [2 1 1]", got)
	}
	if p, err := s.Get(ctx, id); err != nil || p.Stock != 4 || p.Buckets != 3 {
		t.Fatalf("Get = %+v, %v; want the sum, 4, and 3 buckets", p, err)
	}
	steps := []struct {
		name  string
		want  []int64
		moves float64
	}{
		{"the home bucket serves", []int64{2, 0, 1}, 0},
		// Bucket 1 is found empty (and remembered); bucket 2 serves.
		{"own bucket empty: the next one serves", []int64{2, 0, 0}, 1},
		// Bucket 1 skipped, bucket 2 found empty, bucket 0 serves.
		{"and the one after", []int64{1, 0, 0}, 3},
		{"the last unit, in the last bucket, is sold", []int64{0, 0, 0}, 4},
	}
	for _, st := range steps {
		if err := buy(ctx, s, id, 1); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := f.buckets(t, id); !reflect.DeepEqual(got, st.want) {
			t.Fatalf("%s: buckets %v, want %v", st.name, got, st.want)
		}
		if m := counter(t, s.reg, "shop_inventory_bucket_moves_total"); m != st.moves {
			t.Errorf("%s: %v bucket moves counted, want %v", st.name, m, st.moves)
		}
	}
	if _, known := s.SoldOut(ctx, id); known {
		t.Fatal("sold out before anyone was refused: the last take wrote without knowing the sum")
	}
	if err := buy(ctx, s, id, 1); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("every bucket empty: %v, want sold out", err)
	}
	if _, known := s.SoldOut(ctx, id); !known {
		t.Fatal("the sold-out book did not learn the product")
	}
	if counter(t, s.reg, "shop_inventory_bucket_tallies_total") != 1 {
		t.Error("the refusal was not decided by a tally")
	}

	if _, _, err := s.Restock(ctx, id, 7, "", ""); err != nil {
		t.Fatal(err)
	}
	if got := f.buckets(t, id); !reflect.DeepEqual(got, []int64{3, 2, 2}) {
		t.Fatalf("a restock of 7 over 3 buckets: %v, want [3 2 2]", got)
	}
	if _, known := s.SoldOut(ctx, id); known {
		t.Fatal("still sold out after a restock")
	}
	if err := buy(ctx, s, id, 1); err != nil {
		t.Fatalf("after the restock: %v", err)
	}
	if got := f.buckets(t, id); !reflect.DeepEqual(got, []int64{3, 1, 2}) {
		t.Fatalf("after the restock the home bucket serves again: %v, want [3 1 2]", got)
	}
	stock, ledger, sold := f.state(t, id)
	if stock != 3 || ledger != 6 || sold != 5 {
		// state reads the products row alone: bucket 0.
		t.Errorf("bucket 0 %d, ledger %d, sold %d; want 3, 6, 5", stock, ledger, sold)
	}
}

// TestBucketLastUnitSoldOnce: one unit left, in the last bucket an
// instance's walk reaches; many buyers at once from two instances that
// know nothing of the buckets yet: exactly one gets it.
func TestBucketLastUnitSoldOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a, b := f.bucketed(t, 3, 1), f.bucketed(t, 3, 2)
	id := f.product(t, a, 1) // [1 0 0]: bucket 0 is the last one both walks try
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for i := range 10 {
		s := []instance{a, b}[i%2]
		wg.Go(func() {
			err := buy(ctx, s, id, 1)
			mu.Lock()
			defer mu.Unlock()
			outcomes[fmt.Sprint(err)]++
		})
	}
	wg.Wait()
	if outcomes["<nil>"] != 1 || outcomes[inventory.ErrSoldOut.Error()] != 9 {
		t.Fatalf("outcomes %v, want 1 sold and 9 sold out", outcomes)
	}
	if got := f.buckets(t, id); !reflect.DeepEqual(got, []int64{0, 0, 0}) {
		t.Fatalf("buckets %v", got)
	}
}

// TestBucketTallySplitsAWant: a regular order for more units than any one
// bucket holds, while the buckets together hold enough, is served (from
// several buckets, one ledger row); one for more than the sum is refused
// as not enough stock.
func TestBucketTallySplitsAWant(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s, id := f.bucketedProduct(t, 3, 0, 3) // [1 1 1]
	ctx := context.Background()
	if err := buy(ctx, s, id, 4); !errors.Is(err, inventory.ErrInsufficientStock) {
		t.Fatalf("4 of 3: %v, want not enough stock", err)
	}
	if err := buy(ctx, s, id, 2); err != nil {
		t.Fatalf("2 of [1 1 1]: %v", err)
	}
	if got := f.buckets(t, id); !reflect.DeepEqual(got, []int64{0, 0, 1}) {
		t.Fatalf("buckets %v, want [0 0 1]", got)
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM stock_ledger WHERE product_id = ? AND reason = 'order'", id); n != 1 {
		t.Errorf("%d order ledger rows, want one for the split want", n)
	}
	if p, _ := s.Get(ctx, id); p.Stock != 1 {
		t.Errorf("Get: stock %d, want 1", p.Stock)
	}
}

// TestBucketsOffIsOneRow: with one bucket (the default) a product has no
// stock_buckets rows and locks its one key, as before buckets existed.
func TestBucketsOffIsOneRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.service(t, inventory.Config{Strategy: inventory.LockFence})
	id := f.product(t, s, 3)
	if err := buy(context.Background(), s, id, 1); err != nil {
		t.Fatal(err)
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM stock_buckets"); n != 0 {
		t.Errorf("%d stock_buckets rows, want none", n)
	}
	if got := f.buckets(t, id); !reflect.DeepEqual(got, []int64{2}) {
		t.Errorf("stock %v, want [2]", got)
	}
	lab, err := f.bucketed(t, 3, 0).CreateLab(context.Background(), "lab", 100, 5, inventory.Naive)
	if err != nil || lab.Buckets != 1 || lab.Stock != 5 {
		t.Errorf("a lab product: %+v, %v; want one bucket of 5", lab, err)
	}
}

// TestBucketStaleFenceRaised: each bucket has its own fence counter; when
// Redis loses bucket 1's, the bucket's row refuses the next holder's write,
// and the service raises that counter from the row and writes again.
func TestBucketStaleFenceRaised(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s, id := f.bucketedProduct(t, 3, 1, 30)
	ctx := context.Background()
	for range 3 {
		if err := buy(ctx, s, id, 1); err != nil {
			t.Fatal(err)
		}
	}
	fenceKey := f.Prefix + "lock:{product:" + fmt.Sprint(id) + ":1}:fence"
	if n, _ := f.RDB.Get(ctx, fenceKey).Int64(); n != 3 {
		t.Fatalf("bucket 1's fence counter = %d, want 3 (its own key)", n)
	}
	if err := f.RDB.Del(ctx, fenceKey).Err(); err != nil {
		t.Fatal(err)
	}
	if err := buy(ctx, s, id, 1); err != nil {
		t.Fatalf("after bucket 1's fence counter was lost: %v", err)
	}
	if got := counter(t, s.reg, "shop_inventory_stale_fence_rejections_total"); got != 1 {
		t.Errorf("stale fence rejections = %v, want 1", got)
	}
	dbFence := f.Count(t, "SELECT fence FROM stock_buckets WHERE product_id = ? AND bucket = 1", id)
	redisFence, _ := f.RDB.Get(ctx, fenceKey).Int64()
	if dbFence != 4 || redisFence != 4 {
		t.Errorf("fences after recovery: database %d, redis %d; want 4, 4", dbFence, redisFence)
	}
	if got := f.buckets(t, id); !reflect.DeepEqual(got, []int64{10, 6, 10}) {
		t.Errorf("buckets %v, want [10 6 10]", got)
	}
	if n := f.Count(t, "SELECT COUNT(*) FROM stock_ledger WHERE product_id = ? AND reason = 'order' AND bucket = 1", id); n != 4 {
		t.Errorf("%d order ledger rows of bucket 1, want 4", n)
	}
}

// TestBucketRestockReplayAnswersTheSum: a restock repeated under its key
// answers as the first one did, with the stock summed over every bucket,
// not bucket 0's alone.
func TestBucketRestockReplayAnswersTheSum(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s, id := f.bucketedProduct(t, 3, 0, 6) // [2 2 2]
	ctx := context.Background()
	first, replayed, err := s.Restock(ctx, id, 3, "replay-sum", "h")
	if err != nil || replayed || first.Stock != 9 {
		t.Fatalf("first restock = stock %d, replayed %v, %v; want 9, false", first.Stock, replayed, err)
	}
	again, replayed, err := s.Restock(ctx, id, 3, "replay-sum", "h")
	if err != nil || !replayed || again.Stock != 9 {
		t.Fatalf("replayed restock = stock %d, replayed %v, %v; want 9 (the sum), true", again.Stock, replayed, err)
	}
}

// TestBucketsOfAProductCreatedAfterCheck: a want checked while its product
// did not exist yet (when nothing is known of its K) is deducted by walking
// the buckets of the product created since, not from bucket 0 alone.
func TestBucketsOfAProductCreatedAfterCheck(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.bucketed(t, 3, 0)
	ctx := context.Background()
	before := f.product(t, s, 1)
	no := fmt.Sprintf("late-%d", orderSeq.Add(1))
	if c := s.Check(ctx, before+1); c.SoldOut || !c.Locks {
		t.Fatalf("check of a product not there yet: %+v, want not sold out, locked", c)
	}
	if id := f.product(t, s, 3); id != before+1 { // [1 1 1]
		t.Fatalf("the product got id %d, want %d (the id admitted before it existed)", id, before+1)
	}
	var refused error
	err := s.Guard(ctx, before+1, []inventory.Want{{OrderNo: no, Quantity: 2}}, func(ctx context.Context, take *inventory.Take) error {
		return dbx.Tx(ctx, s.db, func(tx *gorm.DB) error {
			taken, err := s.DeductTx(tx, take, []inventory.Want{{OrderNo: no, Quantity: 2}})
			if err == nil {
				refused = taken.Refused[0]
			}
			return err
		})
	})
	if err != nil || refused != nil {
		t.Fatalf("2 of 3 units over 3 buckets: %v, %v; want served (the walk reaches buckets 1 and 2)", err, refused)
	}
	if got := f.buckets(t, before+1); !reflect.DeepEqual(got, []int64{0, 0, 1}) {
		t.Errorf("buckets %v, want [0 0 1]", got)
	}
}

// TestDefaultHomeBucketsDiffer: instances started one after another
// without SHOP_HOME_BUCKET get consecutive home buckets from a shared
// counter, so K of them start at K different buckets.
func TestDefaultHomeBucketsDiffer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const k = 3
	seen := map[int]bool{}
	for range k {
		s := f.service(t, inventory.Config{Strategy: inventory.LockFence, Buckets: k, HomeBucket: -1})
		seen[s.Home()%k] = true
	}
	if len(seen) != k {
		t.Fatalf("%d instances started at %d different buckets of %d, want %d", k, len(seen), k, k)
	}
}
