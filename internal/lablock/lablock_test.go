package lablock

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const childEnv = "LABLOCK_TEST_CHILD"

// TestMain lets the test binary act as `shop lab lock` when re-executed.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		var args []string
		if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &args); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		opt, err := redis.ParseURL(redisURL())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		rdb := redis.NewClient(opt)
		err = Run(context.Background(), rdb, args, os.Stdout, os.Stderr)
		_ = rdb.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func redisURL() string {
	if u := os.Getenv("SHOP_TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

func sharedRedis(t *testing.T) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(redisURL())
	if err != nil {
		t.Fatalf("SHOP_TEST_REDIS_URL=%q: %v", redisURL(), err)
	}
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("lablock tests need Redis at %s (%v): start one with `redis-server --save \"\" --appendonly no` "+
			"or point SHOP_TEST_REDIS_URL at a Redis you may write random test keys to", redisURL(), err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func testPrefix(t *testing.T, rdb *redis.Client) string {
	p := "lablocktest:" + strings.ToLower(rand.Text()[:10]) + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, p+"*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	})
	return p
}

// child is a re-executed `shop lab lock` whose events are read as they come.
type child struct {
	t      *testing.T
	cmd    *exec.Cmd
	events chan Event
	mu     sync.Mutex
	all    []Event
	stderr bytes.Buffer
	done   chan error
}

func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(args)
	c := &child{t: t, events: make(chan Event, 100), done: make(chan error, 1)}
	c.cmd = exec.Command(exe, "-test.run=^$")
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	c.cmd.Stderr = &c.stderr
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		_ = c.cmd.Process.Kill()
	})
	go c.read(stdout)
	return c
}

func (c *child) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			e = Event{Event: "bad_line", Reason: sc.Text()}
		}
		c.mu.Lock()
		c.all = append(c.all, e)
		c.mu.Unlock()
		c.events <- e
	}
	close(c.events)
	c.done <- c.cmd.Wait()
}

// next waits for the next event named name (skipping others).
func (c *child) next(name string, d time.Duration) Event {
	c.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case e, ok := <-c.events:
			if !ok {
				c.t.Fatalf("child exited before %q; events %v; stderr %s", name, c.names(), c.stderr.String())
			}
			if e.Event == name {
				return e
			}
		case <-timeout:
			c.t.Fatalf("no %q event within %v; events %v", name, d, c.names())
		}
	}
}

// wait drains the child and returns its exit error and all events.
func (c *child) wait(d time.Duration) (error, []Event) {
	c.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case _, ok := <-c.events:
			if ok {
				continue
			}
			err := <-c.done
			c.mu.Lock()
			defer c.mu.Unlock()
			return err, slices.Clone(c.all)
		case <-timeout:
			c.t.Fatalf("child still running after %v; events %v", d, c.names())
		}
	}
}

func (c *child) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n []string
	for _, e := range c.all {
		n = append(n, e.Event)
	}
	return n
}

func (c *child) signal(s syscall.Signal) {
	c.t.Helper()
	if err := c.cmd.Process.Signal(s); err != nil {
		c.t.Fatalf("signal %v: %v", s, err)
	}
}

func find(events []Event, name string) (Event, bool) {
	for _, e := range events {
		if e.Event == name {
			return e, true
		}
	}
	return Event{}, false
}

func ts(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("bad time %q: %v", s, err)
	}
	return v
}

func TestThreeProcessesTakeTurns(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	prefix := testPrefix(t, rdb)
	var kids []*child
	for range 3 {
		kids = append(kids, startChild(t, "lock", "--prefix", prefix, "--key", "product:7",
			"--ttl", "2s", "--hold", "300ms", "--wait", "20s"))
	}
	type span struct {
		fence    int64
		from, to time.Time
		pid      int
	}
	var spans []span
	for i, k := range kids {
		err, events := k.wait(30 * time.Second)
		if err != nil {
			t.Fatalf("child %d: %v; events %v; stderr %s", i, err, k.names(), k.stderr.String())
		}
		acq, ok1 := find(events, "acquired")
		rel, ok2 := find(events, "released")
		if !ok1 || !ok2 || acq.Token == "" || acq.Fence < 1 {
			t.Fatalf("child %d events %+v", i, events)
		}
		if _, lost := find(events, "lost"); lost {
			t.Fatalf("child %d lost its lock: %+v", i, events)
		}
		spans = append(spans, span{acq.Fence, ts(t, acq.At), ts(t, rel.HeldUntil), acq.PID})
	}
	slices.SortFunc(spans, func(a, b span) int { return int(a.fence - b.fence) })
	for i := 1; i < len(spans); i++ {
		p, c := spans[i-1], spans[i]
		if c.fence <= p.fence {
			t.Fatalf("fences not increasing: %+v", spans)
		}
		if c.from.Before(p.to) {
			t.Fatalf("holds overlap: pid %d (fence %d) held until %v, pid %d (fence %d) from %v",
				p.pid, p.fence, p.to, c.pid, c.fence, c.from)
		}
	}
	if rdb.Exists(context.Background(), prefix+"{product:7}").Val() != 0 {
		t.Fatal("lock key left behind")
	}
}

