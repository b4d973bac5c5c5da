package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/seckill-lab/shop/internal/topo"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/internal/platform"
)

// backend is the database and Redis of one scenario run: a fresh MySQL
// database (or SQLite file) and a Redis key prefix of its own, on a shared,
// private or in-process Redis.
type backend struct {
	serverDSN  string // MySQL server DSN the run's database was created from
	dsn        string // the run's database ("" with SQLite)
	dbName     string
	sqlitePath string
	redisURL   string
	prefix     string
	redisKind  string // "shared", "private" (redis-server started here) or "embedded" (miniredis in this process)
	private    *topo.Redis
	mini       *miniredis.Miniredis
	keep       bool
	db         *platform.DB
	log        *slog.Logger
}

// backendOptions say where a scenario's backend lives.
type backendOptions struct {
	mysqlDSN   string // server DSN (a database name in it is ignored); "" uses SQLite
	redisURL   string // shared Redis; "" starts one (private when wantPrivate and redis-server exists, else in-process)
	private    bool   // the scenario needs a Redis it may restart and flush
	workdir    string
	keep       bool
	scenarioID string
}

func newBackend(ctx context.Context, o backendOptions, log *slog.Logger) (*backend, error) {
	b := &backend{keep: o.keep, log: log, prefix: "lt" + loadgen.RandomID(4) + ":"}
	ok := false
	defer func() {
		if !ok {
			b.close()
		}
	}()
	if o.mysqlDSN != "" {
		cfg, err := gomysql.ParseDSN(o.mysqlDSN)
		if err != nil {
			return nil, fmt.Errorf("--mysql-dsn / SHOP_MYSQL_DSN: %w", err)
		}
		cfg.DBName = ""
		b.serverDSN = cfg.FormatDSN()
		b.dbName = "loadtest_" + loadgen.RandomID(5)
		admin, err := sql.Open("mysql", b.serverDSN)
		if err != nil {
			return nil, err
		}
		_, err = admin.ExecContext(ctx, "CREATE DATABASE "+b.dbName+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
		admin.Close()
		if err != nil {
			return nil, fmt.Errorf("create database %s: %w", b.dbName, err)
		}
		cfg.DBName = b.dbName
		cfg.ParseTime = true
		cfg.Loc = time.UTC
		b.dsn = cfg.FormatDSN()
	} else {
		b.sqlitePath = filepath.Join(o.workdir, o.scenarioID+".db")
	}
	db, err := platform.OpenDB(ctx, b.dsn, b.sqlitePath, log)
	if err != nil {
		return nil, err
	}
	b.db = db
	if _, err := platform.Migrate(ctx, db, log); err != nil {
		return nil, err
	}

	switch {
	case o.redisURL != "" && !o.private:
		b.redisURL, b.redisKind = o.redisURL, "shared"
	case topo.RedisInstalled():
		p, err := topo.StartRedis(ctx, filepath.Join(o.workdir, o.scenarioID+"-redis"))
		if err != nil {
			return nil, err
		}
		b.private, b.redisURL, b.redisKind = p, p.URL(), "private"
	default:
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true) // real expiry: lock and idempotency leases must run out
		if err := m.StartAddr("127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("in-process redis: %w", err)
		}
		b.mini, b.redisURL, b.redisKind = m, "redis://"+m.Addr()+"/0", "embedded"
	}
	ok = true
	return b, nil
}

func (b *backend) describe() string {
	db := "SQLite " + b.sqlitePath
	if b.dsn != "" {
		db = "MySQL/MariaDB database " + b.dbName
	}
	r := map[string]string{"shared": "shared Redis (prefix " + b.prefix + ")", "private": "private redis-server " + b.redisURL,
		"embedded": "in-process Redis (miniredis) " + b.redisURL}[b.redisKind]
	return db + " + " + r
}

// env is the part of a shop's environment that names this backend.
func (b *backend) env() []string {
	e := []string{"SHOP_REDIS_URL=" + b.redisURL, "SHOP_REDIS_PREFIX=" + b.prefix}
	if b.dsn != "" {
		return append(e, "SHOP_MYSQL_DSN="+b.dsn)
	}
	return append(e, "SHOP_SQLITE_PATH="+b.sqlitePath)
}

// redisClient is a client of this backend's Redis.
func (b *backend) redisClient() (*redis.Client, error) {
	opt, err := redis.ParseURL(b.redisURL)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opt), nil
}

