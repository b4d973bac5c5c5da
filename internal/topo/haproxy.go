package topo

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HAProxyOptions shape haproxy in front of database servers.
type HAProxyOptions struct {
	Dir      string   // working directory (created)
	Backends []string // host:port of each server
	// Writer says which backend takes connections now; haproxy asks each
	// backend's agent every 200 ms, and the agent answers "up" only for
	// the writer, so haproxy, with `balance first`, sends every connection
	// there, and drops the sessions of a backend marked down.
	Writer func() int
}

// HAProxy is Debian's haproxy in TCP mode in front of a database topology:
// the one address the shop's SHOP_MYSQL_DSN names, whichever server is
// the writer. A plain TCP health check cannot tell a primary from a
// replica, so an agent check (served by this process) decides.
type HAProxy struct {
	Port    int
	dir     string
	agents  []net.Listener
	cmd     *exec.Cmd
	exited  chan struct{}
	closing sync.Once
}

// StartHAProxy starts the agents and haproxy, and waits until it routes to
// the writer.
func StartHAProxy(ctx context.Context, o HAProxyOptions) (_ *HAProxy, err error) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		return nil, fmt.Errorf("topo: haproxy not on PATH (Debian: apt-get install haproxy): %w", err)
	}
	h := &HAProxy{dir: o.Dir}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	h.Port = ports[0]
	var servers []string
	for i, b := range o.Backends {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		h.agents = append(h.agents, ln)
		go agent(ln, func() bool { return o.Writer() == i })
		host, port, _ := net.SplitHostPort(b)
		servers = append(servers, fmt.Sprintf("  server n%d %s:%s check inter 200ms fall 1 rise 1 agent-check agent-addr 127.0.0.1 agent-port %d agent-inter 200ms on-marked-down shutdown-sessions",
			i, host, port, ln.Addr().(*net.TCPAddr).Port))
	}
	conf := strings.Join([]string{
		"global", "  maxconn 4000",
		"defaults", "  mode tcp", "  timeout connect 1s", "  timeout client 10m", "  timeout server 10m",
		"listen mysql", "  bind 127.0.0.1:" + strconv.Itoa(h.Port), "  balance first",
	}, "\n") + "\n" + strings.Join(servers, "\n") + "\n"
	path := filepath.Join(o.Dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(o.Dir, "haproxy.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	h.cmd = exec.Command(bin, "-f", path, "-db")
	h.cmd.Stdout, h.cmd.Stderr = log, log
	h.cmd.SysProcAttr = childAttr()
	if err := h.cmd.Start(); err != nil {
		return nil, fmt.Errorf("topo: start haproxy: %w", err)
	}
	h.exited = make(chan struct{})
	go func() { _ = h.cmd.Wait(); close(h.exited) }()
	return h, h.WaitWriter(ctx, o.Backends[o.Writer()], 30*time.Second)
}

// agent answers haproxy's agent checks on ln: "up" while writer() holds.
func agent(ln net.Listener, writer func() bool) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		state := "down\n"
		if writer() {
			state = "up\n"
		}
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write([]byte(state))
		c.Close()
	}
}

// Addr is host:port.
func (h *HAProxy) Addr() string { return "127.0.0.1:" + strconv.Itoa(h.Port) }

// WaitWriter waits until a new connection through haproxy reaches the
// server at addr (host:port), as root.
func (h *HAProxy) WaitWriter(ctx context.Context, addr string, limit time.Duration) error {
	return poll(ctx, limit, "haproxy routing to "+addr, func(ctx context.Context) error { return h.routesTo(ctx, addr) })
}

// routesTo reports (nil) whether a new connection through haproxy reaches
// the server at addr now.
func (h *HAProxy) routesTo(ctx context.Context, addr string) error {
	_, want, _ := net.SplitHostPort(addr)
	select {
	case <-h.exited:
		return fmt.Errorf("haproxy exited: %s", tail(filepath.Join(h.dir, "haproxy.log")))
	default:
	}
	db, err := sql.Open("mysql", "root@tcp("+h.Addr()+")/?timeout=1s&readTimeout=1s")
	if err != nil {
		return err
	}
	defer db.Close()
	var port string
	if err := db.QueryRowContext(ctx, "SELECT @@port").Scan(&port); err != nil {
		return err
	}
	if port != want {
		return fmt.Errorf("routed to port %s", port)
	}
	return nil
}

// Close stops haproxy and the agents.
func (h *HAProxy) Close() {
	h.closing.Do(func() {
		if h.cmd != nil && h.cmd.Process != nil {
			_ = h.cmd.Process.Kill()
			<-h.exited
		}
		for _, a := range h.agents {
			a.Close()
		}
	})
}
