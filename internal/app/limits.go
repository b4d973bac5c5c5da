package app

import (
	"net/http"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/seckill-lab/shop/internal/httpapi"
	"github.com/seckill-lab/shop/internal/platform"
)

// maxHeaderBytes bounds a request's head (Go's default is 1 MB); a longer
// head is 431.
const maxHeaderBytes = 64 << 10

// newServer is the HTTP server with README's limits: the whole request
// (head and body) read within SHOP_READ_TIMEOUT, so a body trickled byte by
// byte cannot hold a connection before authentication; the answer written
// within SHOP_REQUEST_TIMEOUT and a little more (the handler's own deadline
// comes first and answers 503); idle keep-alive connections closed after
// two minutes.
func newServer(c platform.Config, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(10*time.Second, c.ReadTimeout),
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.RequestTimeout + 5*time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnContext:       httpapi.ConnContext,
		ConnState:         httpapi.ConnState,
	}
}

// limitsOf turns the configuration into the HTTP layer's limits; the rate
// limits keep their state in Redis, shared by every instance.
func limitsOf(c platform.Config, rdb *platform.Redis) httpapi.Limits {
	return httpapi.Limits{
		Limiter:        redis_rate.NewLimiter(rdb.PerRequest()),
		KeyPrefix:      c.RedisPrefix,
		Orders:         limitOf(c.RateOrders),
		Pay:            limitOf(c.RatePay),
		FormToken:      limitOf(c.RateFormTokens),
		Login:          limitOf(c.RateLogin),
		RequestTimeout: c.RequestTimeout,
		TrustedProxies: c.TrustedProxies,
	}
}

func limitOf(r platform.Rate) redis_rate.Limit {
	if r.Off() {
		return redis_rate.Limit{}
	}
	return redis_rate.Limit{Rate: r.N, Period: r.Per, Burst: r.Burst}
}
