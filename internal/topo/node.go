package topo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one redis-server (data node or sentinel) on 127.0.0.1. Kill and
// Start keep its port, directory and configuration, so a killed master can
// come back (as a replica, once another was promoted).
type Node struct {
	Port    int
	Dir     string
	LogPath string
	args    []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Addr is host:port.
func (n *Node) Addr() string { return "127.0.0.1:" + strconv.Itoa(n.Port) }

// Client is a new client of this node alone (the caller closes it).
func (n *Node) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.Addr(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1})
}

// Running reports whether the process is alive.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// Start starts the process and waits up to 10 s for it to answer PING.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		n.mu.Unlock()
		return fmt.Errorf("topo: redis-server not on PATH (Debian: apt-get install redis-server): %w", err)
	}
	cmd := exec.Command(path, n.args...)
	cmd.Dir = n.Dir
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		n.mu.Unlock()
		return fmt.Errorf("topo: start redis-server on %d: %w", n.Port, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()

	c := n.Client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for c.Ping(ctx).Err() != nil {
		select {
		case <-exited:
			return fmt.Errorf("topo: redis-server on %d exited at start; log %s:\n%s", n.Port, n.LogPath, tail(n.LogPath))
		case <-ctx.Done():
			return fmt.Errorf("topo: redis-server on %d does not answer after 10s; log %s", n.Port, n.LogPath)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Kill sends SIGKILL (no shutdown, no last write to replicas) and waits
// for the process to be gone. Killing a stopped node is a no-op.
func (n *Node) Kill() {
	n.signal(syscall.SIGKILL)
}

func (n *Node) signal(sig syscall.Signal) {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	if sig == syscall.SIGKILL {
		n.cmd = nil
	}
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	if sig == syscall.SIGKILL {
		<-exited
	}
}

func newNode(dir string, port int, args ...string) (*Node, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	n := &Node{Port: port, Dir: dir, LogPath: filepath.Join(dir, "redis.log")}
	n.args = append(args, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--logfile", n.LogPath, "--save", "", "--appendonly", "no", "--daemonize", "no")
	return n, nil
}

// ports returns n ports: base, base+1, ... when base > 0, else free ones
// below the kernel's ephemeral range. A port the kernel handed out for
// ":0" was taken again, between its listener's close and redis-server's
// bind, as the local port of some outgoing connection (CI: "bind: Address
// already in use", a Sentinel group that never came up); outgoing
// connections take theirs from the ephemeral range only.
func ports(base, n int) ([]int, error) {
	out := make([]int, n)
	if base > 0 {
		for i := range out {
			out[i] = base + i
		}
		return out, nil
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	hi := ephemeralStart()
	handed.Lock()
	defer handed.Unlock()
	for i := range out {
		for tries := 0; ; tries++ {
			p := portsFrom + rand.IntN(hi-portsFrom)
			if handed.ports[p] {
				continue // given out before: its listener may not be up yet
			}
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				if tries == 100 {
					return nil, fmt.Errorf("topo: no free port in %d-%d after 100 tries: %w", portsFrom, hi-1, err)
				}
				continue
			}
			ls = append(ls, l)
			out[i] = p
			handed.ports[p] = true
			break
		}
	}
	return out, nil
}

// handed is every port ports gave out in this process: never twice, so
// that two calls (a group's data nodes, then its sentinels) cannot pick
// one port before either is bound.
var handed = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePorts is n loopback ports that were free a moment ago, below the
// kernel's ephemeral range (see ports).
func FreePorts(n int) ([]int, error) { return ports(0, n) }

// portsFrom is the lowest port ports picks.
const portsFrom = 10000

// ephemeralStart is the first port of the kernel's ephemeral range
// (Linux: net.ipv4.ip_local_port_range; else, or unreadable, 32768).
func ephemeralStart() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > portsFrom+1000 {
				return n
			}
		}
	}
	return 32768
}

// poll calls ok every 50 ms until it returns nil or limit passes; the last
// error says what was still missing.
func poll(ctx context.Context, limit time.Duration, what string, ok func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		err := ok(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topo: %s not reached after %s: %w", what, limit, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

var errNotYet = errors.New("not yet")

// workDir is dir, or a new temporary directory named after prefix (own:
// the caller removes it), opened to the user mysql, which runs the
// database servers below it.
func workDir(dir, prefix string) (_ string, own bool, err error) {
	if dir == "" {
		if dir, err = os.MkdirTemp("", prefix); err != nil {
			return "", false, err
		}
		own = true
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		if own {
			_ = os.RemoveAll(dir)
		}
		return "", false, err
	}
	return dir, own, nil
}

// addrsOf is each server's host:port.
func addrsOf(nodes []*MariaDB) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Addr()
	}
	return out
}
