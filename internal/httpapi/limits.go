package httpapi

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-redis/redis_rate/v10"

	"github.com/seckill-lab/shop/internal/tracing"
)

// Limits are the HTTP layer's abuse limits of README's "Limits and abuse"
// (the unpaid-units cap is the order package's). A zero
// redis_rate.Limit turns that limit off; a nil Limiter turns all rate limits
// off.
type Limits struct {
	// Limiter keeps the rate-limit state in Redis (GCRA), so every instance
	// shares it.
	Limiter   *redis_rate.Limiter
	KeyPrefix string
	Orders    redis_rate.Limit // per user: seckill and regular orders
	Pay       redis_rate.Limit // per user: payments
	FormToken redis_rate.Limit // per user: form tokens
	Login     redis_rate.Limit // per client address: demo login
	// RequestTimeout bounds a handler's time; its context ends then (0: none).
	RequestTimeout time.Duration
	// TrustedProxies may name the client in X-Forwarded-For; none by default,
	// so a client cannot pick its own rate-limit bucket.
	TrustedProxies []string
}

// allow spends one request of the caller's class budget and reports whether
// it may go on; when not, the 429 is written. The RateLimit-* headers go on
// every answer of a limited route. A Redis that cannot answer lets the
// request through: the limit protects the dependencies, and a request that
// needs Redis will meet the outage itself (503), while one the database can
// answer still should be.
func (a *api) allow(c *gin.Context, class string, lim redis_rate.Limit, subject string) bool {
	return a.allowWith(c.Request.Context(), c, class, lim, subject)
}

// allowWith is allow asking Redis with ctx (the request's, carrying what
// may ride along with the limiter's round trip).
func (a *api) allowWith(ctx context.Context, c *gin.Context, class string, lim redis_rate.Limit, subject string) bool {
	if a.limits.Limiter == nil || lim.IsZero() {
		return true
	}
	rctx, span := tracing.Begin(ctx, tracing.RateLimit)
	res, err := a.limits.Limiter.Allow(rctx, a.limits.KeyPrefix+"rl:"+class+":"+subject, lim)
	span.End(err)
	if err != nil {
		logger(c).Debug("rate limit not checked: Redis did not answer", "class", class, "err", err)
		return true
	}
	// Keys as Header.Set stores (and writes) them, canonical, spelled out:
	// Set would make each anew on every order (RateLimit-* is not canonical).
	h := c.Writer.Header()
	h["Ratelimit-Limit"] = []string{strconv.Itoa(lim.Burst)}
	h["Ratelimit-Remaining"] = []string{strconv.Itoa(res.Remaining)}
	h["Ratelimit-Reset"] = []string{ceilSeconds(res.ResetAfter)}
	if res.Allowed > 0 {
		return true
	}
	h.Set("Retry-After", ceilSeconds(res.RetryAfter))
	writeError(c, newError("rate_limited", fmt.Sprintf("%s limit of %d requests per %s (bursts of %d) reached; retry after Retry-After seconds",
		class, lim.Rate, lim.Period, lim.Burst)))
	return false
}

// ceilSeconds renders d as whole seconds, at least 1 (headers count seconds).
func ceilSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

// userSubject is the rate-limit subject of the calling user.
func userSubject(c *gin.Context) string { return strconv.FormatInt(who(c).UserID, 10) }

// orderNoPattern is what an order number can be: a kind letter and 26 to 33
// base32 characters (order.SeckillNo, order.RegularNo, the lab's random
// ones). Anything else names no order and is 404 before any work, above all
// before an idempotency claim is stored for it.
var orderNoPattern = regexp.MustCompile(`^[A-Z][A-Z2-7]{26,33}$`)

// pathOrderNo reads the order_no path parameter.
func pathOrderNo(c *gin.Context) (string, error) {
	no := c.Param("order_no")
	if !orderNoPattern.MatchString(no) {
		return "", newError("not_found", "no such order")
	}
	return no, nil
}

// requestTimeout ends a request's context after d, so a stuck database or
// Redis call gives up (503 unavailable) instead of holding the request.
func requestTimeout(d time.Duration) gin.HandlerFunc {
	return func(c *gin.Context) {
		if d <= 0 {
			c.Next()
			return
		}
		ctx, cancel := context.WithTimeout(c.Request.Context(), d)
		defer cancel()
		c.Request = c.Request.WithContext(ctx)
		c.Next()
	}
}

// methodLabel is the method as a metrics label: the standard methods by
// name, anything a client made up as OTHER, so made-up methods cannot grow
// the series without bound.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// truncate cuts client-chosen text (a method, a path) for logs and details.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "...(" + strconv.Itoa(len(s)) + " bytes)"
}

// noSniff keeps browsers from reading an answer as anything but its
// declared Content-Type.
func noSniff(c *gin.Context) {
	c.Header("X-Content-Type-Options", "nosniff")
	c.Next()
}
