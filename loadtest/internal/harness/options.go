package harness

import (
	"errors"
	"time"

	"github.com/seckill-lab/shop/internal/loadgen"
)

// BenchOptions are the bench scenario's flags.
type BenchOptions struct {
	Phase       time.Duration // measured window of each phase
	Warmup      time.Duration // load before each window, not counted
	Clients     int           // concurrent HTTP clients of the throughput phases
	RawWorkers  int           // workers of the raw database ceiling
	RssClients  int           // concurrent keep-alive clients of the memory phase
	RssDuration time.Duration // how long the memory phase runs
	// InstanceCPU, above 0, puts every shop instance the bench starts in a
	// cgroup of its own allowing it that many CPUs, as on a host of its own.
	InstanceCPU float64
	// MaxProcs is the SHOP_MAXPROCS of every shop instance the bench
	// starts (0: the shop's default, Go's GOMAXPROCS); one phase runs an
	// instance at the other setting beside one at this.
	MaxProcs int
}

func (o BenchOptions) Validate() error {
	switch {
	case o.Phase <= 0 || o.Warmup < 0 || o.RssDuration <= 0:
		return errors.New("--bench-phase and --bench-rss-duration must be positive, --bench-warmup not negative")
	case o.InstanceCPU < 0:
		return errors.New("--instance-cpu must not be negative")
	case o.MaxProcs < 0 || o.MaxProcs > 1024:
		return errors.New("--bench-maxprocs must be between 0 and 1024")
	case o.Clients < 1 || o.RawWorkers < 1 || o.RssClients < 1:
		return errors.New("--bench-clients, --bench-raw-workers and --bench-rss-clients must be at least 1")
	case o.Clients > 4096 || o.RawWorkers > 256 || o.RssClients > 20_000:
		return errors.New("bench sizes out of bounds (clients <= 4096, raw workers <= 256, rss clients <= 20000)")
	}
	return nil
}

type Options struct {
	Scenarios      []string
	Users          int
	Stock          int
	Retries        int
	Instances      int
	Concurrency    int
	PayBuyers      int
	Timeout        time.Duration
	TinyTimeout    time.Duration
	ChaosDuration  time.Duration
	PaymentTimeout time.Duration
	SweepInterval  time.Duration
	MaxDuration    time.Duration
	Report         string
	Targets        []string
	AdminToken     string
	ShopBin        string
	Keep           bool
	MysqlDSN       string
	RedisURL       string
	Strategy       string
	BatchMax       int
	StockBuckets   int      // SHOP_STOCK_BUCKETS of the lock-fence shops started; 0: the shop's default
	Expect5xx      []string // statuses (e.g. a load balancer's 504) A1 does not count against the shop
	Linear         loadgen.LinearOptions
	NoLinear       bool
	Bench          BenchOptions
	Seed           int64 // the partition scenario's schedule (0: drawn at random, and reported)
	CompareNet     bool  // compare also runs the unsafe rows and lock-fence under the partition schedule
	CompareQueue   bool  // compare also runs the queue column (queued mode, safe and lab shortcuts) on RabbitMQ
}
