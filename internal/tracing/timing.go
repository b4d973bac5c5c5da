package tracing

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"
)

// Phase is a stretch of a purchase that its Server-Timing answer names.
type Phase uint8

// The phases of an order, in the order they happen.
const (
	RateLimit Phase = iota // the per-user rate limiter's Redis call
	Queue                  // waiting for the batch that carries the order
	LockWait               // the batch waiting for the product (or bucket) lock
	Tx                     // the batch's transaction, retries included
	phases
)

var phaseInfo = [phases]struct{ metric, desc, span string }{
	RateLimit: {"ratelimit", "rate limit", "shop.ratelimit"},
	Queue:     {"queue", "batch queue", "order.queue"},
	LockWait:  {"lock", "lock wait", "inventory.lock.wait"},
	Tx:        {"tx", "transaction", "order.batch.tx"},
}

func (p Phase) span() string { return phaseInfo[p].span }

// Sheet is one request's Server-Timing: the time of each phase, summed (a
// batch may wait for several bucket locks). Safe for concurrent use: a
// batch writes it from its leader.
type Sheet struct {
	d [phases]atomic.Int64
}

type sheetsKey struct{}

// WithSheet returns ctx carrying a new sheet, which the phases begun under
// ctx (or carried from it into a batch, Board) fill.
func WithSheet(ctx context.Context) (context.Context, *Sheet) {
	sh := &Sheet{}
	return context.WithValue(ctx, sheetsKey{}, []*Sheet{sh}), sh
}

func sheetsOf(ctx context.Context) []*Sheet {
	s, _ := ctx.Value(sheetsKey{}).([]*Sheet)
	return s
}

func (s *Sheet) add(p Phase, d time.Duration) { s.d[p].Add(int64(d)) }

// Add adds d to phase p: for a phase timed outside a span.
func (s *Sheet) Add(p Phase, d time.Duration) {
	if s != nil {
		s.add(p, d)
	}
}

// Header is the Server-Timing header value of the phases that took time,
// in milliseconds (e.g. `queue;desc="batch queue";dur=1.2`); empty when
// none did.
func (s *Sheet) Header() string {
	if s == nil {
		return ""
	}
	var buf [256]byte // every phase's entry fits: one allocation, the string
	b := buf[:0]
	for p := range phases {
		d := s.d[p].Load()
		if d == 0 {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		info := phaseInfo[p]
		b = append(b, info.metric...)
		b = append(b, `;desc="`...)
		b = append(b, info.desc...)
		b = append(b, `";dur=`...)
		b = strconv.AppendFloat(b, float64(d)/1e6, 'f', 3, 64)
	}
	if len(b) == 0 {
		return ""
	}
	return string(b)
}
