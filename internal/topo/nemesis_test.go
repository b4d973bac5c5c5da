package topo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// nemesisRedis is a redis-server behind two links of one nemesis, as two
// shop instances would reach it.
func nemesisRedis(t *testing.T) (*Nemesis, *Link, *Link) {
	t.Helper()
	if !RedisInstalled() {
		t.Fatal("redis-server is not on PATH (Debian: apt-get install redis-server); the nemesis test needs it")
	}
	ctx := context.Background()
	r, err := StartRedis(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	n, err := StartNemesis(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	a, err := n.Link("redis-1", "", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Link("redis-2", "", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	return n, a, b
}

// ping sends one PING through addr on a fresh TCP connection (one round
// trip, no client handshake or retries), with a deadline, and says how long
// the answer (or the error) took.
func ping(addr string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return time.Since(start), err
	}
	defer c.Close()
	_ = c.SetDeadline(start.Add(timeout))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return time.Since(start), err
	}
	buf := make([]byte, 7)
	if _, err := io.ReadFull(c, buf); err != nil {
		return time.Since(start), err
	}
	if string(buf) != "+PONG\r\n" {
		return time.Since(start), fmt.Errorf("PING answered %q", buf)
	}
	return time.Since(start), nil
}

// Each kind of fault really does what it says to one link, the other link
// to the same Redis is untouched, and healing restores the link.
func TestNemesisFaults(t *testing.T) {
	_, a, b := nemesisRedis(t)
	if d, err := ping(a.Addr(), time.Second); err != nil || d > 300*time.Millisecond {
		t.Fatalf("healthy link: PING in %s, %v", d, err)
	}
	cases := []struct {
		fault Fault
		check func(d time.Duration, err error) string
	}{
		{Fault{Kind: Latency, Delay: 150 * time.Millisecond}, func(d time.Duration, err error) string {
			if err != nil || d < 300*time.Millisecond {
				return "want a PING of at least 2 x 150ms"
			}
			return ""
		}},
		{Fault{Kind: Latency, Dir: Back, Delay: 150 * time.Millisecond}, func(d time.Duration, err error) string {
			if err != nil || d < 150*time.Millisecond || d > 290*time.Millisecond {
				return "want a PING of 150ms (replies only)"
			}
			return ""
		}},
		{Fault{Kind: BlackHole}, func(d time.Duration, err error) string {
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() || d < 700*time.Millisecond {
				return "want the client's own 700ms timeout"
			}
			return ""
		}},
		{Fault{Kind: TimedClose, After: 200 * time.Millisecond}, func(d time.Duration, err error) string {
			if err == nil || d < 150*time.Millisecond || d > 650*time.Millisecond {
				return "want the connection closed after about 200ms"
			}
			return ""
		}},
		{Fault{Kind: Reset}, func(d time.Duration, err error) string {
			if err == nil || d > 300*time.Millisecond {
				return "want a reset at once"
			}
			return ""
		}},
		{Fault{Kind: Down}, func(d time.Duration, err error) string {
			if err == nil || !strings.Contains(err.Error(), "refused") || d > 300*time.Millisecond {
				return "want connection refused at once"
			}
			return ""
		}},
	}
	for _, c := range cases {
		if err := a.Inject(c.fault); err != nil {
			t.Fatal(err)
		}
		d, err := ping(a.Addr(), 700*time.Millisecond)
		t.Logf("%-28s PING through the faulted link: %6s %v", c.fault, d.Round(time.Millisecond), err)
		if msg := c.check(d, err); msg != "" {
			t.Errorf("%s: PING took %s (%v): %s", c.fault, d, err, msg)
		}
		if d, err := ping(b.Addr(), time.Second); err != nil || d > 300*time.Millisecond {
			t.Errorf("%s on link 1 reached link 2: PING in %s, %v", c.fault, d, err)
		}
		if err := a.Heal(); err != nil {
			t.Fatal(err)
		}
		if d, err := ping(a.Addr(), time.Second); err != nil || d > 300*time.Millisecond {
			t.Errorf("after healing %s: PING in %s, %v", c.fault, d, err)
		}
	}
}

// A fault reaches connections already open (a pool's), not only new ones:
// a black hole stalls an open connection, and a bandwidth limit slows a
// large reply on it.
func TestNemesisOpenConnections(t *testing.T) {
	_, a, _ := nemesisRedis(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: a.Addr(), ReadTimeout: 600 * time.Millisecond, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	if err := c.Set(ctx, "big", strings.Repeat("x", 64<<10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := a.Inject(Fault{Kind: Bandwidth, Dir: Back, RateKB: 100}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	slow := redis.NewClient(&redis.Options{Addr: a.Addr(), ReadTimeout: 5 * time.Second, MaxRetries: -1, PoolSize: 1})
	defer slow.Close()
	if err := slow.Get(ctx, "big").Err(); err != nil || time.Since(start) < 400*time.Millisecond {
		t.Errorf("64 KB at 100 KB/s: %s, %v (want at least 0.4s)", time.Since(start), err)
	}
	t.Logf("64 KB at 100 KB/s: %s", time.Since(start).Round(time.Millisecond))
	if err := a.Inject(Fault{Kind: BlackHole}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	err := c.Ping(ctx).Err()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("black hole on an open connection: %v after %s, want the read timeout", err, time.Since(start))
	}
	if err := a.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("after healing: %v", err)
	}
}
