package benchreport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// Two halves of a baseline add up to one phase: counts and seconds add,
// the rate is the whole's, a quantile is the larger half's, the mean
// batch is weighted by the orders each half committed, the mean lock hold
// by the batches (one hold each), the locks held by the seconds.
func TestBenchHalvesAddUp(t *testing.T) {
	a := Orders{Committed: 3000, Seconds: 1, BatchMean: 30, LockHoldMs: 6, LocksHeld: 0.6, Series: []Sample{{T: 1, Orders: 3000}},
		Load: Rate{Requests: 3000, Seconds: 1, PerSec: 3000, P50: 10 * time.Millisecond, P99: 40 * time.Millisecond, Answers: map[string]int{"201": 3000}}}
	b := Orders{Committed: 1000, Seconds: 1, BatchMean: 10, LockHoldMs: 2, LocksHeld: 0.2, Series: []Sample{{T: 1, Orders: 1000}},
		Load: Rate{Requests: 1000, Seconds: 1, PerSec: 1000, P50: 20 * time.Millisecond, P99: 30 * time.Millisecond, Answers: map[string]int{"201": 1000, "503 busy": 2}}}
	got := a.Plus(b)
	if got.Committed != 4000 || got.Seconds != 2 || got.OrdersPerSec != 2000 || got.BatchMean != 20 {
		t.Errorf("orders: %d in %.0fs = %.0f/s, batch %.1f; want 4000 in 2s = 2000/s, batch 20", got.Committed, got.Seconds, got.OrdersPerSec, got.BatchMean)
	}
	if got.LockHoldMs != 4 || math.Abs(got.LocksHeld-0.4) > 1e-9 {
		t.Errorf("locks: %.2f ms a hold, %.2f held; want 4 ms (100 batches of each half), 0.4", got.LockHoldMs, got.LocksHeld)
	}
	if l := got.Load; l.Requests != 4000 || l.PerSec != 2000 || l.P50 != 20*time.Millisecond || l.P99 != 40*time.Millisecond ||
		l.Answers["201"] != 4000 || l.Answers["503 busy"] != 2 || got.Answers["201"] != 4000 {
		t.Errorf("load: %+v", l)
	}
	if len(got.Series) != 2 || got.Series[1].T != 2 || len(a.Series) != 1 || a.Load.Answers["201"] != 3000 {
		t.Errorf("series %+v (the halves must be left as they were: %+v)", got.Series, a)
	}
}

// TestBenchTargetsShowTheSpread: three instances are judged against their
// baseline, and the baseline's halves, one thing measured twice, show how
// far apart the machine puts two measurements.
func TestBenchTargetsShowTheSpread(t *testing.T) {
	br := &Report{Raw: Raw{TxPerSec: 1000}, Orders: []Orders{
		{Instances: 1, Routing: RouteDirect, Coalescing: true, OrdersPerSec: 3000, OfRaw: 3, OfOne: 1},
		{Instances: 1, Routing: RouteDirect, Coalescing: true, OrdersPerSec: 2700, OfOne: 0.9, Baseline: true, Halves: []float64{3000, 2400}},
		{Instances: 3, Routing: RouteAffine, Coalescing: true, OrdersPerSec: 2430, OfOne: 0.81, OfBaseline: 0.9},
	}}
	var judged, spread *Target
	targets := Targets(br)
	for i, tg := range targets {
		switch {
		case strings.Contains(tg.What, "3 instances, "+RouteAffine) && tg.Want == ">= 1.0x":
			judged = &targets[i]
		case strings.Contains(tg.What, "halves, the higher ÷ the lower"):
			spread = &targets[i]
		}
	}
	if judged == nil || judged.Met || judged.Got != 0.9 {
		t.Errorf("3 instances against their baseline: %+v, want 0.9x, missed", judged)
	}
	if spread == nil || !spread.Met || spread.Got != 1.25 {
		t.Errorf("the baseline's spread: %+v, want 1.25x, no target", spread)
	}
	var out strings.Builder
	Write(&out, br)
	if !strings.Contains(out.String(), "halves before and after it: 3000 and 2400") {
		t.Errorf("the baseline's row does not give its halves:\n%s", out.String())
	}
}

