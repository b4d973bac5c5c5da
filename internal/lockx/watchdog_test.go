package lockx

import (
	"bufio"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWatchdogKeepsLongJobAndStopsAtRelease holds a 500ms-TTL lock through a
// 2.5s job (5x TTL), then checks with MONITOR on a private redis-server that
// no renewal reaches Redis after Release.
func TestWatchdogKeepsLongJobAndStopsAtRelease(t *testing.T) {
	t.Parallel()
	srv := startRedisServer(t)
	rdb := srv.client(t)
	m := NewMetrics("wd")
	c := newTestClient(t, rdb, Options{Metrics: m})

	mon := startMonitor(t, srv.addr())

	const ttl = 500 * time.Millisecond
	l, err := c.Acquire(bg, "job", AcquireOptions{TTL: ttl, Watchdog: true})
	mustNoErr(t, err, "acquire")
	jobEnd := time.Now().Add(5 * ttl)
	for time.Now().Before(jobEnd) {
		if got := rdb.HGet(bg, l.RedisKey(), l.Token()).Val(); got != "1" {
			t.Fatalf("lock lost during the job (hold count %q)", got)
		}
		select {
		case <-l.Lost():
			t.Fatal("Lost closed during the job")
		case <-time.After(50 * time.Millisecond):
		}
	}
	renewals := metricValue(t, m, "wd_lock_renewals_total")
	if renewals < 3 {
		t.Fatalf("renewals = %v during a 5x TTL job, want >= 3", renewals)
	}
	mustNoErr(t, l.Release(bg), "release")
	marker := "lockx-test-released-" + l.Token()
	mustNoErr(t, rdb.Echo(bg, marker).Err(), "echo marker")

	time.Sleep(3 * ttl) // several renewal periods
	if rdb.Exists(bg, l.RedisKey()).Val() != 0 {
		t.Fatal("lock key exists after release")
	}
	if after := metricValue(t, m, "wd_lock_renewals_total"); after != renewals {
		t.Fatalf("renewals went from %v to %v after release", renewals, after)
	}
	cmds := mon.stop()
	sha := scriptRefresh.Hash()
	seenMarker, renewBefore := false, 0
	for _, s := range cmds {
		isRenew := strings.Contains(s, sha) || strings.Contains(strings.ToLower(s), "pexpire")
		switch {
		case strings.Contains(s, marker):
			seenMarker = true
		case isRenew && seenMarker:
			t.Fatalf("renewal reached Redis after release: %s", s)
		case isRenew:
			renewBefore++
		}
	}
	if !seenMarker || renewBefore < 3 {
		t.Fatalf("MONITOR saw marker=%v and %d renewals before it: the check proves nothing", seenMarker, renewBefore)
	}
}

func TestWatchdogStopsWhenHolderCtxEnds(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	m := NewMetrics("wd")
	c := newTestClient(t, rdb, Options{Metrics: m})
	ctx, cancel := context.WithCancel(bg)
	l, err := c.Acquire(ctx, "k", AcquireOptions{TTL: 450 * time.Millisecond, Watchdog: true})
	mustNoErr(t, err, "acquire")
	time.Sleep(300 * time.Millisecond) // at least one renewal (every 150ms)
	cancel()
	select {
	case <-l.wdDone:
	case <-time.After(100 * time.Millisecond):
		t.Fatal("watchdog goroutine still running after the holder's ctx ended")
	}
	n := metricValue(t, m, "wd_lock_renewals_total")
	if n < 1 {
		t.Fatal("no renewal happened before cancel")
	}
	select { // without renewals the hold runs out and is reported
	case <-l.Lost():
	case <-time.After(time.Second):
		t.Fatal("Lost not closed after validity passed")
	}
	eventually(t, time.Second, "key expired", func() bool { return rdb.Exists(bg, l.RedisKey()).Val() == 0 })
	if after := metricValue(t, m, "wd_lock_renewals_total"); after != n {
		t.Fatalf("renewals continued after ctx end: %v -> %v", n, after)
	}
}

func TestRefreshExtendsValidity(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{})
	l, err := c.Acquire(bg, "k", AcquireOptions{TTL: 400 * time.Millisecond})
	mustNoErr(t, err, "acquire")
	for range 4 {
		time.Sleep(150 * time.Millisecond)
		mustNoErr(t, l.Refresh(bg, 400*time.Millisecond), "refresh")
	}
	select {
	case <-l.Lost():
		t.Fatal("lost although refreshed in time")
	default:
	}
	mustNoErr(t, l.Release(bg), "release")
}

// monitor records MONITOR output of a private redis-server over a raw
// connection (go-redis's MonitorCmd spins on the CPU).
type monitor struct {
	conn net.Conn
	mu   sync.Mutex
	cmds []string
	done chan struct{}
}

func startMonitor(t *testing.T, addr string) *monitor {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	mustNoErr(t, err, "dial monitor")
	m := &monitor{conn: conn, done: make(chan struct{})}
	_, err = conn.Write([]byte("MONITOR\r\n"))
	mustNoErr(t, err, "MONITOR")
	rd := bufio.NewReader(conn)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR answered %q, %v", line, err)
	}
	go func() {
		defer close(m.done)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			m.mu.Lock()
			m.cmds = append(m.cmds, line)
			m.mu.Unlock()
		}
	}()
	t.Cleanup(func() { m.stop() })
	return m
}

func (m *monitor) stop() []string {
	_ = m.conn.Close()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmds
}