// restartRedis restarts a private or in-process Redis (all data lost).
func (b *backend) restartRedis(ctx context.Context) error {
	switch {
	case b.private != nil:
		return b.private.Restart(ctx)
	case b.mini != nil:
		addr := b.mini.Addr()
		b.mini.Close()
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true) // real expiry: lock and idempotency leases must run out
		if err := m.StartAddr(addr); err != nil {
			return err
		}
		b.mini = m
		return nil
	}
	return errors.New("the shared Redis is never restarted")
}

// flushRedis empties a private or in-process Redis.
func (b *backend) flushRedis(ctx context.Context) error {
	switch {
	case b.private != nil:
		c, err := b.redisClient()
		if err != nil {
			return err
		}
		defer c.Close()
		return c.FlushAll(ctx).Err()
	case b.mini != nil:
		b.mini.FlushAll()
		return nil
	}
	return errors.New("the shared Redis is never flushed")
}

func (b *backend) close() {
	if b.db != nil {
		b.db.Close()
	}
	if b.redisKind == "shared" && !b.keep {
		if c, err := b.redisClient(); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			iter := c.Scan(ctx, 0, b.prefix+"*", 1000).Iterator()
			var keys []string
			for iter.Next(ctx) {
				if keys = append(keys, iter.Val()); len(keys) == 500 {
					c.Del(ctx, keys...)
					keys = keys[:0]
				}
			}
			if len(keys) > 0 {
				c.Del(ctx, keys...)
			}
			cancel()
			c.Close()
		}
	}
	if b.private != nil {
		b.private.Close()
	}
	if b.mini != nil {
		b.mini.Close()
	}
	if b.dbName != "" && !b.keep {
		if admin, err := sql.Open("mysql", b.serverDSN); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+b.dbName)
			cancel()
			admin.Close()
		}
	}
}

// startNginx starts nginx with the repository's deploy/nginx.conf in
// front of shops (exec.ErrNotFound: nginx is not installed).
func startNginx(ctx context.Context, workdir string, shops []string) (*topo.Nginx, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return nil, err
	}
	conf, err := os.ReadFile(filepath.Join(root, "deploy", "nginx.conf"))
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(workdir, fmt.Sprintf("nginx-%d", len(shops)))
	return topo.StartNginx(ctx, topo.NginxOptions{Dir: dir, Conf: string(conf), Shops: shops})
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// cluster is N shop processes on loopback ports sharing one backend.
type cluster struct {
	bin       string
	backend   *backend
	admin     string
	secret    string
	workdir   string
	name      string
	instances []*instance
	client    *loadgen.Client
	common    []string // the settings every instance was started with
}

// instance is one shop process; restarts keep its port.
type instance struct {
	idx     int
	port    int
	env     []string
	cmd     *exec.Cmd
	logPath string
	starts  int
	mu      sync.Mutex
	exited  chan struct{}
}

func (i *instance) url() string { return fmt.Sprintf("http://127.0.0.1:%d", i.port) }

// withBuckets adds stock buckets to a cluster's settings: SHOP_STOCK_BUCKETS=k
// for every instance, and SHOP_HOME_BUCKET=i for instance i, so each of k
// instances starts at its own bucket (docs chapter 9). k <= 1 adds nothing.
func withBuckets(k int, common []string, extra func(i int) []string) ([]string, func(i int) []string) {
	if k <= 1 {
		return common, extra
	}
	common = append(slices.Clone(common), "SHOP_STOCK_BUCKETS="+strconv.Itoa(k))
	return common, func(i int) []string {
		var own []string
		if extra != nil {
			own = extra(i)
		}
		return append(own, "SHOP_HOME_BUCKET="+strconv.Itoa(i))
	}
}

// startCluster starts n instances; extra(i) is instance i's own settings.
func startCluster(ctx context.Context, bin string, b *backend, n int, name, workdir string, common []string, extra func(i int) []string) (*cluster, error) {
	c := &cluster{bin: bin, backend: b, admin: "lt-admin-" + loadgen.RandomID(12), secret: "lt-secret-" + loadgen.RandomID(16), workdir: workdir, name: name, common: common}
	var urls []string
	for i := range n {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		env := append([]string{
			"SHOP_ADDR=127.0.0.1:" + strconv.Itoa(port),
			"SHOP_ADMIN_TOKEN=" + c.admin, "SHOP_AUTH_SECRET=" + c.secret,
			"SHOP_LOG_LEVEL=warn",
			// The harness stands in for thousands of buyers' devices: it
			// names each buyer's (simulated) address when logging in, and
			// its shops trust it to, so the per-address login limit sees a
			// sale, not one client.
			"SHOP_TRUSTED_PROXIES=127.0.0.1",
		}, b.env()...)
		env = append(env, common...)
		if extra != nil {
			env = append(env, extra(i)...)
		}
		inst := &instance{idx: i, port: port, env: env, logPath: filepath.Join(workdir, fmt.Sprintf("%s-shop-%d.log", name, i+1))}
		c.instances = append(c.instances, inst)
		urls = append(urls, inst.url())
	}
	c.client = loadgen.NewClient(urls, c.admin, 256)
	for _, inst := range c.instances {
		if err := c.start(inst); err != nil {
			c.close()
			return nil, err
		}
	}
	if err := c.ready(ctx, 60*time.Second); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *cluster) urls() []string {
	out := make([]string, len(c.instances))
	for i, inst := range c.instances {
		out[i] = inst.url()
	}
	return out
}