// TestBenchTargetsCompareTheProcs: the instance at Go's default GOMAXPROCS
// is judged against the one at the bench's SHOP_MAXPROCS measured in
// halves around it, not as another instance count, and each row names the
// GOMAXPROCS its instance reported.
func TestBenchTargetsCompareTheProcs(t *testing.T) {
	br := &Report{Raw: Raw{TxPerSec: 1000}, Orders: []Orders{
		{Instances: 1, Routing: RouteDirect, Coalescing: true, GoMaxProcs: 1, OrdersPerSec: 3000, OfRaw: 3, OfOne: 1},
		{Instances: 1, Routing: RouteDirect, Coalescing: true, GoMaxProcs: 1, OrdersPerSec: 2800, OfOne: 0.93, Baseline: true, Halves: []float64{2900, 2700}},
		{Instances: 1, Routing: RouteDefaultProcs, Coalescing: true, GoMaxProcs: 2, OrdersPerSec: 2520, OfOne: 0.84, OfBaseline: 0.9},
	}}
	var procs *Target
	targets := Targets(br)
	for i, tg := range targets {
		if strings.Contains(tg.What, "Go's default GOMAXPROCS") {
			if procs != nil {
				t.Errorf("judged twice: %+v and %+v", *procs, tg)
			}
			procs = &targets[i]
		}
	}
	if procs == nil || procs.Got != 0.9 || procs.Want != "(no target)" {
		t.Errorf("Go's default against the bench's SHOP_MAXPROCS: %+v, want 0.9x, no target", procs)
	}
	var out strings.Builder
	Write(&out, br)
	for _, want := range []string{"1 instance(s), 0 clients, GOMAXPROCS 1:", "direct, Go's default GOMAXPROCS, 0 clients, GOMAXPROCS 2:", "= 0.90x its baseline"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the text report lacks %q:\n%s", want, out.String())
		}
	}
}

// The CPU of two halves is one phase's: the time per order weighted by the
// orders each half committed, the idle share by its seconds.
func TestBenchHalvesAddUpTheirCPU(t *testing.T) {
	a := Orders{Committed: 3000, Seconds: 1, CPU: &CPU{Per: "order", Shop: 100, ShopEach: []float64{100}, MariaDB: 40, Redis: 20, IdleShare: 0.1}}
	b := Orders{Committed: 1000, Seconds: 3, CPU: &CPU{Per: "order", Shop: 200, ShopEach: []float64{200}, MariaDB: 80, Redis: 40, IdleShare: 0.5}}
	got := a.Plus(b).CPU
	want := &CPU{Per: "order", Shop: 125, ShopEach: []float64{125}, MariaDB: 50, Redis: 25, IdleShare: 0.4}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CPU of the halves = %+v, want %+v", got, want)
	}
	if c := (Orders{}).Plus(b).CPU; c != b.CPU {
		t.Errorf("a half without CPU: %+v, want the other's", c)
	}
}

