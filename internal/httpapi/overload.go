package httpapi

import (
	"container/list"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-lab/shop/internal/netx"
)

// capListener keeps at most cap(slots) connections open. A connection over
// the cap is accepted anyway and answered with a static 503 overloaded as
// soon as its request starts to arrive, without a byte of it being read: a
// flash-sale crowd left in the listen backlog gets silence until it gives
// up, which is worse for it than "retry in a second" and invisible to the
// shop's metrics.
//
// A slot held by a keep-alive connection that has sat idle for
// idleEvictAfter is given to the newcomer instead (nginx does the same with
// its idle keep-alive connections when worker_connections run out): idle
// browsers must not lock a buying crowd out for the whole IdleTimeout.
type capListener struct {
	net.Listener
	slots   chan struct{} // one token per open connection
	drains  chan struct{} // one token per refused connection still draining
	refused prometheus.Counter
	evicted prometheus.Counter

	mu   sync.Mutex
	idle list.List // *capConn between requests, longest idle first
}

// idleEvictAfter is how long a keep-alive connection must have been idle
// before a connection over the cap may take its slot. A client whose idle
// connection is closed retries on a new one (RFC 9112 9.3.1 allows the
// server to close an idle connection at any time); one that sends its next
// request just as it is closed sees the same race as at IdleTimeout, so
// the bar is well above the gap between a busy client's requests.
const idleEvictAfter = 5 * time.Second

// maxDrains bounds the refused connections waited on, answered and drained
// at once: a parked goroutine each (its stack and the poller's state, about
// 3 KiB), and a 512-byte buffer once answered. A refusal whose request has
// arrived is answered within microseconds, but its drain lasts until the
// client closes, slow on a loaded machine, so a crowd keeps thousands in
// flight: at 10,000 bench clients a bound of 4096 was reached and 300
// refusals were written before their request (a Go client, k6 among them,
// drops such an answer as unsolicited and fails the request); 16,384 made
// it 0, at 122 MB of peak RSS against 109. Past the bound a refused
// connection is answered and closed in the accept loop without waiting.
const maxDrains = 16384

// awaitFor bounds the wait for a refused connection's request: long enough
// for a client on a starved machine to send it (a crowd's clients are slow
// to write right after connecting; answered before its request, the
// client may drop the answer), short enough that connections that never
// send free their place soon. drainFor and drainMax bound how long and how
// much of the request is read after the answer.
const (
	awaitFor = 5 * time.Second
	drainFor = 2 * time.Second
	drainMax = 64 << 10
)

// overloadedAnswer is the whole 503 overloaded response, built once; its
// body is the problem problemFor makes, as every other error answer's is.
var overloadedAnswer = func() []byte {
	body := mustJSON(problemFor(newError("overloaded", "the instance is at its connection cap (SHOP_MAX_CONNS); nothing was read or changed, retry later")))
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
		if l.take() {
			return &capConn{Conn: c, l: l}, nil
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

// awaitRequest waits, for up to d, until c has bytes to read (or its
// client closed it), and reads none of them. An answer that arrives before
// the client has sent its request is one it did not ask for yet: Go's
// http.Transport, for one, drops it as "unsolicited" and fails the request.
//
// The wait asks the socket (pending), not the poller alone: Go's poller is
// edge-triggered and forgets a readiness that came before the wait began,
// so a request that arrived between the accept and the wait would be
// noticed only at the deadline. (Measured: a thousand refusals a run, each
// held the full 5 s while its request sat in the socket.)
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
	_ = rc.Read(pending) // false: wait until readable, then ask again
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

// take takes a free slot or, with none free, the slot of the connection
// idle longest if it has been idle idleEvictAfter (closed to give it up).
func (l *capListener) take() bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	l.mu.Lock()
	var old *capConn
	// The longest idle first; one whose client has started its next
	// request is passed over (a few at most: past them, refuse).
	for e, n := l.idle.Front(), 0; e != nil && n < 8; e, n = e.Next(), n+1 {
		cc := e.Value.(*capConn)
		if time.Since(cc.idleSince) < idleEvictAfter {
			break
		}
		if !cc.heard.Load() && !cc.sending() {
			old = cc
			l.idle.Remove(e)
			old.idleAt = nil
			break
		}
	}
	l.mu.Unlock()
	if old == nil {
		return false
	}
	l.evicted.Inc()
	_ = old.Close() // its slot is back when Close returns
	select {
	case l.slots <- struct{}{}:
		return true
	default: // taken by a connection that went past the cap at the same moment
		return false
	}
}

// ConnState is the http.Server hook that tells the connection cap which
// connections are idle between requests (see capListener).
func ConnState(c net.Conn, state http.ConnState) {
	if sc, ok := c.(*sniffConn); ok {
		c = sc.Conn
	}
	cc, ok := c.(*capConn)
	if !ok {
		return
	}
	l := cc.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if cc.idleAt != nil {
		l.idle.Remove(cc.idleAt)
		cc.idleAt = nil
	}
	if state == http.StateIdle {
		cc.heard.Store(false)
		cc.idleSince = time.Now()
		cc.idleAt = l.idle.PushBack(cc)
	}
}

// capConn gives its slot back when it is closed, once.
type capConn struct {
	net.Conn
	l      *capListener
	closed atomic.Bool
	heard  atomic.Bool // the server read bytes since the connection went idle

	idleSince time.Time     // guarded by l.mu
	idleAt    *list.Element // in l.idle while idle; guarded by l.mu
}

func (c *capConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.heard.Store(true)
	}
	return n, err
}

// sending reports whether the client has started its next request and
// the bytes wait in the socket. The server marks a connection active only
// once it has read the request's whole head (heard covers what it read
// before that); closing it in between would lose a request the client
// already sent. What remains is the instant between this check and the
// close.
func (c *capConn) sending() bool {
	ready, _ := netx.Readable(c.Conn)
	return ready
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		<-c.l.slots
	}
	return err
}
