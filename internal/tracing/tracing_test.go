package tracing

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// With no recording span and no sheet (tracing off, a request without
// Server-Timing), the core's one-line calls make nothing at all.
func TestOffCostsNoAllocation(t *testing.T) {
	ctx := context.Background()
	items := []*Rider{{}, {}}
	failed := errors.New("x")
	allocs := testing.AllocsPerRun(100, func() {
		c, s := Begin(ctx, LockWait)
		s.Int("shop.lock.fence", 7)
		s.End(nil)
		_, s = Start(c, "inventory.lock")
		s.End(failed)
		r := Board(ctx)
		r.Leave(nil)
		_, b := Batch(ctx, items, func(r *Rider) *Rider { return r })
		b.End(nil)
		_ = Within(ctx, ctx)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run with tracing off, want 0", allocs)
	}
}

// A batch's span is a child of its first recording request, linked to
// every recording request it carries, and its phases count on every
// request's sheet.
func TestBatchLinksItsRequestsAndFillsTheirSheets(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := tp.Tracer("test")
	var riders []*Rider
	var sheets []*Sheet
	var reqs []trace.Span
	for range 3 {
		ctx, sh := WithSheet(context.Background())
		ctx, req := tr.Start(ctx, "request")
		r := Board(ctx)
		riders, sheets, reqs = append(riders, &r), append(sheets, sh), append(reqs, req)
	}
	ctx, batch := Batch(context.Background(), riders, func(r *Rider) *Rider { return r })
	_, wait := Begin(ctx, LockWait)
	time.Sleep(time.Millisecond)
	wait.End(nil)
	batch.End(nil)
	for _, r := range reqs {
		r.End()
	}

	var got sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "order.batch" {
			got = s
		}
	}
	if got == nil {
		t.Fatal("no order.batch span")
	}
	if got.Parent().SpanID() != reqs[0].SpanContext().SpanID() || len(got.Links()) != 3 {
		t.Errorf("batch parent %v, %d links; want the first request and 3 links", got.Parent().SpanID(), len(got.Links()))
	}
	for i, l := range got.Links() {
		if l.SpanContext.SpanID() != reqs[i].SpanContext().SpanID() {
			t.Errorf("link %d goes to %v, want request %d", i, l.SpanContext.SpanID(), i)
		}
	}
	for i, sh := range sheets {
		h := sh.Header()
		if !strings.Contains(h, `queue;desc="batch queue";dur=`) || !strings.Contains(h, `lock;desc="lock wait";dur=`) || strings.Contains(h, "tx;") {
			t.Errorf("sheet %d: Server-Timing %q, want queue and lock only", i, h)
		}
	}
}
