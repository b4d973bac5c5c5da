package main

import (
	"io"
	"reflect"
	"slices"
	"testing"

	"github.com/seckill-lab/shop/loadtest/internal/faults"
	"github.com/seckill-lab/shop/loadtest/internal/shops"
)

func TestParseFailover(t *testing.T) {
	o, err := parse([]string{"--scenario", "race,failover"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"race", faults.FailoverCluster, faults.FailoverSentinel, faults.FailoverDBSemiSync, faults.FailoverDBGalera}; !slices.Equal(o.Scenarios, want) {
		t.Fatalf("scenarios %v, want %v", o.Scenarios, want)
	}
	o, err = parse([]string{"--scenario", faults.FailoverSentinel, "--expect-5xx", "502,504"}, func(string) string { return "" }, io.Discard)
	if err != nil || !slices.Equal(o.Scenarios, []string{faults.FailoverSentinel}) || !slices.Equal(o.Expect5xx, []string{"502", "504"}) {
		t.Fatalf("%v %v %v", o.Scenarios, o.Expect5xx, err)
	}
}

// TestStockBucketsOption: --stock-buckets K gives every shop
// SHOP_STOCK_BUCKETS=K and instance i SHOP_HOME_BUCKET=i; it needs
// lock-fence, and 0 or 1 changes nothing.
func TestStockBucketsOption(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	o, err := parse([]string{"--stock-buckets", "3"}, none, io.Discard)
	if err != nil || o.StockBuckets != 3 {
		t.Fatalf("parse: %+v, %v", o.StockBuckets, err)
	}
	if _, err := parse([]string{"--stock-buckets", "3", "--strategy", "redis-gate"}, none, io.Discard); err == nil {
		t.Error("--stock-buckets 3 with redis-gate accepted; the shops would refuse to start")
	}
	Common, extra := shops.WithBuckets(3, []string{"SHOP_STOCK_STRATEGY=lock-fence"}, func(i int) []string {
		if i == 1 {
			return []string{"X=1"}
		}
		return nil
	})
	if want := []string{"SHOP_STOCK_STRATEGY=lock-fence", "SHOP_STOCK_BUCKETS=3"}; !reflect.DeepEqual(Common, want) {
		t.Errorf("common = %v, want %v", Common, want)
	}
	if got := extra(1); !reflect.DeepEqual(got, []string{"X=1", "SHOP_HOME_BUCKET=1"}) {
		t.Errorf("instance 1 = %v", got)
	}
	if got := extra(2); !reflect.DeepEqual(got, []string{"SHOP_HOME_BUCKET=2"}) {
		t.Errorf("instance 2 = %v", got)
	}
	if c, x := shops.WithBuckets(1, []string{"A=1"}, nil); !reflect.DeepEqual(c, []string{"A=1"}) || x != nil {
		t.Errorf("one bucket changed the settings: %v", c)
	}
}
