package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/seckill-lab/shop/internal/netx"
)

// wireClient is one bench client's keep-alive HTTP/1.1 connection, driven
// from the client's own goroutine: write a request, read its answer, keep
// the connection unless the answer closes it. It sends the request line and
// the headers the shop reads as net/http's Transport does for these
// requests (one connection, one request at a time, Content-Length: 0 on a
// POST), without the Transport's two goroutines per connection and three
// hand-offs per request. At 10,000 clients those made the load generator
// take two thirds of the two cores in the memory phase (pidstat: 117-132%
// against the shop's 60-76%), and the slowest answer it measured was
// mostly its own scheduling.
//
// Like the Transport, it fails a request on a fresh connection that had
// bytes to read before the request was written (an answer nobody asked for
// yet), and sends it again on a new connection when a reused one had. Its
// window is narrower: it looks once, just before writing, where the
// Transport's reader goroutine watches from the dial on. That the shop
// waits for a request before answering 503 overloaded is proven with
// net/http clients in internal/httpapi (TestOverCapAnswer).
type wireClient struct {
	Dialer  net.Dialer
	Timeout time.Duration // for one request: its write, its answer's head and body
	conn    net.Conn
	host    string // conn's
	br      *bufio.Reader
	req     []byte
}

// errUnsolicited is a connection that had something to read before its
// request was written (as net/http's "unsolicited response").
var errUnsolicited = errors.New("unsolicited answer (bytes to read before the request was written)")

func newWireClient(timeout time.Duration) *wireClient {
	return &wireClient{Dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: -1}, Timeout: timeout}
}

func (w *wireClient) Close() {
	if w.conn != nil {
		_ = w.conn.Close()
		w.conn = nil
	}
}

// do sends one request (auth: the Authorization header, none if empty) and
// reads its answer: the status and, for a problem+json answer, its code,
// the body read into buf. On a reused connection, a request that was not
// written, or a GET that got no answer, is sent once more on a new
// connection, as the Transport does (a POST that was written is not: the
// shop may have taken it).
func (w *wireClient) do(ctx context.Context, method string, u *url.URL, auth string, buf []byte) (status int, code string, err error) {
	replayable := method == http.MethodGet || method == http.MethodHead
	for attempt := 0; ; attempt++ {
		reused := w.conn != nil && w.host == u.Host
		status, code, written, err := w.once(ctx, method, u, auth, buf, reused)
		if err != nil {
			w.Close()
			if reused && attempt == 0 && (!written || replayable && status == 0) {
				continue
			}
		}
		return status, code, err
	}
}

func (w *wireClient) once(ctx context.Context, method string, u *url.URL, auth string, buf []byte, reused bool) (status int, code string, written bool, err error) {
	if !reused {
		w.Close()
		c, err := w.Dialer.DialContext(ctx, "tcp", u.Host)
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
	_ = w.conn.SetDeadline(time.Now().Add(w.Timeout))
	if ready, _ := netx.Readable(w.conn); ready || w.br.Buffered() > 0 {
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
	if _, err := w.conn.Write(w.req); err != nil {
		return 0, "", false, err
	}
	resp, err := http.ReadResponse(w.br, nil)
	if err != nil {
		return 0, "", true, fmt.Errorf("read answer: %w", err)
	}
	n, err := readBody(resp.Body, buf)
	resp.Body.Close()
	if resp.StatusCode >= 400 {
		code = problemCode(buf[:n])
	}
	if err != nil {
		// The head came, the body did not: the connection is out of step.
		return resp.StatusCode, code, true, fmt.Errorf("read answer body: %w", err)
	}
	if resp.Close {
		w.Close()
	}
	return resp.StatusCode, code, true, nil
}

// readBody reads body into buf up to its end, dropping what does not fit,
// and returns how much of buf it filled; an error is a body cut short.
func readBody(body io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := body.Read(buf[n:])
		n += k
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	_, err := io.Copy(io.Discard, body)
	return n, err
}
