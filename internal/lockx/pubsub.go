package lockx

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// waiter is one Acquire call waiting for a key. notify holds at most one
// pending wake-up.
type waiter struct {
	notify chan struct{}
}

// hub multiplexes all waiters of a Client over one pub/sub connection. Each
// lock key has a channel that the release script PUBLISHes to; the hub
// subscribes to a channel while someone waits on it (and for a short linger
// after, so hot keys do not churn SUBSCRIBE/UNSUBSCRIBE).
//
// A release message wakes one waiter, oldest first: only one of them can win,
// so waking all would turn every handoff into a stampede of attempts. A woken
// waiter that loses to a newcomer does not lose its turn: the newcomer's
// release wakes it again. A waiter that leaves with an unused wake-up passes it
// on. Lost messages and expiries are covered by each waiter's backoff timer.
//
// SUBSCRIBE/UNSUBSCRIBE are sent by the hub goroutine only, in the order the
// bookkeeping changed, so the server's view and ours cannot cross.
type hub struct {
	rdb    redis.UniversalClient
	log    *slog.Logger
	linger time.Duration

	mu      sync.Mutex
	ps      *redis.PubSub
	subs    map[string]*sub
	ops     []subOp
	kick    chan struct{}
	stopped chan struct{}
	closed  bool

	wakeups atomic.Int64 // release messages delivered to a waiter (tests)
}

type sub struct {
	waiters   []*waiter
	pending   int // SUBSCRIBEs sent and not yet confirmed
	ready     chan struct{}
	isReady   bool
	idleSince time.Time
}

type subOp struct {
	subscribe bool
	channel   string
}

const hubLinger = 2 * time.Second

func newHub(rdb redis.UniversalClient, log *slog.Logger) *hub {
	return &hub{rdb: rdb, log: log, linger: hubLinger, subs: make(map[string]*sub), kick: make(chan struct{}, 1)}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (h *hub) watch(channel string, w *waiter) (<-chan struct{}, func(bool)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return closedChan, func(bool) {}
	}
	if h.ps == nil {
		h.ps = h.rdb.Subscribe(context.Background())
		h.stopped = make(chan struct{})
		msgs := h.ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
		go h.loop(msgs)
	}
	s := h.subs[channel]
	if s == nil {
		s = &sub{ready: make(chan struct{}), pending: 1}
		h.subs[channel] = s
		h.ops = append(h.ops, subOp{subscribe: true, channel: channel})
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
	s.waiters = append(s.waiters, w)
	return s.ready, func(obtained bool) { h.unwatch(channel, w, obtained) }
}

func (h *hub) unwatch(channel string, w *waiter, obtained bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.subs[channel]
	if s == nil {
		return
	}
	if i := slices.Index(s.waiters, w); i >= 0 {
		s.waiters = slices.Delete(s.waiters, i, i+1)
	}
	if !obtained {
		select {
		case <-w.notify: // an unused wake-up: pass it on
			h.wakeOne(s)
		default:
		}
	}
	if len(s.waiters) == 0 {
		s.idleSince = time.Now()
	}
}

// wakeOne wakes the oldest waiter that has no wake-up pending. h.mu held.
func (h *hub) wakeOne(s *sub) {
	for _, w := range s.waiters {
		select {
		case w.notify <- struct{}{}:
			h.wakeups.Add(1)
			return
		default:
		}
	}
}

func (h *hub) loop(msgs <-chan any) {
	defer close(h.stopped)
	tick := time.NewTicker(h.linger)
	defer tick.Stop()
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return
			}
			h.dispatch(m)
		case <-h.kick:
			h.flush()
		case <-tick.C:
			h.sweep()
			h.flush()
		}
	}
}

func (h *hub) dispatch(m any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch m := m.(type) {
	case *redis.Message:
		if s := h.subs[m.Channel]; s != nil {
			h.wakeOne(s)
		}
	case *redis.Subscription:
		if m.Kind != "subscribe" {
			return
		}
		s := h.subs[m.Channel]
		if s == nil {
			return
		}
		if s.pending == 0 {
			// A re-subscription after a reconnect: a release may have been
			// published while we were gone, so let one waiter look.
			h.wakeOne(s)
			return
		}
		s.pending--
		if s.pending == 0 && !s.isReady {
			s.isReady = true
			close(s.ready)
		}
	}
}

// sweep queues UNSUBSCRIBE for channels nobody waited on for a linger.
func (h *hub) sweep() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	for ch, s := range h.subs {
		if len(s.waiters) == 0 && s.pending == 0 && now.Sub(s.idleSince) >= h.linger {
			delete(h.subs, ch)
			h.ops = append(h.ops, subOp{channel: ch})
		}
	}
}

// flush sends queued SUBSCRIBE/UNSUBSCRIBE commands in order, batching runs
// of the same kind.
func (h *hub) flush() {
	h.mu.Lock()
	ops := h.ops
	h.ops = nil
	ps := h.ps
	closed := h.closed
	h.mu.Unlock()
	if closed || len(ops) == 0 {
		return
	}
	for len(ops) > 0 {
		n := 1
		for n < len(ops) && ops[n].subscribe == ops[0].subscribe {
			n++
		}
		chans := make([]string, n)
		for i := range n {
			chans[i] = ops[i].channel
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var err error
		if ops[0].subscribe {
			// On error go-redis keeps the channel and subscribes on reconnect.
			err = ps.Subscribe(ctx, chans...)
		} else {
			err = ps.Unsubscribe(ctx, chans...)
		}
		cancel()
		if err != nil {
			h.log.Debug("lockx: pub/sub command failed", "subscribe", ops[0].subscribe, "channels", len(chans), "err", err)
		}
		ops = ops[n:]
	}
}

func (h *hub) close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	ps, stopped := h.ps, h.stopped
	h.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-stopped
	return err
}
