// Package platform opens what the shop runs on: configuration, the database
// (MySQL/MariaDB, or an embedded SQLite file for demos), Redis (a server, a
// Cluster/Sentinel, or an in-process miniredis for demos) and the schema.
package platform

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-lab/shop/internal/inventory"
)

// Config is every setting of the shop, read once at start.
type Config struct {
	Addr            string
	MySQLDSN        string
	SQLitePath      string
	DBMaxConns      int
	RedisURL        string
	RedisMaster     string // Sentinel master name, with a comma-separated RedisURL
	RedisPrefix     string
	RedisShareTrips bool   // per-request Redis calls of concurrent requests share round trips
	EmbeddedRedis   string // listen address of the in-process Redis when RedisURL is empty

	AdminToken     string
	AuthSecret     string
	TokenTTL       time.Duration
	DemoLogin      bool
	DemoCatalog    string // auto, true or false: see DemoCatalogOn
	PaymentTimeout time.Duration
	SweepInterval  time.Duration

	LockTTL       time.Duration
	LockWait      time.Duration
	IdemRetention time.Duration
	IdemLease     time.Duration
	SoldOutCache  time.Duration
	BatchMax      int64         // orders of one product per lock hold and transaction
	BatchWindow   time.Duration // optional wait for a batch to fill
	KeepBatches   int64         // batches a leader may run under one kept product hold; 1: off
	KeepFor       time.Duration // how long a leader may keep a product hold
	DBPackets     bool          // a batch's writes in one round trip (MySQL only)
	MemoryLimit   int64         // MiB, the Go runtime's soft memory limit unless GOMEMLIMIT is set
	GCPercent     int64         // the Go runtime's GC percent unless GOGC is set
	MaxProcs      int64         // the Go runtime's GOMAXPROCS unless GOMAXPROCS is set; 0: Go's default
	LockReplicas  int64         // replicas that must acknowledge a lock (Redis WAIT); 0: off
	StockStrategy string
	StockBuckets  int64 // K of products created from now on; 1: off
	HomeBucket    int64 // this instance's first bucket (mod K); -1: drawn from a Redis counter at start
	ShutdownWait  time.Duration
	LogLevel      string
	LogFormat     string
	PprofAddr     string // listen address of net/http/pprof; empty: off

	// Tracing (OpenTelemetry's standard variables): off unless
	// OTLPEndpoint names a collector.
	OTLPEndpoint    string
	ServiceName     string
	TraceSampler    string
	TraceSamplerArg string
	LabRoutes       bool

	LabPauseAfterLock   time.Duration
	LabPauseProbability float64
	LabSlowPayment      time.Duration
	LabNoIdempotency    bool

	// Server limits (README "Limits and abuse").
	ReadTimeout    time.Duration // whole request read, headers and body
	RequestTimeout time.Duration // a handler's total time
	MaxConns       int           // open connections per instance
	TrustedProxies []string      // addresses whose X-Forwarded-For is believed
	RateOrders     Rate          // per user: seckill and regular orders
	RatePay        Rate          // per user: payments
	RateFormTokens Rate          // per user: form tokens
	RateLogin      Rate          // per client address: demo login
	UnpaidUnits    int64         // per user: units held in pending orders

	// The queued seckill mode (docs/api.md "Queued seckill").
	SeckillMode         string // sync or queue
	AMQPURL             string
	QueueName           string
	QueuePrefetch       int64
	QueueLease          time.Duration
	QueueConfirmTimeout time.Duration
	QueueConsume        bool   // this instance runs a consumer
	LabQueueShortcut    string // LAB FAULT: in-process, auto-ack, no-order-no; empty: none
}

// Seckill modes.
const (
	SeckillSync  = "sync"
	SeckillQueue = "queue"
)

// QueueShortcuts are the lab's unsafe queue rows (SHOP_LAB_QUEUE_SHORTCUT).
var QueueShortcuts = []string{"in-process", "auto-ack", "no-order-no"}

// Rate is a rate limit: N requests per Per sustained, Burst at once. The
// zero Rate is no limit.
type Rate struct {
	N     int
	Per   time.Duration
	Burst int
}

