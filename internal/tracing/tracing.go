// Package tracing is how the shop's core says where a request's time goes,
// one line per span: OpenTelemetry spans under the request's (when tracing
// is on and the request is sampled) and the phases of its Server-Timing
// answer (always). It knows nothing of shops beyond the phase names, so
// inventory and order call it without importing the HTTP layer.
//
// A span starts only under a parent that records: with tracing off (no
// parent span) or a request sampled out, Start costs a context look-up and
// returns the zero Span, whose methods do nothing.
package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Scope names the shop's tracer, the instrumentation scope of its spans.
const Scope = "github.com/seckill-lab/shop"

// Span is one started span and, for a phase, the Server-Timing sheets its
// time goes to. The zero Span does nothing.
type Span struct {
	s      trace.Span // nil: not recording
	phase  Phase
	start  time.Time
	sheets []*Sheet
}

// Start starts a span named name under ctx's span, if that one records.
func Start(ctx context.Context, name string) (context.Context, Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, Span{}
	}
	ctx, s := parent.TracerProvider().Tracer(Scope).Start(ctx, name)
	return ctx, Span{s: s}
}

// Begin starts phase p: a span named after it (Start) and its time on every
// Server-Timing sheet ctx carries (a request's own, or each of a batch's
// requests').
func Begin(ctx context.Context, p Phase) (context.Context, Span) {
	ctx, s := Start(ctx, p.span())
	if sheets := sheetsOf(ctx); sheets != nil {
		s.phase, s.start, s.sheets = p, time.Now(), sheets
	}
	return ctx, s
}

// Int sets an integer attribute.
func (s Span) Int(key string, v int64) {
	if s.s != nil {
		s.s.SetAttributes(attribute.Int64(key, v))
	}
}

// Str sets a string attribute.
func (s Span) Str(key, v string) {
	if s.s != nil {
		s.s.SetAttributes(attribute.String(key, v))
	}
}

// End ends the span with the outcome of its work (nil: it went well) and
// adds a phase's time to its sheets.
func (s Span) End(err error) {
	if s.sheets != nil {
		d := time.Since(s.start)
		for _, sh := range s.sheets {
			sh.add(s.phase, d)
		}
	}
	if s.s == nil {
		return
	}
	if err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}

// Within returns ctx with from's span as its current span, when that one
// records: for work that must keep ctx's deadline and values (a lock's
// release) but belongs under a span started elsewhere.
func Within(ctx, from context.Context) context.Context {
	s := trace.SpanFromContext(from)
	if !s.IsRecording() {
		return ctx
	}
	return trace.ContextWithSpan(ctx, s)
}
