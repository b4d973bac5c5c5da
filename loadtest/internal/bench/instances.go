package bench

// The phases of more than one instance: two and three instances of one
// cluster (product-affine, round robin, nginx), stock buckets, and the
// capped instances of --instance-cpu.

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/topo"
	"github.com/seckill-lab/shop/loadtest/internal/benchreport"
	"github.com/seckill-lab/shop/loadtest/internal/shops"
)

// startShops starts a phase's n instances, each capped at --instance-cpu
// CPUs when it is set; the report notes the cap as read back.
func (h runner) startShops(ctx context.Context, b *shops.Backend, n int, name string, common []string, extra func(int) []string, br *benchreport.Report) (*shops.Cluster, error) {
	place := func(int) shops.Placement { return shops.Placement{CPU: h.O.Bench.InstanceCPU} }
	c, err := shops.StartPlaced(ctx, h.Bin, b, n, fmt.Sprintf("%02d-%s", h.Seq, name), h.Workdir, common, extra, place)
	if err == nil && br.InstanceCPU == "" && len(c.Instances) > 0 {
		br.InstanceCPU, br.InstanceCPUs = c.Instances[0].CPUQuota()
	}
	return c, err
}

// BenchCapped (--instance-cpu) measures what more instances buy when each
// has cores of its own: a sale of 12 products at once, load spread evenly
// and each product's orders sent to one instance, on one capped instance
// and then on three; and sold-out refusals on three capped instances,
// round robin, beside the one-instance phase's. One hot product on one and
// three capped instances (affinity, and K=3 buckets on three) needs no
// phase of its own: the phases before this one run capped too, and the
// report's capped list picks them out (benchreport.CappedRuns).
func (h runner) BenchCapped(ctx context.Context, db *sql.DB, start func(int, string, []string) (*shops.Cluster, error), common []string, users *benchUsers, br *benchreport.Report) error {
	o := h.O.Bench
	many := func(n int) (benchreport.Orders, *shops.Cluster, error) {
		c, err := start(n, fmt.Sprintf("bench-%d-many", n), common)
		if err != nil {
			return benchreport.Orders{}, nil, err
		}
		users.Secret = []byte(c.Secret)
		h.BenchSay("bench: 12 products at once, %d capped instance(s), product-affine, %d clients", n, o.Clients)
		ord, err := h.BenchOrders(ctx, db, c, users, benchRoute{Products: 12, Routing: benchreport.RouteMany, Urls: c.Urls(), Shops: n, Affine: true, EachInstance: n == 3})
		return ord, c, err
	}
	one, c1, err := many(1)
	if c1 != nil {
		c1.Close()
	}
	br.Orders = append(br.Orders, one)
	if err != nil {
		return err
	}
	three, c3, err := many(3)
	if c3 != nil {
		defer c3.Close()
	}
	if one.OrdersPerSec > 0 {
		three.OfBaseline = three.OrdersPerSec / one.OrdersPerSec
	}
	br.Orders = append(br.Orders, three)
	if err != nil {
		return err
	}
	h.BenchSay("bench: sold-out refusals, 3 capped instances, round robin, %d clients", o.Clients)
	_, _, s3, err := h.soldOutPhase(ctx, db, c3, users, "bench sold out, 3 instances")
	br.SoldOut3 = &s3
	if err != nil {
		return fmt.Errorf("sold-out phase, 3 instances: %w", err)
	}
	return nil
}

// benchThree runs two and three instances of one cluster (the third idle
// in the first), reached as deploy/nginx.conf does (the product's orders
// to one instance), the lab's round robin, and through nginx itself.
func (h runner) BenchThree(ctx context.Context, db *sql.DB, start func(int, string, []string) (*shops.Cluster, error), common []string, users *benchUsers, br *benchreport.Report) error {
	c3, err := start(3, "bench-3", common)
	if err != nil {
		return err
	}
	defer c3.Close()
	users.Secret = []byte(c3.Secret)
	// Whichever instance a product hashes to, it has served load before
	// (pools open, heap grown), as the baseline's instance has.
	if err := h.warmEach(ctx, c3, users, "three"); err != nil {
		return err
	}
	// Two instances; three, against one instance of the same cluster
	// measured in halves around them; the lab's round robin.
	two := benchRoute{Routing: benchreport.RouteAffine, Urls: c3.Urls()[:2], Shops: 2, Affine: true}
	h.BenchSay("bench: hot product, %d instances, %s, %d clients", two.Shops, two.Routing, h.O.Bench.Clients)
	ord, err := h.BenchOrders(ctx, db, c3, users, two)
	br.Orders = append(br.Orders, ord)
	if err != nil {
		return err
	}
	one := func(window time.Duration) (benchreport.Orders, error) {
		rt := benchRoute{Routing: benchreport.RouteDirect, Urls: c3.Urls()[:1], Shops: 1, Window: window}
		h.BenchSay("bench: hot product, 1 instance of the three (baseline, %s), %d clients", window, h.O.Bench.Clients)
		return h.BenchOrders(ctx, db, c3, users, rt)
	}
	three := func() (benchreport.Orders, error) {
		rt := benchRoute{Routing: benchreport.RouteAffine, Urls: c3.Urls(), Shops: 3, Affine: true, Restock: true}
		h.BenchSay("bench: hot product, %d instances, %s, %d clients", rt.Shops, rt.Routing, h.O.Bench.Clients)
		return h.BenchOrders(ctx, db, c3, users, rt)
	}
	if err := h.BenchAround(br, one, three); err != nil {
		return err
	}
	// Round robin: three leaders of one product take turns at its lock,
	// each keeping it only while nobody else asks: every instance must
	// commit in every second (min_instance_orders_per_s).
	spread := benchRoute{Routing: benchreport.RouteSpread, Urls: c3.Urls(), Shops: 3, EachInstance: true}
	h.BenchSay("bench: hot product, %d instances, %s, %d clients", spread.Shops, spread.Routing, h.O.Bench.Clients)
	ord, err = h.BenchOrders(ctx, db, c3, users, spread)
	br.Orders = append(br.Orders, ord)
	if err != nil {
		return err
	}
	// Through nginx: three instances behind it, against one instance
	// behind the same nginx (nginx takes its share of the same cores)
	// measured in halves around them, on the same cluster and database.
	if !topo.NginxInstalled() {
		h.BenchSay("bench: %s", benchreport.RouteNoNginx)
		return nil
	}
	oneNginx := func(window time.Duration) (benchreport.Orders, error) {
		return h.BenchBehindNginx(ctx, db, c3, c3.Urls()[:1], users, window)
	}
	threeNginx := func() (benchreport.Orders, error) {
		return h.BenchBehindNginx(ctx, db, c3, c3.Urls(), users, 0)
	}
	return h.BenchAround(br, oneNginx, threeNginx)
}