// Off reports whether the limit is turned off.
func (r Rate) Off() bool { return r.N == 0 }

// parseRate reads "N/unit" or "N/unit:burst" (unit s, m, h or a duration such
// as 10s); "off" or "0" turns the limit off.
func parseRate(v string) (Rate, error) {
	if v == "off" || v == "0" {
		return Rate{}, nil
	}
	bad := fmt.Errorf("not a rate such as 5/s:30 (5 per second, bursts of 30) or off: %q", v)
	spec, burst, hasBurst := strings.Cut(v, ":")
	num, unit, ok := strings.Cut(spec, "/")
	if !ok {
		return Rate{}, bad
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 {
		return Rate{}, bad
	}
	per := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[unit]
	if per == 0 {
		if per, err = time.ParseDuration(unit); err != nil || per <= 0 {
			return Rate{}, bad
		}
	}
	r := Rate{N: n, Per: per, Burst: n}
	if hasBurst {
		if r.Burst, err = strconv.Atoi(burst); err != nil || r.Burst < 1 {
			return Rate{}, bad
		}
	}
	return r, nil
}

func rate(p func(*Config) *Rate) func(*Config, string) error {
	return func(c *Config, v string) error {
		r, err := parseRate(v)
		*p(c) = r
		return err
	}
}

func integer(p func(*Config) *int64, lo, hi int64) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("must be an integer between %d and %d, got %q", lo, hi, v)
		}
		*p(c) = n
		return nil
	}
}

// setting describes one configuration value: its flag, its environment
// variable, its default and where it lands in Config.
type setting struct {
	flag, env, def, usage string
	set                   func(c *Config, v string) error
}

func str(p func(*Config) *string) func(*Config, string) error {
	return func(c *Config, v string) error { *p(c) = v; return nil }
}

func dur(p func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("not a duration (e.g. 5s, 15m): %q", v)
		}
		*p(c) = d
		return nil
	}
}

func boolean(p func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("not a boolean (true/false): %q", v)
		}
		*p(c) = b
		return nil
	}
}