// cappedBench is a capped run's report with every phase the capped list
// picks out, and one without CPU figures.
func cappedBench() *Report {
	cpu := func(per string, idle float64) *CPU {
		return &CPU{Per: per, Shop: 215, ShopEach: []float64{215}, MariaDB: 90, Redis: 40, IdleShare: idle}
	}
	return &Report{InstanceCPU: "0.30 CPU (cpu.cfs_quota_us 30000 / cpu.cfs_period_us 100000)", InstanceCPUs: 0.3,
		Orders: []Orders{
			{Instances: 1, Routing: RouteDirect, Coalescing: true, Seconds: 1, OrdersPerSec: 1400, CPU: cpu("order", 0.2)},
			{Instances: 1, Routing: RouteDirect, Coalescing: true, Seconds: 1, OrdersPerSec: 1497, Baseline: true, CPU: cpu("order", 0.3)},
			{Instances: 3, Routing: RouteAffine, Coalescing: true, Seconds: 1, OrdersPerSec: 1439, CPU: cpu("order", 0.25)},
			{Instances: 3, Routing: RouteBuckets, Coalescing: true, Seconds: 1, OrdersPerSec: 2500, CPU: cpu("order", 0.01)},
			{Instances: 1, Routing: RouteMany, Coalescing: true, Seconds: 1, OrdersPerSec: 616, CPU: cpu("order", 0.5)},
			{Instances: 3, Routing: RouteMany, Coalescing: true, Seconds: 1, OrdersPerSec: 1370, OfBaseline: 2.22, CPU: cpu("order", 0.1)},
			{Instances: 1, Routing: RouteDirect, Seconds: 1}, // coalescing off, nothing committed: no CPU
		},
		SoldOut:  Rate{Seconds: 1, PerSec: 2966, CPU: cpu("refusal", 0.3)},
		SoldOut3: &Rate{Seconds: 1, PerSec: 9620, CPU: cpu("refusal", 0.2)},
		Healthz:  Rate{Seconds: 1, PerSec: 5000, CPU: cpu("request", 0.3)},
	}
}

// TestBenchJSONShape guards issue 33's report.json: every phase with a CPU
// measurement carries cpu_us_per_order with exactly shop, mariadbd and
// redis, equal to its cpu_per_order's (which stays); a hot-product phase's
// load does not; and the capped list has exactly the four workloads at
// their instance counts, each with exactly its five keys.
func TestBenchJSONShape(t *testing.T) {
	br := cappedBench()
	br.Capped = CappedRuns(br)
	b, err := json.Marshal(br)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	checkUs := func(where string, phase map[string]any, measured bool) {
		t.Helper()
		us, ok := phase["cpu_us_per_order"].(map[string]any)
		old, _ := phase["cpu_per_order"].(map[string]any)
		if old == nil {
			old, _ = phase["cpu_per_request"].(map[string]any)
		}
		switch {
		case !measured:
			if _, there := phase["cpu_us_per_order"]; there {
				t.Errorf("%s: cpu_us_per_order without a CPU measurement: %v", where, phase["cpu_us_per_order"])
			}
		case !ok || old == nil:
			t.Errorf("%s: cpu_us_per_order %v beside %v, want both", where, phase["cpu_us_per_order"], old)
		case !slices.Equal(slices.Sorted(maps.Keys(us)), []string{"mariadbd", "redis", "shop"}):
			t.Errorf("%s: cpu_us_per_order has keys %v, want exactly shop, mariadbd, redis", where, slices.Sorted(maps.Keys(us)))
		case us["shop"] != old["shop_us"] || us["mariadbd"] != old["mariadb_us"] || us["redis"] != old["redis_us"]:
			t.Errorf("%s: cpu_us_per_order %v is not its measurement %v", where, us, old)
		}
	}
	orders, _ := doc["orders"].([]any)
	if len(orders) != len(br.Orders) {
		t.Fatalf("orders: %v", doc["orders"])
	}
	for i, o := range orders {
		phase := o.(map[string]any)
		checkUs(br.Orders[i].Label(), phase, br.Orders[i].CPU != nil)
		checkUs(br.Orders[i].Label()+", its load", phase["load"].(map[string]any), false)
	}
	for _, k := range []string{"sold_out", "sold_out_3_instances", "healthz"} {
		phase, _ := doc[k].(map[string]any)
		checkUs(k, phase, true)
	}

	capped, _ := doc["capped"].([]any)
	var got []string
	for _, c := range capped {
		e := c.(map[string]any)
		if keys := slices.Sorted(maps.Keys(e)); !slices.Equal(keys, []string{"idle_pct", "instance_cpu", "instances", "per_s", "workload"}) {
			t.Errorf("capped entry %v has keys %v, want exactly workload, instances, instance_cpu, per_s, idle_pct", e, keys)
		}
		if e["instance_cpu"] != 0.3 {
			t.Errorf("capped entry %v: instance_cpu %v, want the number 0.3", e, e["instance_cpu"])
		}
		if _, ok := e["per_s"].(float64); !ok {
			t.Errorf("capped entry %v: per_s not a number", e)
		}
		if _, ok := e["idle_pct"].(float64); !ok {
			t.Errorf("capped entry %v: idle_pct not a number", e)
		}
		got = append(got, fmt.Sprintf("%v %v", e["workload"], e["instances"]))
	}
	want := []string{"many 1", "many 3", "soldout 1", "soldout 3", "hot-affinity 1", "hot-affinity 3", "hot-buckets 3"}
	if !slices.Equal(got, want) {
		t.Errorf("capped workloads %v, want %v", got, want)
	}
	if c := br.Capped; len(c) == len(want) && (c[4].PerSec != 1497 || c[2].PerSec != 2966 || *c[6].IdlePct != 1) {
		t.Errorf("capped entries are not their phases' figures: %+v", c)
	}

	uncapped := cappedBench()
	uncapped.InstanceCPU, uncapped.InstanceCPUs, uncapped.SoldOut3 = "", 0, nil
	uncapped.Capped = CappedRuns(uncapped)
	if b, _ := json.Marshal(uncapped); bytes.Contains(b, []byte(`"capped"`)) {
		t.Errorf("an uncapped run has a capped list: %s", b)
	}
}

