package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// Listener wraps ln for serving: at most maxConns connections are open at
// once, and one more is answered with 503 overloaded as soon as its request
// arrives (see capListener) instead of waiting unanswered in the listen backlog, unless
// a long-idle keep-alive connection gives up its slot (the server's
// ConnState must be this package's ConnState for that); every
// connection is watched for a request head carrying both Content-Length
// and Transfer-Encoding. Go's server drops the Content-Length of such a
// request before a handler can see it; RFC 9112 calls the pair a smuggling
// attempt to be treated as an error, so the handler refuses it (see
// ambiguousLength). Refused connections are counted in reg.
func Listener(ln net.Listener, maxConns int, reg prometheus.Registerer) net.Listener {
	if maxConns > 0 {
		refused := prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "shop", Name: "http_overloaded_total",
			Help: "Connections over SHOP_MAX_CONNS, answered 503 overloaded before anything was read.",
		})
		evicted := prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "shop", Name: "http_idle_evicted_total",
			Help: "Keep-alive connections idle for 5 s or more closed to give their slot to a connection over SHOP_MAX_CONNS.",
		})
		reg.MustRegister(refused, evicted)
		ln = &capListener{Listener: ln, slots: make(chan struct{}, maxConns), drains: make(chan struct{}, maxDrains), refused: refused, evicted: evicted}
	}
	return sniffListener{ln}
}

// WaitRefused waits, once the server has stopped accepting (after its
// Shutdown), until every connection refused at the cap has been answered
// and drained, or ctx ends. Cut short by the process's exit, a refused
// client whose request had arrived would get a reset instead of its 503.
// A refusal lasts at most awaitFor + drainFor.
func WaitRefused(ctx context.Context, ln net.Listener) error {
	if sl, ok := ln.(sniffListener); ok {
		ln = sl.Listener
	}
	cl, ok := ln.(*capListener)
	if !ok {
		return nil
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for len(cl.drains) > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d refused connections still open: %w", len(cl.drains), ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// ConnContext is the http.Server hook that lets handlers find their
// connection's watcher.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if sc, ok := c.(*sniffConn); ok {
		return context.WithValue(ctx, sniffKey{}, sc)
	}
	return ctx
}

type sniffKey struct{}

type sniffListener struct{ net.Listener }

func (l sniffListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c}, nil
}

// sniffConn scans the bytes the server reads, line by line, keeping only
// the start and the end of the current line (bounded memory). A request
// line opens a head; an empty line closes it.
type sniffConn struct {
	net.Conn
	ambiguous atomic.Bool

	start   []byte // first bytes of the current line
	end     []byte // last bytes of the current line
	inHead  bool
	sawCL   bool
	sawTE   bool
	lineLen int
}

const sniffKeep = 24

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	for rest := p[:n]; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			c.take(rest)
			break
		}
		c.take(rest[:i])
		c.line()
		c.start, c.end, c.lineLen = c.start[:0], c.end[:0], 0
		rest = rest[i+1:]
	}
	return n, err
}

// take adds seg, a piece of the current line, keeping its first and last
// sniffKeep bytes: a copy per piece, not per byte.
func (c *sniffConn) take(seg []byte) {
	c.lineLen += len(seg)
	if k := sniffKeep - len(c.start); k > 0 {
		c.start = append(c.start, seg[:min(k, len(seg))]...)
	}
	if len(seg) >= sniffKeep {
		c.end = append(c.end[:0], seg[len(seg)-sniffKeep:]...)
		return
	}
	if over := len(c.end) + len(seg) - sniffKeep; over > 0 {
		c.end = append(c.end[:0], c.end[over:]...) // overlapping: append copies like memmove
	}
	c.end = append(c.end, seg...)
}

var (
	http10 = []byte(" HTTP/1.0")
	http11 = []byte(" HTTP/1.1")
	hdrCL  = []byte("content-length:")
	hdrTE  = []byte("transfer-encoding:")
)

func (c *sniffConn) line() {
	end := bytes.TrimSuffix(c.end, []byte("\r"))
	if !c.inHead {
		if bytes.HasSuffix(end, http11) || bytes.HasSuffix(end, http10) {
			c.inHead, c.sawCL, c.sawTE = true, false, false
		}
		return
	}
	if c.lineLen <= 1 && len(end) == 0 { // the empty line ends the head
		c.inHead = false
		if c.sawCL && c.sawTE {
			c.ambiguous.Store(true)
		}
		return
	}
	c.sawCL = c.sawCL || hasPrefixFold(c.start, hdrCL)
	c.sawTE = c.sawTE || hasPrefixFold(c.start, hdrTE)
}

// hasPrefixFold reports whether b starts with the lower-case ASCII prefix
// in any case, without the copy bytes.ToLower made of every header line.
func hasPrefixFold(b, prefix []byte) bool {
	if len(b) < len(prefix) {
		return false
	}
	for i, p := range prefix {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != p {
			return false
		}
	}
	return true
}

// ambiguousLength answers 400 to a request whose head had both
// Content-Length and Transfer-Encoding, and closes the connection: what
// follows on it cannot be framed with confidence.
func ambiguousLength() gin.HandlerFunc {
	return func(c *gin.Context) {
		if sc, ok := c.Request.Context().Value(sniffKey{}).(*sniffConn); ok && sc.ambiguous.Load() {
			c.Header("Connection", "close")
			writeError(c, newError("invalid_request", "a request must not carry both Content-Length and Transfer-Encoding"))
			return
		}
		c.Next()
	}
}
