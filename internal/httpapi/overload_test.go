package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-lab/shop/internal/wire"
)

// firstOpListener records, for each accepted connection, whether the server
// first read from it or wrote to it.
type firstOpListener struct {
	net.Listener
	// pause holds each accepted connection back this long, so that what
	// its client sends right after connecting is in the socket before
	// the server looks.
	pause time.Duration
	mu    sync.Mutex
	first []string
}

func (l *firstOpListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	time.Sleep(l.pause)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.first = append(l.first, "")
	return &firstOpConn{Conn: c, l: l, i: len(l.first) - 1}, nil
}

func (l *firstOpListener) op(i int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first[i]
}

type firstOpConn struct {
	net.Conn
	l *firstOpListener
	i int
}

func (c *firstOpConn) note(op string) {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.l.first[c.i] == "" {
		c.l.first[c.i] = op
	}
}

func (c *firstOpConn) Read(p []byte) (int, error)  { c.note("read"); return c.Conn.Read(p) }
func (c *firstOpConn) Write(p []byte) (int, error) { c.note("write"); return c.Conn.Write(p) }

// CloseWrite and SyscallConn keep the TCP connection's own.
func (c *firstOpConn) CloseWrite() error { return c.Conn.(*net.TCPConn).CloseWrite() }

func (c *firstOpConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(*net.TCPConn).SyscallConn()
}