// warmEach gives each of c's instances a hot product's load for a
// warm-up, unmeasured, so that every instance a phase compares has served
// load before (pools open, heap grown). of names the cluster in the log.
func (h runner) warmEach(ctx context.Context, c *shops.Cluster, users *benchUsers, of string) error {
	d := max(h.O.Bench.Warmup, time.Second)
	for i, u := range c.Urls() {
		warm, _, err := hotLoad(ctx, c, users, fmt.Sprintf("bench warm-up %s %d", of, i), 1)
		if err != nil {
			return err
		}
		h.BenchSay("bench: warm-up of instance %d of the %s, %s (not counted)", i+1, of, d)
		if _, err := warm.Run(ctx, []string{u}, h.O.Bench.Clients, 0, d); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	return nil
}

// benchAround runs test between two halves of its one-instance baseline,
// so that load from elsewhere on a shared machine, and the database
// growing phase by phase, weigh on both sides of their ratio (as the raw
// ceiling's halves do around the first one-instance phase). Both go into
// the report, the baseline's halves as one phase.
func (h runner) BenchAround(br *benchreport.Report, baseline func(window time.Duration) (benchreport.Orders, error), test func() (benchreport.Orders, error)) error {
	phase := h.O.Bench.Phase
	first, err := baseline(phase / 2)
	if err != nil {
		br.Orders = append(br.Orders, first)
		return err
	}
	t, err := test()
	if err != nil {
		br.Orders = append(br.Orders, first, t)
		return err
	}
	second, err := baseline(phase - phase/2)
	base := first.Plus(second)
	base.Baseline = true
	base.Halves = []float64{first.OrdersPerSec, second.OrdersPerSec}
	if base.OrdersPerSec > 0 {
		t.OfBaseline = t.OrdersPerSec / base.OrdersPerSec
	}
	br.Orders = append(br.Orders, base, t)
	return err
}

// benchBuckets is the stock-bucket phase (docs chapter 9), beside the
// product-affine one: three instances of their own, reached round robin,
// each starting at its own bucket of a product held in three (instance i
// at bucket i). Buckets need lock-fence; under another strategy the phase
// is left out.
func (h runner) BenchBuckets(ctx context.Context, b *shops.Backend, db *sql.DB, common []string, users *benchUsers, br *benchreport.Report) error {
	if h.O.Strategy != inventory.LockFence {
		h.BenchSay("bench: stock buckets need --strategy %s: skipped", inventory.LockFence)
		return nil
	}
	common, extra := shops.WithBuckets(3, slices.DeleteFunc(slices.Clone(common), func(kv string) bool { return strings.HasPrefix(kv, "SHOP_STOCK_BUCKETS=") }), nil)
	c, err := h.startShops(ctx, b, 3, "bench-3-buckets", common, extra, br)
	if err != nil {
		return err
	}
	defer c.Close()
	users.Secret = []byte(c.Secret)
	rt := benchRoute{Routing: benchreport.RouteBuckets, Urls: c.Urls(), Shops: 3}
	h.BenchSay("bench: hot product, %d instances, %s, %d clients", rt.Shops, rt.Routing, h.O.Bench.Clients)
	ord, err := h.BenchOrders(ctx, db, c, users, rt)
	br.Orders = append(br.Orders, ord)
	return err
}

// benchBehindNginx runs a hot-product phase through nginx with
// deploy/nginx.conf in front of shops (instances of c), measured over
// window (0: --bench-phase).
func (h runner) BenchBehindNginx(ctx context.Context, db *sql.DB, c *shops.Cluster, urls []string, users *benchUsers, window time.Duration) (benchreport.Orders, error) {
	front, err := shops.StartNginx(ctx, h.Workdir, urls)
	if err != nil {
		return benchreport.Orders{Instances: len(urls), Routing: benchreport.RouteNginx}, err
	}
	defer front.Close()
	rt := benchRoute{Routing: benchreport.RouteNginx, Urls: []string{front.URL()}, Shops: len(urls), Window: window}
	h.BenchSay("bench: hot product, %d instances, %s, %d clients", rt.Shops, rt.Routing, h.O.Bench.Clients)
	return h.BenchOrders(ctx, db, c, users, rt)
}
