package lockx

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
)

type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietRedisLog{}) // tests kill servers on purpose
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines left behind by lockx after all tests:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines waits up to d for every goroutine started by lockx (or by
// go-redis pub/sub on its behalf) to end, and returns the stacks of the rest.
// Every test closes its Clients and releases its Locks, so none may remain.
func leakedGoroutines(d time.Duration) string {
	marks := []string{"lockx.(*Lock).watchdog", "lockx.(*hub).loop", "lockx.(*Redlock).watch", "lockx.cleanup", "(*channel).initAllChan", "(*channel).initHealthCheck"}
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			for _, m := range marks {
				if strings.Contains(g, m) {
					leaked = append(leaked, g)
					break
				}
			}
		}
		if len(leaked) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const defaultRedisURL = "redis://127.0.0.1:6379/0"

func redisURL() string {
	if u := os.Getenv("SHOP_TEST_REDIS_URL"); u != "" {
		return u
	}
	return defaultRedisURL
}

// sharedRedis connects to the shared test Redis and fails the test, with a
// how-to, when it does not answer. It never skips. SHOP_TEST_REDIS_URL may
// list Cluster nodes (host:port,host:port,...): CI runs the tests once on a
// 3-master Cluster, where a script whose keys straddle slots fails.
func sharedRedis(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	u := redisURL()
	rdb, err := openRedis(u)
	if err != nil {
		tb.Fatalf("SHOP_TEST_REDIS_URL=%q is not a redis URL or a node list: %v", u, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		tb.Fatalf("lockx tests need Redis at %s (%v): start one with `redis-server --save \"\" --appendonly no` "+
			"or point SHOP_TEST_REDIS_URL at a Redis you may write random test keys to", u, err)
	}
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// openRedis opens a redis:// URL, or a Cluster from a comma-separated node list.
func openRedis(u string) (redis.UniversalClient, error) {
	if strings.Contains(u, ",") {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(u, ",")}), nil
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opt), nil
}

// testPrefix returns a random key prefix and deletes its keys at cleanup, so
// tests can share one Redis with each other and with other packages.
func testPrefix(tb testing.TB, rdb redis.UniversalClient) string {
	tb.Helper()
	p := "lockxtest:" + strings.ToLower(rand.Text()[:10]) + ":"
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		del := func(ctx context.Context, c *redis.Client) error {
			iter := c.Scan(ctx, 0, p+"*", 500).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
			return iter.Err()
		}
		switch c := rdb.(type) {
		case *redis.ClusterClient: // SCAN sees one node: clean every master
			_ = c.ForEachMaster(ctx, del)
		case *redis.Client:
			_ = del(ctx, c)
		}
	})
	return p
}

func newTestClient(tb testing.TB, rdb redis.UniversalClient, o Options) *Client {
	tb.Helper()
	if o.Prefix == "" {
		o.Prefix = testPrefix(tb, rdb)
	}
	c := New(rdb, o)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// redisServer is a private redis-server on a free loopback port, for tests
// that stop, pause or restart Redis.
type redisServer struct {
	tb   testing.TB
	port int
	args []string
	cmd  *exec.Cmd
}

func freePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func startRedisServer(tb testing.TB, extra ...string) *redisServer {
	tb.Helper()
	s := &redisServer{tb: tb, port: freePort(tb), args: extra}
	s.start()
	tb.Cleanup(s.kill)
	return s
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *redisServer) start() {
	s.tb.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		s.tb.Fatalf("these tests start private Redis servers: install redis-server (apt-get install redis-server): %v", err)
	}
	args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.tb.TempDir()}, s.args...)
	s.cmd = exec.Command(path, args...)
	if err := s.cmd.Start(); err != nil {
		s.tb.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			s.tb.Fatalf("redis-server on %s did not answer within 10s", s.addr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kill stops the server at once (SIGKILL works on a SIGSTOPped process too).
func (s *redisServer) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

func (s *redisServer) pause() {
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.tb.Fatalf("SIGSTOP redis-server: %v", err)
	}
}

func (s *redisServer) resume() {
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.tb.Fatalf("SIGCONT redis-server: %v", err)
	}
}

func (s *redisServer) client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, DialerRetries: 1})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// counter reads a counter or gauge value (summed over labels) from m.
func metricValue(tb testing.TB, m *Metrics, name string) float64 {
	tb.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(m); err != nil {
		tb.Fatalf("register metrics: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var v float64
		for _, mt := range mf.GetMetric() {
			v += metricNumber(mt)
		}
		return v
	}
	tb.Fatalf("metric %s not found", name)
	return 0
}

func metricNumber(mt *dto.Metric) float64 {
	switch {
	case mt.Counter != nil:
		return mt.Counter.GetValue()
	case mt.Gauge != nil:
		return mt.Gauge.GetValue()
	case mt.Histogram != nil:
		return float64(mt.Histogram.GetSampleCount())
	}
	return 0
}

// eventually polls cond every 5 ms for at most d.
func eventually(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not true within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testBinary(tb testing.TB) string {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatalf("os.Executable: %v", err)
	}
	return filepath.Clean(exe)
}

func mustNoErr(tb testing.TB, err error, what string, args ...any) {
	tb.Helper()
	if err != nil {
		tb.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}
