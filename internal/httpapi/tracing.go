package httpapi

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seckill-lab/shop/internal/tracing"
)

// Tracing is the OpenTelemetry tracing the server's requests join: a span
// per request, its parent taken from a W3C traceparent header (nginx, k6).
// A nil *Tracing is off: nothing is wrapped.
type Tracing struct {
	Provider   trace.TracerProvider
	Propagator propagation.TextMapPropagator
}

// traced wraps the router in otelhttp (the OpenTelemetry project's own HTTP
// instrumentation, kept in step with its semantic conventions; otelgin
// lags it and was marked for deprecation). The span is named by the method
// until gin has routed the request; routeSpan then names it by the route
// template. Scrapes and probes are not traced.
func traced(h http.Handler, t *Tracing) http.Handler {
	if t == nil {
		return h
	}
	return otelhttp.NewHandler(h, "shop",
		otelhttp.WithTracerProvider(t.Provider), otelhttp.WithPropagators(t.Propagator),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }),
		otelhttp.WithFilter(func(r *http.Request) bool {
			switch r.URL.Path {
			case "/metrics", "/healthz", "/readyz":
				return false
			}
			return true
		}))
}

// routeSpan names the request's span "METHOD /route/:template", as the
// HTTP semantic conventions ask (a path with ids in it would make every
// request a name of its own), and sets http.route.
func routeSpan(c *gin.Context) {
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	s := trace.SpanFromContext(c.Request.Context())
	s.SetName(c.Request.Method + " " + route)
	s.SetAttributes(attribute.String("http.route", route))
	c.Next()
}

const ctxTiming = "shop.timing"

// timed gives the request a Server-Timing sheet, which the phases of its
// order (rate limit, batch queue, lock wait, transaction) fill and its
// answer carries (response.write).
func timed(c *gin.Context) {
	ctx, sheet := tracing.WithSheet(c.Request.Context())
	c.Request = c.Request.WithContext(ctx)
	c.Set(ctxTiming, sheet)
	c.Next()
}

// serverTiming is the Server-Timing header of the request's answer: empty
// when it has no sheet or none of its phases took place (a sold-out
// answer from memory).
func serverTiming(c *gin.Context) string {
	v, ok := c.Get(ctxTiming)
	if !ok {
		return ""
	}
	return v.(*tracing.Sheet).Header()
}

// traceID is the id of ctx's trace when it is sampled (a trace a backend
// holds); empty otherwise.
func traceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsSampled() {
		return ""
	}
	return sc.TraceID().String()
}

// observe records v on o, with the sampled trace of ctx as its exemplar,
// so a latency bucket links to a request that landed in it.
func observe(ctx context.Context, o prometheus.Observer, v float64) {
	if id := traceID(ctx); id != "" {
		if eo, ok := o.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(v, prometheus.Labels{"trace_id": id})
			return
		}
	}
	o.Observe(v)
}
