package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Rider is an order waiting for the batch that carries it: the request's
// span, and its Queue phase running.
type Rider struct {
	request trace.Span // nil: not recording
	queue   Span
}

// Board begins the Queue phase of an order queued under ctx (its
// request's context).
func Board(ctx context.Context) Rider {
	r := Rider{}
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		r.request = s
	}
	_, r.queue = Begin(ctx, Queue)
	return r
}

// Leave ends the Queue phase of an order that left the queue without a
// batch (its deadline passed).
func (r *Rider) Leave(err error) {
	r.queue.End(err)
	r.queue = Span{}
}

// Batch starts a batch's span on base (the batch's own context, outlasting
// its requests') for the orders it carries, items, and ends their Queue
// phase. The span is a child of the first recording request, linked to
// every recording request it carries, so each purchase's trace shows the
// turn it rode in; the returned context carries the requests' sheets, so
// the phases the batch begins count for each of them. With no request
// recording nor keeping a sheet, base comes back unchanged.
func Batch[T any](base context.Context, items []T, rider func(T) *Rider) (context.Context, Span) {
	var sheets []*Sheet
	var links []trace.Link
	var parent trace.Span
	for _, it := range items {
		r := rider(it)
		sheets = append(sheets, r.queue.sheets...)
		r.Leave(nil)
		if r.request != nil {
			if parent == nil {
				parent = r.request
			}
			links = append(links, trace.Link{SpanContext: r.request.SpanContext()})
		}
	}
	ctx := base
	if sheets != nil {
		ctx = context.WithValue(ctx, sheetsKey{}, sheets)
	}
	if parent == nil {
		return ctx, Span{}
	}
	ctx, s := parent.TracerProvider().Tracer(Scope).Start(trace.ContextWithSpan(ctx, parent), "order.batch",
		trace.WithLinks(links...), trace.WithAttributes(attribute.Int("shop.batch.size", len(items))))
	return ctx, Span{s: s}
}