// TestStoppedProcessReportsLoss stops a holder with SIGSTOP past its TTL,
// lets another process take the lock, then continues the first: it must
// print lost and release_failed, never released.
func TestStoppedProcessReportsLoss(t *testing.T) {
	t.Parallel()
	for _, watchdog := range []bool{false, true} {
		t.Run(fmt.Sprintf("watchdog=%v", watchdog), func(t *testing.T) {
			t.Parallel()
			rdb := sharedRedis(t)
			prefix := testPrefix(t, rdb)
			args := []string{"--prefix", prefix, "--key", "k", "--ttl", "500ms", "--hold", "1500ms", "--wait", "0"}
			if watchdog {
				args = append(args, "--watchdog")
			}
			a := startChild(t, args...)
			acqA := a.next("acquired", 10*time.Second)
			if watchdog {
				a.next("renewed", 5*time.Second)
			}
			a.signal(syscall.SIGSTOP)
			stoppedAt := time.Now()

			b := startChild(t, "--prefix", prefix, "--key", "k", "--ttl", "2s", "--hold", "100ms", "--wait", "10s")
			errB, evB := b.wait(20 * time.Second)
			if errB != nil {
				t.Fatalf("second process: %v; events %+v", errB, evB)
			}
			acqB, _ := find(evB, "acquired")
			if acqB.Fence <= acqA.Fence {
				t.Fatalf("fence %d after the stopped holder's %d", acqB.Fence, acqA.Fence)
			}
			if ts(t, acqB.At).Before(stoppedAt.Add(300 * time.Millisecond)) {
				t.Fatalf("second process got the lock %v after the stop, before the 500ms TTL could pass", ts(t, acqB.At).Sub(stoppedAt))
			}
			time.Sleep(time.Until(stoppedAt.Add(time.Second)))
			a.signal(syscall.SIGCONT)
			errA, evA := a.wait(10 * time.Second)
			for _, e := range evA {
				t.Logf("stopped holder: %s fence=%d %s", e.Event, e.Fence, e.Reason)
			}
			if _, ok := find(evA, "released"); ok {
				t.Fatalf("stopped holder printed released: %+v", evA)
			}
			if _, ok := find(evA, "lost"); !ok {
				t.Fatalf("stopped holder did not print lost: %+v", evA)
			}
			if _, ok := find(evA, "release_failed"); !ok {
				t.Fatalf("stopped holder did not print release_failed: %+v", evA)
			}
			if errA == nil {
				t.Fatal("stopped holder exited 0")
			}
		})
	}
}

func TestReentrantDepth(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	prefix := testPrefix(t, rdb)
	var out, errOut bytes.Buffer
	err := Run(context.Background(), rdb, []string{"--prefix", prefix, "--key", "k", "--ttl", "2s", "--hold", "50ms",
		"--reentrant-depth", "3", "--watchdog"}, &out, &errOut)
	if err != nil {
		t.Fatalf("Run: %v (%s)", err, errOut.String())
	}
	var names []string
	var fences []int64
	for line := range strings.Lines(out.String()) {
		var e Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if e.Key != "k" || e.At == "" {
			t.Fatalf("event without key/at: %q", line)
		}
		names = append(names, e.Event)
		if e.Fence != 0 {
			fences = append(fences, e.Fence)
		}
	}
	want := []string{"acquired", "reentered", "reentered", "unwound", "unwound", "released"}
	if !slices.Equal(names, want) {
		t.Fatalf("events %v, want %v", names, want)
	}
	for _, f := range fences {
		if f != fences[0] {
			t.Fatalf("re-entries changed the fence: %v", fences)
		}
	}
	if rdb.Exists(context.Background(), prefix+"{k}").Val() != 0 {
		t.Fatal("lock key left behind")
	}
}

func TestBadArgs(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	for _, args := range [][]string{{}, {"--key", "k", "--reentrant-depth", "0"}, {"--nope"}} {
		if err := Run(context.Background(), rdb, args, io.Discard, io.Discard); err == nil {
			t.Fatalf("Run(%q) succeeded", args)
		}
	}
	// Not obtained is reported as an event and an error that callers can test.
	prefix := testPrefix(t, rdb)
	held := make(chan struct{})
	go func() {
		_ = Run(context.Background(), rdb, []string{"--prefix", prefix, "--key", "k", "--hold", "500ms"}, &syncBuf{held: held}, io.Discard)
	}()
	<-held
	var out bytes.Buffer
	err := Run(context.Background(), rdb, []string{"--prefix", prefix, "--key", "k", "--wait", "0"}, &out, io.Discard)
	if err == nil || !strings.Contains(out.String(), `"event":"not_obtained"`) {
		t.Fatalf("err %v, out %s", err, out.String())
	}
	if errors.Is(err, ErrLost) {
		t.Fatal("not obtained reported as lost")
	}
}

// syncBuf signals held on the first write (the acquired event).
type syncBuf struct {
	once sync.Once
	held chan struct{}
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.once.Do(func() { close(b.held) })
	return len(p), nil
}
