package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// MaxBody is docs/api.md's body limit: larger bodies get 413 body_too_large.
const MaxBody = 65536

const (
	ctxLogger = "shop.logger"
	ctxQuiet  = "shop.quiet" // set: the access log writes at debug
	ctxBody   = "shop.body"
)

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// requestID takes a sane X-Request-ID from the client or makes one, echoes it
// and keeps it for the request's logger, which is built only when something
// is logged (most requests of a sale log nothing at info).
func requestID(base *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		id := c.GetHeader("X-Request-Id") // spelled canonical: X-Request-ID is made anew on every look-up
		if !requestIDPattern.MatchString(id) {
			var b [12]byte
			var h [2 * len(b)]byte
			_, _ = rand.Read(b[:])
			hex.Encode(h[:], b[:])
			id = string(h[:])
		}
		c.Writer.Header()["X-Request-Id"] = []string{id} // canonical, as Set would store it, without making it anew
		c.Set(ctxLogger, &requestLog{base: base, id: id, ctx: c.Request.Context()})
		c.Next()
	}
}

// requestLog is a request's logger, made on first use.
type requestLog struct {
	base *slog.Logger
	id   string
	ctx  context.Context // the request's, for the id of its sampled trace
	l    *slog.Logger
}

func (r *requestLog) logger() *slog.Logger {
	if r.l == nil {
		r.l = r.base.With("request_id", r.id)
		if trace := traceID(r.ctx); trace != "" {
			r.l = r.l.With("trace_id", trace)
		}
	}
	return r.l
}

func logger(c *gin.Context) *slog.Logger {
	if l, ok := c.Get(ctxLogger); ok {
		return l.(*requestLog).logger()
	}
	return slog.Default()
}

// logEnabled reports whether the request's logger would write at level.
func logEnabled(c *gin.Context, level slog.Level) bool {
	if l, ok := c.Get(ctxLogger); ok {
		return l.(*requestLog).base.Enabled(c.Request.Context(), level)
	}
	return slog.Default().Enabled(c.Request.Context(), level)
}

type httpMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec

	mu     sync.RWMutex
	series map[seriesKey]httpSeries
}

// seriesKey names one request counter; its latency histogram drops status.
type seriesKey struct {
	method, route string
	status        int
}

type httpSeries struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "shop", Name: "http_requests_total", Help: "HTTP requests by route, method and status.",
		}, []string{"method", "route", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "shop", Name: "http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route"}),
		series: map[seriesKey]httpSeries{},
	}
	reg.MustRegister(m.requests, m.latency)
	return m
}

// of returns k's series, looked up in the vectors once: WithLabelValues
// hashes and checks the label values on every call. The keys are bounded
// (route templates, methodLabel, the statuses the shop answers), as the
// vectors' series are.
func (m *httpMetrics) of(k seriesKey) httpSeries {
	m.mu.RLock()
	s, ok := m.series[k]
	m.mu.RUnlock()
	if ok {
		return s
	}
	s = httpSeries{m.requests.WithLabelValues(k.method, k.route, strconv.Itoa(k.status)), m.latency.WithLabelValues(k.method, k.route)}
	m.mu.Lock()
	m.series[k] = s
	m.mu.Unlock()
	return s
}

// accessLog logs each request once and records its metrics. Health and
// metrics scrapes and successful reads are logged at debug only. With
// tracing off (traced false) no request has a trace to link its latency
// to, so none is looked for.
func accessLog(m *httpMetrics, traced bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := c.FullPath()
		if route == "" {
			route = "unmatched"
		}
		status := c.Writer.Status()
		elapsed := time.Since(start)
		method := methodLabel(c.Request.Method)
		s := m.of(seriesKey{method, route, status})
		s.requests.Inc()
		if traced {
			observe(c.Request.Context(), s.latency, elapsed.Seconds())
		} else {
			s.latency.Observe(elapsed.Seconds())
		}
		if status < http.StatusInternalServerError && !logEnabled(c, slog.LevelInfo) {
			return // below 500 the line is at info or debug: written by neither
		}
		level := slog.LevelInfo
		switch {
		case route == "/healthz" || route == "/readyz" || route == "/metrics":
			level = slog.LevelDebug
		case status >= 500:
			level = slog.LevelWarn
		case strings.HasPrefix(c.Request.UserAgent(), "shop-loadgen/"):
			// Simulated buyers (loadgen.UserAgent: a lab race, the
			// harness), thousands per run; a race logs its start and end.
			level = slog.LevelDebug
		case (c.Request.Method == http.MethodGet || c.Request.Method == http.MethodHead) && status < 400:
			// Reads that worked, above all the demo page's own polling
			// (products every second, a race every few hundred ms), would
			// bury everything else at info.
			level = slog.LevelDebug
		}
		if c.GetBool(ctxQuiet) {
			level = slog.LevelDebug
		}
		if !logEnabled(c, level) {
			return
		}
		logger(c).Log(c.Request.Context(), level, "http",
			"method", truncate(c.Request.Method, 16), "path", truncate(c.Request.URL.Path, 256), "route", route,
			"status", status, "bytes", c.Writer.Size(), "duration_ms", float64(elapsed.Microseconds())/1000)
	}
}

// recovery turns a panic into a 500 problem after logging it. Panics that
// ran under an idempotency claim have already released it (see idempotency).
func recovery() gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				logger(c).Error("panic", "value", fmt.Sprint(r))
				if !c.Writer.Written() {
					writeError(c, fmt.Errorf("panic: %v", r))
				}
				c.Abort()
			}
		}()
		c.Next()
	}
}

// readBody enforces the body limit before anything else looks at the
// request (docs/api.md: 413 is checked first), counting bytes as they are read so
// chunked bodies are limited too, and keeps the bytes for later stages.
func readBody() gin.HandlerFunc {
	return func(c *gin.Context) {
		if c.Request.Body == http.NoBody { // (most seckill requests)
			c.Next()
			return
		}
		if c.Request.ContentLength > MaxBody {
			writeError(c, newError("body_too_large", fmt.Sprintf("the body must not exceed %d bytes", MaxBody)))
			return
		}
		b, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, MaxBody))
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(c, newError("body_too_large", fmt.Sprintf("the body must not exceed %d bytes", MaxBody)))
			return
		}
		if err != nil {
			writeError(c, newError("invalid_request", "the body could not be read"))
			return
		}
		c.Set(ctxBody, b)
		c.Request.Body = io.NopCloser(bytes.NewReader(b))
		c.Next()
	}
}

func body(c *gin.Context) []byte {
	b, _ := c.Get(ctxBody)
	bb, _ := b.([]byte)
	return bb
}