var settings = []setting{
	{"addr", "SHOP_ADDR", ":8080", "HTTP listen address", str(func(c *Config) *string { return &c.Addr })},
	{"mysql-dsn", "SHOP_MYSQL_DSN", "", "MySQL/MariaDB DSN (go-sql-driver form); empty: embedded SQLite", str(func(c *Config) *string { return &c.MySQLDSN })},
	{"db-max-conns", "SHOP_DB_MAX_CONNS", "20", "MySQL connection pool size of this instance", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return fmt.Errorf("must be an integer between 1 and 1000, got %q", v)
		}
		c.DBMaxConns = n
		return nil
	}},
	{"sqlite-path", "SHOP_SQLITE_PATH", "./shop.db", "SQLite file used when no MySQL DSN is set (demo only)", str(func(c *Config) *string { return &c.SQLitePath })},
	{"redis-url", "SHOP_REDIS_URL", "", "redis://host:port/db, or host:port,host:port for Cluster/Sentinel; empty: in-process Redis", str(func(c *Config) *string { return &c.RedisURL })},
	{"redis-master", "SHOP_REDIS_MASTER", "", "Sentinel master name (with an address list in SHOP_REDIS_URL)", str(func(c *Config) *string { return &c.RedisMaster })},
	{"redis-prefix", "SHOP_REDIS_PREFIX", "shop:", "prefix of every Redis key the shop writes", str(func(c *Config) *string { return &c.RedisPrefix })},
	{"redis-share-trips", "SHOP_REDIS_SHARE_TRIPS", "true", "the per-request Redis calls of concurrent requests (rate limits, processed markers) share round trips: queued while one is in flight, sent as one pipeline (not on a Cluster or the in-process Redis); false: one round trip per call", boolean(func(c *Config) *bool { return &c.RedisShareTrips })},
	{"embedded-redis-addr", "SHOP_EMBEDDED_REDIS_ADDR", "127.0.0.1:0", "listen address of the in-process Redis (demo only)", str(func(c *Config) *string { return &c.EmbeddedRedis })},
	{"admin-token", "SHOP_ADMIN_TOKEN", "", "bearer token of the admin routes; empty: random, logged at start", str(func(c *Config) *string { return &c.AdminToken })},
	{"auth-secret", "SHOP_AUTH_SECRET", "", "HMAC secret of user tokens; empty: random at start", str(func(c *Config) *string { return &c.AuthSecret })},
	{"token-ttl", "SHOP_TOKEN_TTL", "24h", "lifetime of a demo-login user token", dur(func(c *Config) *time.Duration { return &c.TokenTTL })},
	{"demo-login", "SHOP_DEMO_LOGIN", "true", "serve POST /api/v1/auth/token (password-less demo login)", boolean(func(c *Config) *bool { return &c.DemoLogin })},
	{"demo-catalog", "SHOP_DEMO_CATALOG", "auto", "at start, create the demo catalog once (a flash-sale item, regular items, $100.00 in the wallets of demo users 1-20): auto (only with the embedded SQLite), true or false", str(func(c *Config) *string { return &c.DemoCatalog })},
	{"payment-timeout", "SHOP_PAYMENT_TIMEOUT", "15m", "unpaid orders older than this are cancelled by the sweeper", dur(func(c *Config) *time.Duration { return &c.PaymentTimeout })},
	{"sweep-interval", "SHOP_SWEEP_INTERVAL", "5s", "how often the timeout sweeper runs; 0 disables it", dur(func(c *Config) *time.Duration { return &c.SweepInterval })},
	{"lock-ttl", "SHOP_LOCK_TTL", "5s", "lease of a product or account lock (renewed by the watchdog)", dur(func(c *Config) *time.Duration { return &c.LockTTL })},
	{"lock-wait", "SHOP_LOCK_WAIT", "2s", "how long a request waits for a lock before 503 busy", dur(func(c *Config) *time.Duration { return &c.LockWait })},
	{"idem-retention", "SHOP_IDEM_RETENTION", "24h", "how long a completed Idempotency-Key result is kept", dur(func(c *Config) *time.Duration { return &c.IdemRetention })},
	{"idem-lease", "SHOP_IDEM_LEASE", "30s", "in-flight lease of an Idempotency-Key claim (a crashed instance frees it after this)", dur(func(c *Config) *time.Duration { return &c.IdemLease })},
	{"sold-out-cache", "SHOP_SOLD_OUT_CACHE", "1s", "how long an instance trusts its in-memory sold-out book before one request re-reads the product row", dur(func(c *Config) *time.Duration { return &c.SoldOutCache })},
	{"lock-replicas", "SHOP_LOCK_REPLICAS", "0", "replicas that must acknowledge a lock after it is taken or renewed (Redis WAIT), or it is not held; 0: off. Narrows, does not close, the failover window: the fence is the guarantee", integer(func(c *Config) *int64 { return &c.LockReplicas }, 0, 16)},
	{"batch-max", "SHOP_BATCH_MAX", "128", "most orders of one product placed under one lock hold and one transaction; 1 turns coalescing off", integer(func(c *Config) *int64 { return &c.BatchMax }, 1, 10_000)},
	{"lock-keep-batches", "SHOP_LOCK_KEEP_BATCHES", "16", "most batches of one product a leader runs under one product lock hold, kept while buyers queue and nobody else asks for the lock (docs chapter 9); 1: every batch takes and releases the lock", integer(func(c *Config) *int64 { return &c.KeepBatches }, 1, 10_000)},
	{"lock-keep-for", "SHOP_LOCK_KEEP_FOR", "50ms", "longest a leader keeps a product lock hold across batches, so restocks, cancels and other instances get their turn", dur(func(c *Config) *time.Duration { return &c.KeepFor })},
	{"db-packets", "SHOP_DB_PACKETS", "true", "a batch's stock update, ledger rows, orders and COMMIT go to MySQL/MariaDB as one multi-statement packet on a pool of its own, written only if the fenced stock update matched (docs chapter 9); never on a Galera cluster; false: one round trip per statement", boolean(func(c *Config) *bool { return &c.DBPackets })},
	{"batch-window", "SHOP_BATCH_WINDOW", "0s", "wait before a batch is taken so more orders join it; 0: only what queued while the previous batch ran", dur(func(c *Config) *time.Duration { return &c.BatchWindow })},
	{"memory-limit", "SHOP_MEMORY_LIMIT", "112", "soft memory limit in MiB for the Go runtime (GC works harder near it); 0: none; GOMEMLIMIT, when set, wins", integer(func(c *Config) *int64 { return &c.MemoryLimit }, 0, 1<<20)},
	{"gc-percent", "SHOP_GC_PERCENT", "200", "heap growth in percent of the live heap before the Go runtime collects (its GOGC); the shop's live heap is small, so at Go's 100 it collects about 15 times a second under load; GOGC, when set, wins", integer(func(c *Config) *int64 { return &c.GCPercent }, 10, 10000)},
	{"maxprocs", "SHOP_MAXPROCS", "0", "threads that run Go code at once (the Go runtime's GOMAXPROCS); 0: Go's default, the machine's CPUs, or its container's CPU limit rounded up (at least 2, at most the CPUs). 1 keeps a request's hand-offs on one thread: less CPU per order, and more orders under a quota below one CPU (docs chapter 9, GOMAXPROCS); GOMAXPROCS, when set, wins", integer(func(c *Config) *int64 { return &c.MaxProcs }, 0, 1024)},
	{"stock-strategy", "SHOP_STOCK_STRATEGY", inventory.LockFence, "stock deduction: " + strings.Join(inventory.Strategies, ", ") + " (only lock-fence is safe)", str(func(c *Config) *string { return &c.StockStrategy })},
	{"stock-buckets", "SHOP_STOCK_BUCKETS", "1", "stock buckets (K) of each product created from now on, each with its own lock, so K instances deduct a hot product side by side (docs chapter 9); 1: off. More than 1 needs SHOP_STOCK_STRATEGY=lock-fence", integer(func(c *Config) *int64 { return &c.StockBuckets }, 1, inventory.MaxBuckets)},
	{"home-bucket", "SHOP_HOME_BUCKET", "", "the stock bucket this instance deducts from first (taken mod a product's K); empty: the next value of a counter in Redis, taken at start, so instances started one after another get different buckets (a random one if Redis does not answer)", func(c *Config, v string) error {
		if v == "" {
			c.HomeBucket = -1
			return nil
		}
		return integer(func(c *Config) *int64 { return &c.HomeBucket }, 0, 1_000_000)(c, v)
	}},
	{"shutdown-wait", "SHOP_SHUTDOWN_WAIT", "10s", "how long graceful shutdown waits for requests in flight", dur(func(c *Config) *time.Duration { return &c.ShutdownWait })},
	{"log-level", "SHOP_LOG_LEVEL", "info", "debug, info, warn or error", str(func(c *Config) *string { return &c.LogLevel })},
	{"log-format", "SHOP_LOG_FORMAT", "text", "text or json", str(func(c *Config) *string { return &c.LogFormat })},
	{"pprof-addr", "SHOP_PPROF_ADDR", "", "listen address of the Go profiler (net/http/pprof under /debug/pprof/, its own listener, no auth: bind it to loopback); empty: off", str(func(c *Config) *string { return &c.PprofAddr })},
	{"otel-exporter-otlp-endpoint", "OTEL_EXPORTER_OTLP_ENDPOINT", "", "OpenTelemetry tracing: base URL of the OTLP/HTTP collector the spans go to (/v1/traces is appended), e.g. http://127.0.0.1:4318; empty: tracing off, at no cost", str(func(c *Config) *string { return &c.OTLPEndpoint })},
	{"otel-service-name", "OTEL_SERVICE_NAME", "shop", "service.name of the spans", str(func(c *Config) *string { return &c.ServiceName })},
	{"otel-traces-sampler", "OTEL_TRACES_SAMPLER", "parentbased_always_on", "which requests are traced: always_on, always_off, traceidratio, or parentbased_ one of them (a traceparent from nginx or k6 decides when it comes)", str(func(c *Config) *string { return &c.TraceSampler })},
	{"otel-traces-sampler-arg", "OTEL_TRACES_SAMPLER_ARG", "", "the ratio (0..1) of the traceidratio samplers; empty: 1", str(func(c *Config) *string { return &c.TraceSamplerArg })},
	{"lab-routes", "SHOP_LAB_ROUTES", "true", "serve the admin-only lab routes (server-side flash-sale race)", boolean(func(c *Config) *bool { return &c.LabRoutes })},
	{"lab-pause-after-lock", "SHOP_LAB_PAUSE_AFTER_LOCK", "0s", "LAB FAULT: pause a lock holder this long after it obtains the lock", dur(func(c *Config) *time.Duration { return &c.LabPauseAfterLock })},
	{"lab-pause-probability", "SHOP_LAB_PAUSE_PROBABILITY", "1", "LAB FAULT: probability (0..1) that a holder pauses", func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 || f > 1 {
			return fmt.Errorf("not a probability between 0 and 1: %q", v)
		}
		c.LabPauseProbability = f
		return nil
	}},
	{"lab-slow-payment", "SHOP_LAB_SLOW_PAYMENT", "0s", "LAB FAULT: make every payment hold its account lock this much longer", dur(func(c *Config) *time.Duration { return &c.LabSlowPayment })},
	{"lab-no-idempotency", "SHOP_LAB_NO_IDEMPOTENCY", "false", "LAB FAULT: turn order idempotency off (random order numbers, no replay)", boolean(func(c *Config) *bool { return &c.LabNoIdempotency })},
	{"read-timeout", "SHOP_READ_TIMEOUT", "10s", "deadline for reading a whole request, headers and body; a slower client is cut off", dur(func(c *Config) *time.Duration { return &c.ReadTimeout })},
	{"request-timeout", "SHOP_REQUEST_TIMEOUT", "30s", "longest a request may run; its database and Redis calls are cancelled then (503 unavailable)", dur(func(c *Config) *time.Duration { return &c.RequestTimeout })},
	{"max-conns", "SHOP_MAX_CONNS", "1024", "open client connections per instance; one more is answered 503 overloaded as soon as its request arrives", func(c *Config, v string) error {
		var n int64
		err := integer(func(*Config) *int64 { return &n }, 1, 1_000_000)(c, v)
		c.MaxConns = int(n)
		return err
	}},
	{"trusted-proxies", "SHOP_TRUSTED_PROXIES", "", "comma-separated addresses or CIDRs of reverse proxies whose X-Forwarded-For names the client; empty: none", func(c *Config, v string) error {
		c.TrustedProxies = nil
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				c.TrustedProxies = append(c.TrustedProxies, p)
			}
		}
		return nil
	}},
	{"rate-orders", "SHOP_RATE_ORDERS", "5/s:30", "per user: seckill and regular orders (rate/unit:burst, or off)", rate(func(c *Config) *Rate { return &c.RateOrders })},
	{"rate-pay", "SHOP_RATE_PAY", "5/s:20", "per user: payments (rate/unit:burst, or off)", rate(func(c *Config) *Rate { return &c.RatePay })},
	{"rate-form-tokens", "SHOP_RATE_FORM_TOKENS", "5/s:20", "per user: form tokens (rate/unit:burst, or off)", rate(func(c *Config) *Rate { return &c.RateFormTokens })},
	{"rate-login", "SHOP_RATE_LOGIN", "200/s:10000", "per client address: demo logins (rate/unit:burst, or off)", rate(func(c *Config) *Rate { return &c.RateLogin })},
	{"unpaid-units", "SHOP_UNPAID_UNITS", "100", "most units one user may hold in unpaid orders (0: no cap)", integer(func(c *Config) *int64 { return &c.UnpaidUnits }, 0, 1_000_000_000)},
	{"seckill-mode", "SHOP_SECKILL_MODE", SeckillSync, "sync: a seckill order is placed before the answer (201); queue: it is published to a RabbitMQ quorum queue and answered 202 once the broker confirmed it, a consumer places it later (needs SHOP_AMQP_URL)", str(func(c *Config) *string { return &c.SeckillMode })},
	{"amqp-url", "SHOP_AMQP_URL", "", "RabbitMQ of the queued mode, amqp://user:pass@host:port/vhost; several nodes of a cluster comma-separated, tried in turn", str(func(c *Config) *string { return &c.AMQPURL })},
	{"queue-name", "SHOP_QUEUE_NAME", "shop.seckill.orders", "the quorum queue of queued seckill orders (declared on first use)", str(func(c *Config) *string { return &c.QueueName })},
	{"queue-prefetch", "SHOP_QUEUE_PREFETCH", "256", "unacknowledged messages one consumer holds at once (they join the same product batches)", integer(func(c *Config) *int64 { return &c.QueuePrefetch }, 1, 65535)},
	{"queue-lease", "SHOP_QUEUE_LEASE", "1h", "how long an accepted order's gate unit and queued record outlive the queue's lag; an order older than that may be rejected if the gate has no unit left", dur(func(c *Config) *time.Duration { return &c.QueueLease })},
	{"queue-confirm-timeout", "SHOP_QUEUE_CONFIRM_TIMEOUT", "2s", "how long the seckill route waits for the broker's publish confirm before 503 unavailable (the unit goes back)", dur(func(c *Config) *time.Duration { return &c.QueueConfirmTimeout })},
	{"queue-consume", "SHOP_QUEUE_CONSUME", "true", "in the queued mode, run a consumer in this instance (false: this instance only accepts)", boolean(func(c *Config) *bool { return &c.QueueConsume })},
	{"lab-queue-shortcut", "SHOP_LAB_QUEUE_SHORTCUT", "", "LAB FAULT of the queued mode: in-process (202 from an in-memory channel, no broker), auto-ack (the broker forgets a message on delivery), no-order-no (the consumer inserts with random order numbers); empty: none", str(func(c *Config) *string { return &c.LabQueueShortcut })},
}

