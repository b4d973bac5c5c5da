package httpapi

import (
	"net"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-lab/shop/internal/wire"
)

// capListener keeps at most cap(slots) connections open. A connection over
// the cap is accepted anyway and answered with a static 503 overloaded as
// soon as its request starts to arrive, without a byte of it being read: a
// flash-sale crowd left in the listen backlog gets silence until it gives
// up, which is worse for it than "retry in a second" and invisible to the
// shop's metrics.
type capListener struct {
	net.Listener
	slots   chan struct{} // one token per open connection
	drains  chan struct{} // one token per refused connection still draining
	refused prometheus.Counter
}

// maxDrains bounds the refused connections answered and drained at once
// (a goroutine each, and a 512-byte buffer once answered); past it a
// refused connection is answered and closed in the accept loop without
// waiting for its request (see answerOverloaded for what that risks).
const maxDrains = 1024

// awaitFor bounds the wait for a refused connection's request; drainFor and
// drainMax how long and how much of it is read after the answer.
const (
	awaitFor = time.Second
	drainFor = 2 * time.Second
	drainMax = 64 << 10
)

// overloadedAnswer is the whole 503 overloaded response, built once.
var overloadedAnswer = func() []byte {
	body := mustJSON(wire.Problem{Type: "urn:shop:problem:overloaded", Title: codes["overloaded"].title, Status: codes["overloaded"].status,
		Detail: "the instance is at its connection cap (SHOP_MAX_CONNS); nothing was read or changed, retry later", Code: "overloaded"})
	return []byte("HTTP/1.1 503 Service Unavailable\r\n" +
		"Content-Type: application/problem+json\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n" +
		"Retry-After: " + retryAfter["overloaded"] + "\r\n" +
		"X-Content-Type-Options: nosniff\r\n" +
		"Connection: close\r\n\r\n" + string(body))
}()

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &capConn{Conn: c, slots: l.slots}, nil
		default:
		}
		l.refused.Inc()
		select {
		case l.drains <- struct{}{}:
			go func() {
				awaitRequest(c, awaitFor)
				answerOverloaded(c, drainFor)
				<-l.drains
			}()
		default:
			answerOverloaded(c, 0)
		}
	}
}

// awaitRequest waits, for up to d, until c has bytes to read, and reads
// none of them. An answer that arrives before the client has sent its
// request is one it did not ask for yet: Go's http.Transport, for one,
// drops it as "unsolicited" and silently redials, so its caller would see
// a slow sold-out instead of the 503.
func awaitRequest(c net.Conn, d time.Duration) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	waited := false
	_ = rc.Read(func(uintptr) bool { // false: wait until readable; then done
		done := waited
		waited = true
		return done
	})
}

// answerOverloaded writes the 503 to c, half-closes it and, for up to
// drain, reads and drops what the client sends until it closes its side.
// Closing a socket with unread bytes makes the kernel send a reset, and a
// client that already sent its request could lose the answer to it: the
// drain lets the client read the 503 and close first. The write goes to a
// fresh socket's empty send buffer, so it does not hold up Accept.
func answerOverloaded(c net.Conn, drain time.Duration) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(max(drain, 100*time.Millisecond)))
	if _, err := c.Write(overloadedAnswer); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	if drain <= 0 {
		return
	}
	buf := make([]byte, 512)
	for n := 0; n < drainMax; {
		k, err := c.Read(buf)
		if err != nil {
			return
		}
		n += k
	}
}

// capConn gives its slot back when it is closed, once.
type capConn struct {
	net.Conn
	slots  chan struct{}
	closed atomic.Bool
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		<-c.slots
	}
	return err
}