// The text report gives a line per capped entry and marks the ones whose
// machine had no idle CPU; the targets still follow.
func TestBenchTextShowsCapped(t *testing.T) {
	br := cappedBench()
	br.Capped = CappedRuns(br)
	br.Targets = Targets(br)
	var out strings.Builder
	Write(&out, br)
	text := out.String()
	for _, want := range []string{
		"capped:   many, 1 instance(s) of 0.30 CPU: 616 committed orders/s; machine idle 50%\n",
		"capped:   soldout, 3 instance(s) of 0.30 CPU: 9620 refusals/s; machine idle 20%\n",
		"capped:   hot-buckets, 3 instance(s) of 0.30 CPU: 2500 committed orders/s; machine idle 1%: NO IDLE CPU",
		"machine idle 1%: NO IDLE CPU, the machine set this phase's figures",
		"target:   committed orders/s, 12 products, 3 capped instances",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, " instance(s) of 0.30 CPU: "); n != len(br.Capped) {
		t.Errorf("%d capped lines for %d entries:\n%s", n, len(br.Capped), text)
	}
}

// TestBenchTargetsOfTheShopAsShipped: one uncapped instance is held to
// issue 33's bars (4.0x the raw ceiling, p99 50 ms, 95 µs of shop CPU per
// order, refusals 0.8x /healthz); a capped instance is not the shop as
// shipped and is not judged by them.
func TestBenchTargetsOfTheShopAsShipped(t *testing.T) {
	one := Orders{Instances: 1, Routing: RouteDirect, Coalescing: true, OrdersPerSec: 3000, OfRaw: 3, OfOne: 1,
		Load: Rate{P99: 20 * time.Millisecond}, CPU: &CPU{Per: "order", Shop: 150}}
	br := &Report{Raw: Raw{TxPerSec: 1000}, Orders: []Orders{one}, RefusalRatio: 0.85}
	got := map[string]Target{}
	for _, tg := range Targets(br) {
		got[tg.What] = tg
	}
	for what, met := range map[string]bool{
		"committed orders/s, 1 instance, ÷ raw ceiling": false,
		"orders p99, 1 instance":                        true,
		"shop CPU per committed order, 1 instance":      false,
		"sold-out refusals/s ÷ /healthz":                true,
	} {
		tg, ok := got[what]
		if !ok || tg.Met != met {
			t.Errorf("%s: %+v (present %v), want met %v", what, tg, ok, met)
		}
	}
	br.InstanceCPU = "30000/100000"
	for _, tg := range Targets(br) {
		if strings.HasPrefix(tg.What, "shop CPU per committed order") || strings.HasPrefix(tg.What, "committed orders/s, 1 instance, ÷ raw") {
			t.Errorf("a capped run judged by the shop's own bar: %+v", tg)
		}
	}
}