// LoadConfig reads the configuration: defaults, then the environment, then
// flags (flags win). Errors name the variable and flag at fault.
func LoadConfig(name string, args []string, getenv func(string) string, out io.Writer) (Config, []string, error) {
	var c Config
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	vals := make([]*string, len(settings))
	for i, s := range settings {
		v := s.def
		if e := getenv(s.env); e != "" {
			v = e
		}
		vals[i] = fs.String(s.flag, v, s.usage+" ($"+s.env+")")
	}
	if err := fs.Parse(args); err != nil {
		return c, nil, err
	}
	for i, s := range settings {
		if err := s.set(&c, *vals[i]); err != nil {
			return c, nil, fmt.Errorf("config: %s (--%s): %w", s.env, s.flag, err)
		}
	}
	return c, fs.Args(), c.validate()
}

func (c Config) validate() error {
	var errs []error
	bad := func(env, format string, a ...any) {
		errs = append(errs, fmt.Errorf("config: %s: "+format, append([]any{env}, a...)...))
	}
	if c.Addr == "" {
		bad("SHOP_ADDR", "must not be empty")
	}
	if c.MySQLDSN == "" && c.SQLitePath == "" {
		bad("SHOP_SQLITE_PATH", "must not be empty when SHOP_MYSQL_DSN is unset")
	}
	if c.RedisURL != "" && !strings.Contains(c.RedisURL, ",") &&
		!strings.HasPrefix(c.RedisURL, "redis://") && !strings.HasPrefix(c.RedisURL, "rediss://") && !strings.HasPrefix(c.RedisURL, "unix://") {
		bad("SHOP_REDIS_URL", "must be redis://host:port/db or a comma-separated address list, got %q", c.RedisURL)
	}
	positive := []struct {
		env string
		d   time.Duration
	}{
		{"SHOP_TOKEN_TTL", c.TokenTTL}, {"SHOP_PAYMENT_TIMEOUT", c.PaymentTimeout},
		{"SHOP_READ_TIMEOUT", c.ReadTimeout}, {"SHOP_REQUEST_TIMEOUT", c.RequestTimeout},
		{"SHOP_LOCK_TTL", c.LockTTL}, {"SHOP_IDEM_RETENTION", c.IdemRetention}, {"SHOP_IDEM_LEASE", c.IdemLease},
	}
	for _, p := range positive {
		if p.d <= 0 {
			bad(p.env, "must be positive, got %s", p.d)
		}
	}
	nonNegative := []struct {
		env string
		d   time.Duration
	}{
		{"SHOP_LOCK_WAIT", c.LockWait}, {"SHOP_SWEEP_INTERVAL", c.SweepInterval}, {"SHOP_SOLD_OUT_CACHE", c.SoldOutCache}, {"SHOP_BATCH_WINDOW", c.BatchWindow}, {"SHOP_LOCK_KEEP_FOR", c.KeepFor},
		{"SHOP_SHUTDOWN_WAIT", c.ShutdownWait}, {"SHOP_LAB_PAUSE_AFTER_LOCK", c.LabPauseAfterLock}, {"SHOP_LAB_SLOW_PAYMENT", c.LabSlowPayment},
	}
	for _, p := range nonNegative {
		if p.d < 0 {
			bad(p.env, "must not be negative, got %s", p.d)
		}
	}
	if c.LockTTL > 0 && c.LockTTL < 100*time.Millisecond {
		bad("SHOP_LOCK_TTL", "must be at least 100ms, got %s", c.LockTTL)
	}
	valid := false
	for _, s := range inventory.Strategies {
		valid = valid || s == c.StockStrategy
	}
	if !valid {
		bad("SHOP_STOCK_STRATEGY", "must be one of %s, got %q", strings.Join(inventory.Strategies, ", "), c.StockStrategy)
	}
	if c.StockBuckets > 1 && c.StockStrategy != inventory.LockFence {
		bad("SHOP_STOCK_BUCKETS", "more than 1 bucket needs SHOP_STOCK_STRATEGY=%s (only it walks buckets), got %d buckets with %q", inventory.LockFence, c.StockBuckets, c.StockStrategy)
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		bad("SHOP_LOG_LEVEL", "must be debug, info, warn or error, got %q", c.LogLevel)
	}
	if c.DemoCatalog != "auto" && c.DemoCatalog != "true" && c.DemoCatalog != "false" {
		bad("SHOP_DEMO_CATALOG", "must be auto, true or false, got %q", c.DemoCatalog)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("SHOP_LOG_FORMAT", "must be text or json, got %q", c.LogFormat)
	}
	if _, err := samplerOf(c.TraceSampler, c.TraceSamplerArg); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateQueue()...)
	if c.AdminToken != "" && len(c.AdminToken) < 16 {
		bad("SHOP_ADMIN_TOKEN", "must be at least 16 characters")
	}
	if c.AuthSecret != "" && len(c.AuthSecret) < 16 {
		bad("SHOP_AUTH_SECRET", "must be at least 16 characters")
	}
	return errors.Join(errs...)
}

