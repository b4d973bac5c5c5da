package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"
)

// wireClient is one bench client's keep-alive HTTP/1.1 connection, driven
// from the client's own goroutine: write a request, read its answer, keep
// the connection unless the answer closes it. On the wire it is what
// net/http's Transport sends for these requests (one connection, one
// request at a time, Content-Length: 0 on a POST), without the Transport's
// two goroutines per connection and three hand-offs per request. At 10,000
// clients those made the load generator take two thirds of the two cores
// in the memory phase (pidstat: 117-132% against the shop's 60-76%), and
// the slowest answer it measured was mostly its own scheduling.
//
// Like the Transport, it fails a request whose connection had bytes to
// read before the request was written (an answer nobody asked for yet):
// the shop must wait for a request before it answers 503 overloaded.
type wireClient struct {
	dialer  net.Dialer
	timeout time.Duration // for an answer's head, once the request is written
	conn    net.Conn
	host    string // conn's
	br      *bufio.Reader
	req     []byte
}

// errUnsolicited is a connection that had something to read before its
// request was written (as net/http's "unsolicited response").
var errUnsolicited = errors.New("unsolicited answer (bytes to read before the request was written)")

func newWireClient(timeout time.Duration) *wireClient {
	return &wireClient{dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: -1}, timeout: timeout}
}

func (w *wireClient) close() {
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn = nil
	}
}

// do sends one request (auth: the Authorization header, none if empty) and
// reads its answer: the status and, for a problem+json answer, its code,
// the body read into buf. A request on a reused connection that could not
// be written is sent once more on a new one, as the Transport does.
func (w *wireClient) do(ctx context.Context, method string, u *url.URL, auth string, buf []byte) (status int, code string, err error) {
	for attempt := 0; ; attempt++ {
		reused := w.conn != nil && w.host == u.Host
		status, code, written, err := w.once(ctx, method, u, auth, buf, reused)
		if err != nil {
			w.close()
			if reused && !written && attempt == 0 {
				continue
			}
		}
		return status, code, err
	}
}

func (w *wireClient) once(ctx context.Context, method string, u *url.URL, auth string, buf []byte, reused bool) (status int, code string, written bool, err error) {
	if !reused {
		w.close()
		c, err := w.dialer.DialContext(ctx, "tcp", u.Host)
		if err != nil {
			return 0, "", false, err
		}
		w.conn, w.host = c, u.Host
		if w.br == nil {
			w.br = bufio.NewReaderSize(c, 4096)
		} else {
			w.br.Reset(c)
		}
	}
	if w.br.Buffered() > 0 || readable(w.conn) {
		return 0, "", false, errUnsolicited
	}
	w.req = append(w.req[:0], method...)
	w.req = append(w.req, ' ')
	w.req = append(w.req, u.RequestURI()...)
	w.req = append(w.req, " HTTP/1.1\r\nHost: "...)
	w.req = append(w.req, u.Host...)
	w.req = append(w.req, "\r\nUser-Agent: shop-bench\r\n"...)
	if auth != "" {
		w.req = append(w.req, "Authorization: "...)
		w.req = append(w.req, auth...)
		w.req = append(w.req, "\r\n"...)
	}
	if method != http.MethodGet && method != http.MethodHead {
		w.req = append(w.req, "Content-Length: 0\r\n"...)
	}
	w.req = append(w.req, "\r\n"...)
	_ = w.conn.SetDeadline(time.Now().Add(w.timeout))
	if _, err := w.conn.Write(w.req); err != nil {
		return 0, "", false, err
	}
	resp, err := http.ReadResponse(w.br, nil)
	if err != nil {
		return 0, "", true, fmt.Errorf("read answer: %w", err)
	}
	n, _ := io.ReadFull(resp.Body, buf)
	if n == len(buf) {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		code = problemCode(buf[:n])
	}
	if resp.Close {
		w.close()
	}
	return resp.StatusCode, code, true, nil
}

// readable reports whether c has bytes (or its end) to read now, without
// reading them or waiting.
func readable(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var got bool
	_ = rc.Read(func(fd uintptr) bool {
		got = peekNow(fd)
		return true
	})
	return got
}
