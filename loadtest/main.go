// Command loadtest is the shop's load-test harness: it starts N shop
// instances against one database and one Redis (or targets running ones),
// races, retries, pays and breaks things, and then proves from the database
// and from the clients' own records that nothing was oversold, ordered twice
// or charged twice.
//
//	go run ./loadtest --scenario race|retry|pay|chaos|compare|all|failover|bench [flags]
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
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/loadgen"
)

var allScenarios = []string{"race", "retry", "pay", "chaos", "compare"}

type options struct {
	scenarios      []string
	users          int
	stock          int
	retries        int
	instances      int
	concurrency    int
	payBuyers      int
	timeout        time.Duration
	tinyTimeout    time.Duration
	chaosDuration  time.Duration
	paymentTimeout time.Duration
	sweepInterval  time.Duration
	maxDuration    time.Duration
	report         string
	targets        []string
	adminToken     string
	shopBin        string
	keep           bool
	mysqlDSN       string
	redisURL       string
	strategy       string
	batchMax       int
	stockBuckets   int      // SHOP_STOCK_BUCKETS of the lock-fence shops started; 0: the shop's default
	expect5xx      []string // statuses (e.g. a load balancer's 504) A1 does not count against the shop
	linear         loadgen.LinearOptions
	noLinear       bool
	bench          benchOptions
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", "race", "race, retry, pay, chaos, compare, all (these five), failover (starts its own Redis Cluster and Sentinel group), bench (the hot-product benchmark), or a comma-separated list")
	fs.IntVar(&o.users, "users", 5000, "buyers per run (race, retry, chaos, compare)")
	fs.IntVar(&o.stock, "stock", 500, "units of the flash-sale product")
	fs.IntVar(&o.retries, "retries", 5, "sends per buyer in retry and compare")
	fs.IntVar(&o.instances, "instances", 3, "shop processes to start")
	fs.IntVar(&o.concurrency, "concurrency", 256, "buyers in flight at once")
	fs.IntVar(&o.payBuyers, "pay-orders", 500, "orders in the pay scenario")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "client timeout of one request")
	fs.DurationVar(&o.tinyTimeout, "tiny-timeout", 50*time.Millisecond, "client timeout of the sends given up early (retry, compare)")
	fs.DurationVar(&o.chaosDuration, "chaos-duration", 20*time.Second, "how long the chaos and failover loads run (buyers are paced over it)")
	fs.DurationVar(&o.paymentTimeout, "payment-timeout", 2*time.Second, "SHOP_PAYMENT_TIMEOUT of the pay scenario (with --target: the targets' value)")
	fs.DurationVar(&o.sweepInterval, "sweep-interval", 200*time.Millisecond, "SHOP_SWEEP_INTERVAL of the pay scenario")
	fs.DurationVar(&o.maxDuration, "max-duration", 10*time.Minute, "upper bound of one scenario")
	fs.StringVar(&o.report, "report", "", "directory to write report.json and report.html into")
	target := fs.String("target", "", "comma-separated base URLs of running shops (then no process is started or killed)")
	fs.StringVar(&o.adminToken, "admin-token", getenv("SHOP_ADMIN_TOKEN"), "admin token of the --target shops ($SHOP_ADMIN_TOKEN)")
	fs.StringVar(&o.shopBin, "shop-bin", "", "shop binary to run (default: go build ./cmd/shop)")
	fs.BoolVar(&o.keep, "keep", false, "keep the databases, Redis keys, logs and work directory")
	fs.StringVar(&o.mysqlDSN, "mysql-dsn", getenv("SHOP_MYSQL_DSN"), "MySQL/MariaDB server DSN; each run gets a fresh database loadtest_<random> ($SHOP_MYSQL_DSN; empty: SQLite)")
	fs.StringVar(&o.redisURL, "redis-url", getenv("SHOP_REDIS_URL"), "Redis to share, under a fresh key prefix per run ($SHOP_REDIS_URL; empty: a private redis-server, or in-process)")
	fs.StringVar(&o.strategy, "strategy", inventory.LockFence, "SHOP_STOCK_STRATEGY of race, retry, pay and chaos")
	fs.IntVar(&o.batchMax, "batch-max", 0, "SHOP_BATCH_MAX of every shop started (1: order coalescing off); 0: the shop's default")
	fs.IntVar(&o.stockBuckets, "stock-buckets", 0, "SHOP_STOCK_BUCKETS of every lock-fence shop started (stock buckets per product, docs chapter 9), instance i with SHOP_HOME_BUCKET=i; 0: the shop's default (one)")
	expect5xx := fs.String("expect-5xx", "", "comma-separated 5xx statuses that are not the shop's (e.g. 502,504 from a load balancer in front of --target); any other 5xx but 503 fails the run")
	linearOn := fs.Bool("linearizability", true, "check every product's client history for linearizability (exact checker; porcupine pictures with --report)")
	fs.DurationVar(&o.linear.Timeout, "linear-timeout", 30*time.Second, "bound of one run's linearizability check; past it the verdict is unknown")
	fs.IntVar(&o.linear.PictureOps, "linear-picture-ops", 1000, "draw a linearizable product's whole history when it has at most this many operations")
	fs.DurationVar(&o.linear.PictureTimeout, "linear-picture-timeout", 2*time.Second, "bound of porcupine's search for one picture")
	fs.DurationVar(&o.linear.SoldOutCache, "sold-out-cache", time.Second, "SHOP_SOLD_OUT_CACHE of the shops the checked scenarios start, and how late the linearizability check lets returned units take effect (with --target: the targets' value)")
	fs.DurationVar(&o.bench.phase, "bench-phase", 10*time.Second, "measured window of each phase of --scenario bench (the hot-product benchmark; not part of all)")
	fs.DurationVar(&o.bench.warmup, "bench-warmup", time.Second, "load before each measured window of --scenario bench, not counted")
	fs.IntVar(&o.bench.clients, "bench-clients", 64, "concurrent keep-alive clients of the bench's throughput phases")
	fs.IntVar(&o.bench.rawWorkers, "bench-raw-workers", 16, "workers of the bench's raw database ceiling")
	fs.IntVar(&o.bench.rssClients, "bench-rss-clients", 5000, "concurrent keep-alive clients of the bench's memory phase")
	fs.DurationVar(&o.bench.rssDuration, "bench-rss-duration", 10*time.Second, "length of the bench's memory phase")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.noLinear = !*linearOn
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *expect5xx != "" {
		o.expect5xx = strings.Split(*expect5xx, ",")
	}
	for _, s := range strings.Split(*scenario, ",") {
		s = strings.TrimSpace(s)
		switch {
		case s == "all":
			o.scenarios = append(o.scenarios, allScenarios...)
		case slices.Contains(allScenarios, s):
			o.scenarios = append(o.scenarios, s)
		case s == "failover": // both parts; each starts its own Redis
			o.scenarios = append(o.scenarios, failoverCluster, failoverSentinel)
		case s == failoverCluster || s == failoverSentinel:
			o.scenarios = append(o.scenarios, s)
		case s == "bench":
			if err := o.bench.validate(); err != nil {
				return o, err
			}
			o.scenarios = append(o.scenarios, s)
		default:
			return o, fmt.Errorf("--scenario: unknown %q (race, retry, pay, chaos, compare, all, failover, bench)", s)
		}
	}
	if *target != "" {
		for _, t := range strings.Split(*target, ",") {
			o.targets = append(o.targets, strings.TrimSpace(t))
		}
		if o.adminToken == "" {
			return o, errors.New("--target needs --admin-token (or SHOP_ADMIN_TOKEN): the targets' admin token")
		}
	}
	switch {
	case o.users < 1 || o.stock < 1 || o.retries < 1 || o.instances < 1 || o.concurrency < 1 || o.payBuyers < 1:
		return o, errors.New("--users, --stock, --retries, --instances, --concurrency and --pay-orders must be at least 1")
	case o.users > 1_000_000 || o.concurrency > 4096 || o.instances > 16 || o.retries > 50:
		return o, errors.New("sizes out of bounds (users <= 1e6, concurrency <= 4096, instances <= 16, retries <= 50)")
	case !slices.Contains(inventory.Strategies, o.strategy):
		return o, fmt.Errorf("--strategy: one of %s", strings.Join(inventory.Strategies, ", "))
	case o.stockBuckets < 0 || o.stockBuckets > inventory.MaxBuckets:
		return o, fmt.Errorf("--stock-buckets: between 0 and %d", inventory.MaxBuckets)
	case o.stockBuckets > 1 && o.strategy != inventory.LockFence:
		return o, fmt.Errorf("--stock-buckets %d needs --strategy %s (only it walks buckets)", o.stockBuckets, inventory.LockFence)
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
	h := &harness{o: o, out: stdout, tty: tty, log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	h.workdir, err = os.MkdirTemp("", "shop-loadtest-")
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 1
	}
	if o.keep {
		fmt.Fprintf(stdout, "work directory (kept): %s\n", h.workdir)
	}
	defer func() {
		if !o.keep {
			os.RemoveAll(h.workdir)
		}
	}()
	if len(o.targets) == 0 {
		h.bin = o.shopBin
		if h.bin == "" {
			fmt.Fprintln(stdout, "building the shop: go build ./cmd/shop")
			if h.bin, err = buildShop(ctx, h.workdir); err != nil {
				fmt.Fprintln(stderr, "loadtest:", err)
				return 1
			}
		}
	}

	rep := fullReport{Started: time.Now(), Command: "go run ./loadtest " + strings.Join(args, " "), Pass: true}
	rep.Host, _ = os.Hostname()
	for _, name := range o.scenarios {
		if ctx.Err() != nil {
			break
		}
		r := h.run(ctx, name)
		if !r.Pass {
			rep.Pass = false
		}
		writeText(stdout, r)
		rep.Scenarios = append(rep.Scenarios, r)
	}
	if ctx.Err() != nil {
		rep.Pass = false
		fmt.Fprintln(stdout, "interrupted")
	}
	if o.report != "" {
		if err := writeFiles(o.report, rep); err != nil {
			fmt.Fprintln(stderr, "loadtest: report:", err)
			rep.Pass = false
		} else {
			fmt.Fprintf(stdout, "\nreport: %s/report.html, %s/report.json\n", o.report, o.report)
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
			r.Summary.Throughput, ms(r.Summary.P50), ms(r.Summary.P99), r.Elapsed.Round(100*time.Millisecond))
	}
	if !rep.Pass {
		fmt.Fprintln(stdout, "loadtest: FAIL")
		return 1
	}
	fmt.Fprintln(stdout, "loadtest: PASS")
	return 0
}
