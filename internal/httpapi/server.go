// Package httpapi is the shop's HTTP face: the gin router, handlers, auth,
// and problem+json errors. It is the only package that imports gin.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seckill-lab/shop/internal/audit"
	"github.com/seckill-lab/shop/internal/idem"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/payment"
)

// Pinger is a dependency /readyz checks.
type Pinger interface {
	Ping(ctx context.Context) error
}

// PingFunc adapts a function to Pinger.
type PingFunc func(ctx context.Context) error

// Ping calls f.
func (f PingFunc) Ping(ctx context.Context) error { return f(ctx) }

// Deps is everything the handlers need, passed in explicitly.
type Deps struct {
	Log      *slog.Logger
	Registry *prometheus.Registry
	Ready    map[string]Pinger // name -> check, for /readyz
	Version  string

	AdminToken string
	AuthSecret string
	TokenTTL   time.Duration
	DemoLogin  bool

	Products *inventory.Service
	Orders   *order.Service
	// Queued is the queued seckill mode (SHOP_SECKILL_MODE=queue); nil: sync.
	Queued   *order.Queued
	Payments *payment.Service
	Idem     *idem.Store
	Tokens   *idem.Tokens
	Audit    func(ctx context.Context, o audit.Options) (audit.Report, error)
	// NoIdempotency is the LAB switch that turns Idempotency-Key handling off.
	NoIdempotency bool

	// LabRoutes serves the admin-only lab routes (SHOP_LAB_ROUTES).
	LabRoutes bool
	// LabSwitches names the unsafe settings in force, for GET /api/v1/admin/lab/info.
	LabSwitches []string
	// SelfURL is this instance's own base URL, known once it listens; lab
	// races send their buyers there.
	SelfURL func() string
	// Background ends when the instance stops; lab races, and the look-ups
	// that settle an outcome_unknown, run under it.
	Background context.Context

	// Limits are the rate limits, the unpaid-units cap and the request
	// timeout (README "Limits and abuse").
	Limits Limits

	// Tracing is OpenTelemetry tracing; nil: off.
	Tracing *Tracing
}

// New builds the router with every route of the API.
func New(d Deps) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.ContextWithFallback = true
	m := newHTTPMetrics(d.Registry)
	// Trust no proxy unless told: X-Forwarded-For from anyone else must not
	// choose the client address a rate limit counts.
	if err := r.SetTrustedProxies(d.Limits.TrustedProxies); err != nil {
		d.Log.Error("SHOP_TRUSTED_PROXIES: trusting no proxy", "err", err)
		_ = r.SetTrustedProxies(nil)
	}
	if d.Tracing != nil {
		r.Use(routeSpan)
	}
	r.Use(requestID(d.Log), noSniff, accessLog(m, d.Tracing != nil), recovery(), ambiguousLength(), requestTimeout(d.Limits.RequestTimeout), readBody())
	r.NoRoute(func(c *gin.Context) {
		writeError(c, newError("not_found", "no route "+truncate(c.Request.URL.Path, 256)))
	})
	r.NoMethod(func(c *gin.Context) {
		writeError(c, newError("method_not_allowed", truncate(c.Request.Method, 16)+" is not allowed on "+truncate(c.Request.URL.Path, 256)))
	})
	a := &api{
		auth:     newAuthn([]byte(d.AuthSecret), []byte(d.AdminToken), d.TokenTTL),
		products: d.Products, orders: d.Orders, payments: d.Payments, idem: d.Idem, tokens: d.Tokens, audit: d.Audit, audits: newAuditMetrics(d.Registry),
		cursors: cursors{key: []byte("cursor:" + d.AuthSecret)}, noIdem: d.NoIdempotency, demoLogin: d.DemoLogin,
		limits: d.Limits, bg: d.Background, queued: d.Queued,
	}
	if a.bg == nil {
		a.bg = context.Background()
	}
	// OpenMetrics, so the latency histograms' exemplars (trace ids) are
	// served; a scraper that asks for the text format still gets it.
	routes(r, d, a, promhttp.HandlerFor(d.Registry, promhttp.HandlerOpts{Registry: d.Registry, EnableOpenMetrics: true}))
	return traced(r, d.Tracing)
}

func healthz(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) }

// readyz answers within under a second whatever the dependencies do.
func readyz(checks map[string]Pinger) gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx, cancel := context.WithTimeout(c.Request.Context(), 900*time.Millisecond)
		defer cancel()
		type result struct {
			name string
			err  error
		}
		ch := make(chan result, len(checks))
		for name, p := range checks {
			go func() { ch <- result{name, p.Ping(ctx)} }()
		}
		status := map[string]string{}
		failed := ""
		for range checks {
			select {
			case r := <-ch:
				status[r.name] = "ok"
				if r.err != nil {
					status[r.name] = r.err.Error()
					failed = r.name
				}
			case <-ctx.Done():
				failed = "timeout"
			}
			if failed == "timeout" {
				break
			}
		}
		if failed != "" {
			writeError(c, newError("not_ready", "dependency not ready: "+failed))
			return
		}
		c.JSON(http.StatusOK, gin.H{"status": "ready", "checks": status})
	}
}