// A connection over SHOP_MAX_CONNS is answered 503 overloaded before
// anything of it is read, with Retry-After and Connection: close, even when
// its client sent a large request first (a socket closed with unread bytes
// would reset and lose the answer); the refusal is counted, and once a slot
// is free connections are served again. Go's own client, which drops an
// answer that comes before its request, sees the 503 too.
func TestOverCapAnswer(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &firstOpListener{Listener: inner, pause: 100 * time.Millisecond}
	reg := prometheus.NewRegistry()
	var handled atomic.Int64
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = srv.Serve(Listener(rec, 1, reg)) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := inner.Addr().String()

	held := holdSlot(t, addr)

	for _, tc := range []struct {
		name, request string
	}{
		{"nothing sent", ""},
		{"a 32 KiB body sent before reading", "POST /x HTTP/1.1\r\nHost: shop\r\nContent-Length: 32768\r\n\r\n" + strings.Repeat("x", 32768)},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(awaitFor + 5*time.Second)) // nothing sent: answered once awaitFor is up
		sent := time.Now()
		if _, err := io.WriteString(c, tc.request); err != nil {
			t.Fatalf("%s: send: %v", tc.name, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: no answer over the cap: %v", tc.name, err)
		}
		// A request already in the socket when the wait begins (sent
		// right after the connect, as here) is seen at once, not when
		// awaitFor runs out: the poller alone would not tell.
		if waited := time.Since(sent); tc.request != "" && waited >= awaitFor-time.Second {
			t.Errorf("%s: answered after %s, want at once (the request was waiting in the socket)", tc.name, waited)
		}
		body, err := io.ReadAll(resp.Body)
		c.Close()
		if err != nil {
			t.Errorf("%s: body: %v", tc.name, err)
		}
		var p wire.Problem
		if err := json.Unmarshal(body, &p); err != nil {
			t.Errorf("%s: body %q: %v", tc.name, body, err)
		}
		for _, h := range []struct{ name, want string }{
			{"Content-Type", "application/problem+json"}, {"Retry-After", "1"},
		} {
			if got := resp.Header.Get(h.name); got != h.want {
				t.Errorf("%s: %s %q, want %q", tc.name, h.name, got, h.want)
			}
		}
		if !resp.Close { // (ReadResponse takes Connection: close out of the header)
			t.Errorf("%s: no Connection: close", tc.name)
		}
		if resp.StatusCode != http.StatusServiceUnavailable || p.Code != "overloaded" || p.Status != 503 || p.Type != "urn:shop:problem:overloaded" {
			t.Errorf("%s: %d %+v, want 503 overloaded", tc.name, resp.StatusCode, p)
		}
	}
	goClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 5 {
		resp, err := goClient.Post("http://"+addr+"/x", "application/json", strings.NewReader(`{"a":1}`))
		if err != nil {
			t.Fatalf("Go client, try %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("Go client, try %d: %d, want 503", i, resp.StatusCode)
		}
	}
	if op := rec.op(1); op != "write" {
		t.Errorf("the refused connection was first %q, want written (answered before any read)", op)
	}
	if n := handled.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1 (refused requests are not served)", n)
	}
	if got := counterValue(t, reg, "shop_http_overloaded_total"); got != 7 {
		t.Errorf("shop_http_overloaded_total = %v, want 7", got)
	}

	held.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := (&http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + addr + "/x")
		if err == nil && resp.StatusCode == http.StatusOK {
			resp.Body.Close()
			break
		}
		if err == nil {
			resp.Body.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the held connection closed, still refused: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counterValue reads one counter with no labels from reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// A keep-alive connection idle for idleEvictAfter gives its slot to a
// connection over the cap, which is then served; one idle for less does
// not, nor does one whose client has started its next request (its bytes
// read by the server or waiting in the socket): the newcomer is answered
// 503 overloaded then, or another idle connection gives way.
func TestIdleConnectionGivesWay(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	srv := &http.Server{ReadHeaderTimeout: 20 * time.Second, ConnState: ConnState, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	})}
	go func() { _ = srv.Serve(Listener(inner, 2, reg)) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := inner.Addr().String()
	const head = "GET /x HTTP/1.1\r\nHost: shop\r\n\r\n"
	answer := func(c net.Conn) (int, error) {
		_ = c.SetDeadline(time.Now().Add(awaitFor + 5*time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	get := func(c net.Conn) (int, error) {
		if _, err := io.WriteString(c, head); err != nil {
			return 0, err
		}
		return answer(c)
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	// Both slots taken by keep-alive connections, then idle: sending
	// first (the longest idle), then idle.
	sending, idle := dial(), dial()
	for _, c := range []net.Conn{sending, idle} {
		if code, err := get(c); err != nil || code != http.StatusOK {
			t.Fatalf("first requests: %d %v", code, err)
		}
	}
	idleFrom := time.Now()
	if code, err := get(dial()); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("over the cap while both connections are freshly idle: %d %v, want 503", code, err)
	}
	time.Sleep(time.Until(idleFrom.Add(idleEvictAfter + 200*time.Millisecond)))
	// The longest idle starts its next request, half a head.
	if _, err := io.WriteString(sending, head[:10]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if code, err := get(dial()); err != nil || code != http.StatusOK {
		t.Fatalf("over the cap with a connection idle for %s: %d %v, want 200 (served in its slot)", idleEvictAfter, code, err)
	}
	if _, err := io.WriteString(sending, head[10:]); err != nil {
		t.Fatalf("the connection that was sending was closed: %v", err)
	}
	if code, err := answer(sending); err != nil || code != http.StatusOK {
		t.Errorf("the connection that was sending its request: %d %v, want 200 (not evicted)", code, err)
	}
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := idle.Read(make([]byte, 1)); err == nil {
		t.Errorf("the idle connection is still open (read %d bytes)", n)
	}
	if got := counterValue(t, reg, "shop_http_idle_evicted_total"); got != 1 {
		t.Errorf("shop_http_idle_evicted_total = %v, want 1", got)
	}
}

// TestRefusedAnsweredThroughShutdown: a connection refused at the cap
// whose request arrives after the server began to shut down still gets its
// 503, and WaitRefused returns only once it was answered and drained.
func TestRefusedAnsweredThroughShutdown(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	hl := Listener(inner, 1, reg)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
	})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(hl) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := inner.Addr().String()

	defer holdSlot(t, addr).Close()
	refused, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	for deadline := time.Now().Add(5 * time.Second); counterValue(t, reg, "shop_http_overloaded_total") < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second connection was not refused")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	<-served
	waited := make(chan error, 1)
	go func() { waited <- WaitRefused(ctx, hl) }()
	select {
	case err := <-waited:
		t.Fatalf("WaitRefused returned (%v) while a refused connection still waited for its request", err)
	case <-time.After(200 * time.Millisecond):
	}
	_ = refused.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(refused, "POST /x HTTP/1.1\r\nHost: shop\r\nContent-Length: 0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(refused), nil)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("refused connection after shutdown began: %v %v, want its 503", resp, err)
	}
	refused.Close() // the drain ends when the client closes
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("WaitRefused: %v", err)
		}
	case <-time.After(500 * time.Millisecond): // (the drain ends at the client's close, not at drainFor)
		t.Fatal("WaitRefused still waiting after the refused connection was answered and closed")
	}
}

// holdSlot opens a connection to addr and has one request served on it:
// the connection holds a slot of the cap until it is closed.
func holdSlot(t *testing.T, addr string) net.Conn {
	t.Helper()
	held, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(held, "GET /x HTTP/1.1\r\nHost: shop\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(held), nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first connection: %v", err)
	}
	return held
}
