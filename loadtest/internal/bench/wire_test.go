package bench

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
)

// TestWireClient: one keep-alive connection for a client's requests, a
// new one after an answer that closes it or after the server closed the
// idle one, the request as net/http would send it, and an answer that
// came before the request is a failure.
func TestWireClient(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && (r.ContentLength != 0 || r.Header.Get("Authorization") != "Bearer t") {
			t.Errorf("POST arrived with Content-Length %d, Authorization %q", r.ContentLength, r.Header.Get("Authorization"))
		}
		if r.URL.Query().Get("close") != "" {
			w.Header().Set("Connection", "close")
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"status":409,"code":"sold_out"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/api/v1/seckill/1/orders")
	closing, _ := url.Parse(srv.URL + "/api/v1/seckill/1/orders?close=1")

	ctx := context.Background()
	w := newWireClient(time.Second)
	defer w.Close()
	buf := make([]byte, 2048)
	for range 5 {
		status, code, err := w.do(ctx, http.MethodPost, u, "Bearer t", buf)
		if err != nil || status != http.StatusConflict || code != "sold_out" {
			t.Fatalf("do = %d %q %v, want 409 sold_out", status, code, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("5 requests took %d connections, want 1 (keep-alive)", n)
	}
	if _, _, err := w.do(ctx, http.MethodPost, closing, "Bearer t", buf); err != nil {
		t.Fatal(err)
	}
	if w.conn != nil {
		t.Fatal("the connection stayed open after Connection: close")
	}
	if _, _, err := w.do(ctx, http.MethodGet, u, "", buf); err != nil {
		t.Fatal(err)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("after a closing answer: %d connections, want 2", n)
	}
	// The server closes the idle connection: the next request goes out
	// once more, on a new one.
	srv.CloseClientConnections()
	time.Sleep(50 * time.Millisecond)
	if _, _, err := w.do(ctx, http.MethodPost, u, "Bearer t", buf); err != nil {
		t.Fatalf("after the server closed the idle connection: %v", err)
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("after the server closed the idle connection: %d connections, want 3", n)
	}

	// A server that answers before the request was written.
	eagerAddr := rawServer(t, func(c net.Conn) {
		_, _ = c.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
		time.Sleep(200 * time.Millisecond)
	})
	eager, _ := url.Parse("http://" + eagerAddr + "/healthz")
	w2 := newWireClient(time.Second)
	defer w2.Close()
	// A connection whose answer has crossed loopback before the request
	// is written (do dials and writes at once; the wait makes the order
	// certain): once sees it and writes nothing. (do then fails the
	// request on a fresh connection, as net/http's "unsolicited response"
	// does, and starts over on a new one for a reused connection.)
	c, err := w2.Dialer.DialContext(ctx, "tcp", eager.Host)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	w2.conn, w2.host, w2.br = c, eager.Host, bufio.NewReader(c)
	if _, _, written, err := w2.once(ctx, http.MethodGet, eager, "", buf, true); written || !errors.Is(err, errUnsolicited) {
		t.Fatalf("an answer before the request: written %v, err %v; want errUnsolicited, nothing written", written, err)
	}

	// An answer whose body is cut short is an error, and its connection
	// is not used again.
	shortAddr := rawServer(t, func(c net.Conn) {
		_, _ = bufio.NewReader(c).ReadString('\n')
		_, _ = c.Write([]byte("HTTP/1.1 409 Conflict\r\nContent-Length: 100\r\n\r\n{\"code\":"))
	})
	cut, _ := url.Parse("http://" + shortAddr + "/x")
	w3 := newWireClient(time.Second)
	defer w3.Close()
	if status, _, err := w3.do(ctx, http.MethodPost, cut, "", buf); err == nil || status != http.StatusConflict || w3.conn != nil {
		t.Fatalf("a body cut short: status %d, err %v, connection kept %v; want 409 with an error, connection closed", status, err, w3.conn != nil)
	}
}

// rawServer serves every connection with serve, then closes it, on a
// loopback port of its own until the test ends; it returns the address.
func rawServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			serve(c)
			c.Close()
		}
	}()
	return ln.Addr().String()
}