// DemoCatalogOn reports whether the shop creates its demo catalog at start:
// by default only on the embedded SQLite, the demo database; a MySQL
// database is somebody's data, so only an explicit true touches it.
func (c Config) DemoCatalogOn() bool {
	return c.DemoCatalog == "true" || (c.DemoCatalog == "auto" && c.MySQLDSN == "")
}

// Lab reports whether any lab fault switch is on, for a loud log line.
func (c Config) Lab() []string {
	var on []string
	if c.StockStrategy != inventory.LockFence {
		on = append(on, "stock-strategy="+c.StockStrategy)
	}
	if c.LabPauseAfterLock > 0 {
		on = append(on, fmt.Sprintf("lab-pause-after-lock=%s (p=%.2f)", c.LabPauseAfterLock, c.LabPauseProbability))
	}
	if c.LabSlowPayment > 0 {
		on = append(on, "lab-slow-payment="+c.LabSlowPayment.String())
	}
	if c.LabNoIdempotency {
		on = append(on, "lab-no-idempotency")
	}
	if c.LabQueueShortcut != "" {
		on = append(on, "lab-queue-shortcut="+c.LabQueueShortcut)
	}
	return on
}

// Settings returns (env, flag, default, usage) of every setting, for the README
// and `shop help`.
func Settings() [][4]string {
	out := make([][4]string, len(settings))
	for i, s := range settings {
		out[i] = [4]string{s.env, "--" + s.flag, s.def, s.usage}
	}
	return out
}
