// Command loadtest is the shop's load-test harness: it starts N shop
// instances against one database and one Redis (or targets running ones),
// races, retries, pays and breaks things, and then proves from the database
// and from the clients' own records that nothing was oversold, ordered twice
// or charged twice.
//
//	go run ./loadtest --scenario race|retry|pay|chaos|compare|all|failover|partition|queue|bench [flags]
//
// It exits 0 only when every invariant held (compare: when the safe row is
// clean and at least one unsafe row was caught).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/seckill-lab/shop/loadtest/internal/harness"
	"github.com/seckill-lab/shop/loadtest/internal/render"
	"github.com/seckill-lab/shop/loadtest/internal/scenario"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/loadtest/internal/report"
	"github.com/seckill-lab/shop/loadtest/internal/shops"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (harness.Options, error) {
	var o harness.Options
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenarioFlag := fs.String("scenario", "race", "race, retry, pay, chaos, compare, all (these five), failover (its Redis Cluster, Sentinel, semi-sync MariaDB and Galera parts, each on a topology it starts), failover-db-async (the unsafe database row), partition (seeded network faults between the shops and Redis and MySQL), queue (a queued sale on a private RabbitMQ cluster: a consumer, the quorum leader and an instance's links faulted), bench (the hot-product benchmark), or a comma-separated list of these and of "+scenarioNames())
	fs.IntVar(&o.Users, "users", 5000, "buyers per run (race, retry, chaos, compare)")
	fs.IntVar(&o.Stock, "stock", 500, "units of the flash-sale product")
	fs.IntVar(&o.Retries, "retries", 5, "sends per buyer in retry and compare")
	fs.IntVar(&o.Instances, "instances", 3, "shop processes to start")
	fs.IntVar(&o.Concurrency, "concurrency", 256, "buyers in flight at once")
	fs.IntVar(&o.PayBuyers, "pay-orders", 500, "orders in the pay scenario")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "client timeout of one request")
	fs.DurationVar(&o.TinyTimeout, "tiny-timeout", 50*time.Millisecond, "client timeout of the sends given up early (retry, compare)")
	fs.DurationVar(&o.ChaosDuration, "chaos-duration", 20*time.Second, "how long the chaos and failover loads run (buyers are paced over it)")
	fs.DurationVar(&o.PaymentTimeout, "payment-timeout", 2*time.Second, "SHOP_PAYMENT_TIMEOUT of the pay scenario (with --target: the targets' value)")
	fs.DurationVar(&o.SweepInterval, "sweep-interval", 200*time.Millisecond, "SHOP_SWEEP_INTERVAL of the pay scenario")
	fs.DurationVar(&o.MaxDuration, "max-duration", 10*time.Minute, "upper bound of one scenario")
	fs.StringVar(&o.Report, "report", "", "directory to write report.json and report.html into")
	target := fs.String("target", "", "comma-separated base URLs of running shops (then no process is started or killed)")
	fs.StringVar(&o.AdminToken, "admin-token", getenv("SHOP_ADMIN_TOKEN"), "admin token of the --target shops ($SHOP_ADMIN_TOKEN)")
	fs.StringVar(&o.ShopBin, "shop-bin", "", "shop binary to run (default: go build ./cmd/shop)")
	fs.BoolVar(&o.Keep, "keep", false, "keep the databases, Redis keys, logs and work directory")
	fs.StringVar(&o.MysqlDSN, "mysql-dsn", getenv("SHOP_MYSQL_DSN"), "MySQL/MariaDB server DSN; each run gets a fresh database loadtest_<random> ($SHOP_MYSQL_DSN; empty: SQLite)")
	fs.StringVar(&o.RedisURL, "redis-url", getenv("SHOP_REDIS_URL"), "Redis to share, under a fresh key prefix per run ($SHOP_REDIS_URL; empty: a private redis-server, or in-process)")
	fs.StringVar(&o.Strategy, "strategy", inventory.LockFence, "SHOP_STOCK_STRATEGY of race, retry, pay and chaos")
	fs.IntVar(&o.BatchMax, "batch-max", 0, "SHOP_BATCH_MAX of every shop started (1: order coalescing off); 0: the shop's default")
	fs.IntVar(&o.StockBuckets, "stock-buckets", 0, "SHOP_STOCK_BUCKETS of every lock-fence shop started (stock buckets per product, docs chapter 9), instance i with SHOP_HOME_BUCKET=i; 0: the shop's default (one)")
	expect5xx := fs.String("expect-5xx", "", "comma-separated 5xx statuses that are not the shop's (e.g. 502,504 from a load balancer in front of --target); any other 5xx but 503 fails the run")
	linearOn := fs.Bool("linearizability", true, "check every product's client history for linearizability (exact checker; porcupine pictures with --report)")
	fs.DurationVar(&o.Linear.Timeout, "linear-timeout", 30*time.Second, "bound of one run's linearizability check; past it the verdict is unknown")
	fs.IntVar(&o.Linear.PictureOps, "linear-picture-ops", 1000, "draw a linearizable product's whole history when it has at most this many operations")
	fs.DurationVar(&o.Linear.PictureTimeout, "linear-picture-timeout", 2*time.Second, "bound of porcupine's search for one picture")
	fs.DurationVar(&o.Linear.SoldOutCache, "sold-out-cache", time.Second, "SHOP_SOLD_OUT_CACHE of the shops the checked scenarios start, and how late the linearizability check lets returned units take effect (with --target: the targets' value)")
	fs.DurationVar(&o.Bench.Phase, "bench-phase", 10*time.Second, "measured window of each phase of --scenario bench (the hot-product benchmark; not part of all)")
	fs.DurationVar(&o.Bench.Warmup, "bench-warmup", time.Second, "load before each measured window of --scenario bench, not counted")
	fs.IntVar(&o.Bench.Clients, "bench-clients", 64, "concurrent keep-alive clients of the bench's throughput phases")
	fs.IntVar(&o.Bench.RawWorkers, "bench-raw-workers", 16, "workers of the bench's raw database ceiling")
	fs.IntVar(&o.Bench.RssClients, "bench-rss-clients", 5000, "concurrent keep-alive clients of the bench's memory phase")
	fs.DurationVar(&o.Bench.RssDuration, "bench-rss-duration", 10*time.Second, "length of the bench's memory phase")
	fs.Float64Var(&o.Bench.InstanceCPU, "instance-cpu", 0, "put every shop instance of --scenario bench in a cgroup of its own allowing it this many CPUs (e.g. 0.3), as on a host of its own; needs root and the cgroup v1 cpu controller; 0: no cap")
	fs.IntVar(&o.Bench.MaxProcs, "bench-maxprocs", 0, "SHOP_MAXPROCS of every shop instance of --scenario bench (0: the shop's default, Go's GOMAXPROCS); one phase measures an instance at the other setting (1 against Go's default, Go's default against N) between two halves of one at this one")
	fs.Int64Var(&o.Seed, "seed", 0, "seed of the partition scenario's fault schedule, printed in its report so a run replays (0: a random one)")
	fs.BoolVar(&o.CompareQueue, "compare-queue", true, "compare also runs the queue column: the queued seckill mode (SHOP_SECKILL_MODE=queue) and its lab shortcuts on RabbitMQ (SHOP_AMQP_URL, default guest@127.0.0.1:5672), a consumer killed and one stopped past the heartbeat")
	fs.BoolVar(&o.CompareNet, "compare-partitions", false, "compare also runs naive, lock, lock-conditional and lock-fence under the partition scenario's seeded network faults (the partition column)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.NoLinear = !*linearOn
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *expect5xx != "" {
		o.Expect5xx = strings.Split(*expect5xx, ",")
	}
	for _, s := range strings.Split(*scenarioFlag, ",") {
		s = strings.TrimSpace(s)
		if names, ok := scenario.Groups[s]; ok {
			o.Scenarios = append(o.Scenarios, names...)
			continue
		}
		if _, ok := scenario.Lookup(s); !ok {
			return o, fmt.Errorf("--scenario: unknown %q (one of %s)", s, scenarioNames())
		}
		if s == "bench" {
			if err := o.Bench.Validate(); err != nil {
				return o, err
			}
		}
		o.Scenarios = append(o.Scenarios, s)
	}
	if *target != "" {
		for _, t := range strings.Split(*target, ",") {
			o.Targets = append(o.Targets, strings.TrimSpace(t))
		}
		if o.AdminToken == "" {
			return o, errors.New("--target needs --admin-token (or SHOP_ADMIN_TOKEN): the targets' admin token")
		}
	}
	switch {
	case o.Users < 1 || o.Stock < 1 || o.Retries < 1 || o.Instances < 1 || o.Concurrency < 1 || o.PayBuyers < 1:
		return o, errors.New("--users, --stock, --retries, --instances, --concurrency and --pay-orders must be at least 1")
	case o.Users > 1_000_000 || o.Concurrency > 4096 || o.Instances > 16 || o.Retries > 50:
		return o, errors.New("sizes out of bounds (users <= 1e6, concurrency <= 4096, instances <= 16, retries <= 50)")
	case !slices.Contains(inventory.Strategies, o.Strategy):
		return o, fmt.Errorf("--strategy: one of %s", strings.Join(inventory.Strategies, ", "))
	case o.StockBuckets < 0 || o.StockBuckets > inventory.MaxBuckets:
		return o, fmt.Errorf("--stock-buckets: between 0 and %d", inventory.MaxBuckets)
	case o.StockBuckets > 1 && o.Strategy != inventory.LockFence:
		return o, fmt.Errorf("--stock-buckets %d needs --strategy %s (only it walks buckets)", o.StockBuckets, inventory.LockFence)
	}
	return o, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	o, err := parse(args, getenv, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "loadtest:", err)
		}
		return 2
	}
	tty := false
	if f, ok := stdout.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	h := &harness.Harness{O: o, Out: stdout, Tty: tty, Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	h.Workdir, err = os.MkdirTemp("", "shop-loadtest-")
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 1
	}
	if o.Keep {
		fmt.Fprintf(stdout, "work directory (kept): %s\n", h.Workdir)
	}
	defer func() {
		if !o.Keep {
			os.RemoveAll(h.Workdir)
		}
	}()
	if len(o.Targets) == 0 {
		h.Bin = o.ShopBin
		if h.Bin == "" {
			fmt.Fprintln(stdout, "building the shop: go build ./cmd/shop")
			if h.Bin, err = shops.Build(ctx, h.Workdir); err != nil {
				fmt.Fprintln(stderr, "loadtest:", err)
				return 1
			}
		}
	}

	rep := report.Full{Started: time.Now(), Command: "go run ./loadtest " + strings.Join(args, " "), Pass: true}
	rep.Host, _ = os.Hostname()
	for _, name := range o.Scenarios {
		if ctx.Err() != nil {
			break
		}
		r := scenario.Run(ctx, h, name)
		if !r.Pass {
			rep.Pass = false
		}
		report.WriteText(stdout, r)
		rep.Scenarios = append(rep.Scenarios, r)
	}
	if ctx.Err() != nil {
		rep.Pass = false
		fmt.Fprintln(stdout, "interrupted")
	}
	if o.Report != "" {
		if err := report.WriteFiles(o.Report, rep); err != nil {
			fmt.Fprintln(stderr, "loadtest: report:", err)
			rep.Pass = false
		} else {
			fmt.Fprintf(stdout, "\nreport: %s/report.html, %s/report.json\n", o.Report, o.Report)
		}
	}
	fmt.Fprintln(stdout)
	for _, r := range rep.Scenarios {
		res := "PASS"
		if !r.Pass {
			res = "FAIL"
		}
		violations := "-"
		if r.Verdict != nil {
			violations = fmt.Sprint(len(r.Verdict.Violations))
		}
		fmt.Fprintf(stdout, "%-8s %s  violations %s  %.0f answers/s  p50 %s  p99 %s  (%s)\n", r.Name, res, violations,
			r.Summary.Throughput, render.Ms(r.Summary.P50), render.Ms(r.Summary.P99), r.Elapsed.Round(100*time.Millisecond))
	}
	if !rep.Pass {
		fmt.Fprintln(stdout, "loadtest: FAIL")
		return 1
	}
	fmt.Fprintln(stdout, "loadtest: PASS")
	return 0
}

// scenarioNames lists what --scenario takes: the groups, then every
// scenario of the registry.
func scenarioNames() string {
	names := slices.Sorted(maps.Keys(scenario.Groups))
	for _, e := range scenario.Registry {
		names = append(names, e.Name)
	}
	return strings.Join(names, ", ")
}