// shopEnv is the harness's environment without any SHOP_ setting, so only
// what a scenario sets reaches the shops.
func shopEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SHOP_") {
			out = append(out, kv)
		}
	}
	return out
}

func (c *cluster) start(inst *instance) error {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	logf, err := os.OpenFile(inst.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	inst.starts++
	fmt.Fprintf(logf, "--- start %d at %s\n", inst.starts, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.bin, "serve")
	cmd.Env = append(shopEnv(), inst.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", c.bin, err)
	}
	inst.cmd = cmd
	exited := make(chan struct{})
	inst.exited = exited
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	return nil
}

// ready waits for every instance's /readyz, failing early when one exits.
func (c *cluster) ready(ctx context.Context, limit time.Duration) error {
	for _, inst := range c.instances {
		if err := c.readyOne(ctx, inst, limit); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) readyOne(ctx context.Context, inst *instance, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		a := c.client.Do(ctx, loadgen.Call{Target: inst.idx, Method: "GET", Path: "/readyz", Timeout: 2 * time.Second})
		if a.Status == 200 {
			return nil
		}
		select {
		case <-inst.exited:
			return fmt.Errorf("shop instance %d exited before it was ready; its log %s ends:\n%s", inst.idx+1, inst.logPath, tail(inst.logPath, 15))
		case <-ctx.Done():
			return fmt.Errorf("shop instance %d not ready after %s (log %s):\n%s", inst.idx+1, limit, inst.logPath, tail(inst.logPath, 15))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// signal sends sig to instance i.
func (c *cluster) signal(i int, sig syscall.Signal) error {
	inst := c.instances[i]
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if inst.cmd == nil || inst.cmd.Process == nil {
		return errors.New("not running")
	}
	return inst.cmd.Process.Signal(sig)
}

// kill SIGKILLs instance i and waits for it to be gone.
func (c *cluster) kill(i int) error {
	if err := c.signal(i, syscall.SIGKILL); err != nil {
		return err
	}
	<-c.instances[i].exited
	return nil
}

// restart starts instance i again and waits until it is ready. A start
// that fails (e.g. the database refusing connections for a moment) is tried
// again, up to five times.
func (c *cluster) restart(ctx context.Context, i int) error {
	var err error
	for attempt := 0; attempt < 5 && ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * time.Second)
		}
		if err = c.start(c.instances[i]); err != nil {
			continue
		}
		if err = c.readyOne(ctx, c.instances[i], 60*time.Second); err == nil {
			return nil
		}
		_ = c.signal(i, syscall.SIGKILL)
		<-c.instances[i].exited
	}
	return err
}

// close stops every instance: SIGCONT (a stopped one cannot exit), SIGTERM,
// then SIGKILL after 10s.
func (c *cluster) close() {
	for i, inst := range c.instances {
		if inst.cmd == nil {
			continue
		}
		_ = c.signal(i, syscall.SIGCONT)
		_ = c.signal(i, syscall.SIGTERM)
	}
	for i, inst := range c.instances {
		if inst.cmd == nil {
			continue
		}
		select {
		case <-inst.exited:
		case <-time.After(10 * time.Second):
			_ = c.signal(i, syscall.SIGKILL)
			<-inst.exited
		}
	}
}

// metrics scrapes the shop_ metrics of every running instance.
func (c *cluster) metrics(ctx context.Context) []map[string]float64 {
	out := make([]map[string]float64, len(c.instances))
	for i := range c.instances {
		m, err := c.client.Metrics(ctx, i, "shop_")
		if err == nil {
			out[i] = m
		}
	}
	return out
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// moduleRoot is the directory of this module's go.mod (the harness runs
// from inside the repository).
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside a module (run the harness from the repository)")
	}
	return filepath.Dir(gomod), nil
}

// buildShop builds the shop binary from this module into dir.
func buildShop(ctx context.Context, dir string) (string, error) {
	root, err := moduleRoot(ctx)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "shop")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/shop")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -o %s ./cmd/shop: %w\n%s", bin, err, b)
	}
	return bin, nil
}
