package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/shop/internal/topo"
)

// RedisServer is a private redis-server process on a loopback port, for
// tests that restart or FLUSHALL Redis without disturbing anyone else.
type RedisServer struct {
	Port int
	cmd  *exec.Cmd
	t    testing.TB
}

// StartRedisServer starts redis-server (from PATH) on a free loopback port;
// it is killed at cleanup.
func StartRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	port := FreePort(t)
	s := &RedisServer{Port: port, t: t}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's redis:// URL.
func (s *RedisServer) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.Port) }

// Start (re)starts the process on the same port.
func (s *RedisServer) Start() {
	s.t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		s.t.Fatalf("testenv: redis-server not on PATH (install Debian's redis-server): %v", err)
	}
	s.cmd = exec.Command(path, "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--notify-keyspace-events", "")
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("testenv: start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.Port)})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			s.t.Fatalf("testenv: redis-server on port %d did not answer in 10s", s.Port)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the process (data is lost: it keeps nothing on disk).
func (s *RedisServer) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// FreePort returns a loopback TCP port that was free a moment ago, below
// the kernel's ephemeral range, so that no outgoing connection takes it as
// its local port before the caller binds it (topo.FreePorts).
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := topo.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return p[0]
}
