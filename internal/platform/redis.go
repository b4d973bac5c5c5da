package platform

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Redis is the shop's Redis client and, in the embedded default, the
// in-process server behind it.
type Redis struct {
	redis.UniversalClient
	Embedded *miniredis.Miniredis // nil unless running the demo default
	Desc     string
	shared   *sharedTrips // PerRequest's face; nil: off
}

// OpenRedis connects to rawURL: a redis:// URL, or a comma-separated address
// list (Cluster, or Sentinel when master is set). Empty starts an in-process
// Redis listening on embeddedAddr so other local processes can share it.
func OpenRedis(rawURL, master, embeddedAddr string) (*Redis, error) {
	// A Redis that is down must cost a request milliseconds, not seconds:
	// go-redis would otherwise dial 5 times per attempt and retry each
	// command 3 times (about 2 s per call, several calls per request) before
	// the request can answer 503. One retry still rides out a dropped
	// connection. During a failover every wait is bounded twice: by these
	// timeouts, and by the request's own deadline (SHOP_REQUEST_TIMEOUT),
	// which go-redis only honours with ContextTimeoutEnabled; without it a
	// request whose deadline passed still waited out the socket timeouts,
	// a pool wait (ReadTimeout + 1 s by default) and the cluster's three
	// redirects. Work that must finish (a lock release, a gate settle) runs
	// on a context without a deadline and keeps the socket timeouts.
	timeouts := func(o *redis.UniversalOptions) {
		o.DialTimeout = time.Second
		o.ReadTimeout = time.Second
		o.WriteTimeout = time.Second
		o.PoolSize = 64
		o.PoolTimeout = time.Second
		o.MaxRetries = 1
		o.MinRetryBackoff, o.MaxRetryBackoff = 8*time.Millisecond, 100*time.Millisecond
		o.MaxRedirects = 1
		o.DialerRetries = 1
		o.ContextTimeoutEnabled = true
	}
	switch {
	case rawURL == "":
		m := miniredis.NewMiniRedis()
		// miniredis only counts TTLs down when asked to; without this, lock
		// leases, idempotency leases and form tokens would never expire.
		m.ClockTTL(true)
		if err := m.StartAddr(embeddedAddr); err != nil {
			return nil, fmt.Errorf("SHOP_EMBEDDED_REDIS_ADDR: start in-process redis on %s: %w", embeddedAddr, err)
		}
		o := &redis.UniversalOptions{Addrs: []string{m.Addr()}}
		timeouts(o)
		return &Redis{UniversalClient: redis.NewClient(o.Simple()), Embedded: m, Desc: "in-process redis://" + m.Addr()}, nil
	case strings.Contains(rawURL, ","):
		o := &redis.UniversalOptions{Addrs: strings.Split(rawURL, ","), MasterName: master}
		timeouts(o)
		if master != "" {
			return &Redis{UniversalClient: redis.NewUniversalClient(o), Desc: "sentinel master " + master + " " + rawURL}, nil
		}
		// go-redis reloads the slot map on MOVED, not when a master stops
		// answering; with its 60 s default the shop would dial a dead master
		// for up to a minute after the cluster promoted its replica.
		co := o.Cluster()
		co.ClusterStateReloadInterval = time.Second
		return &Redis{UniversalClient: redis.NewClusterClient(co), Desc: "cluster " + rawURL}, nil
	default:
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("SHOP_REDIS_URL: %w", err)
		}
		uo := &redis.UniversalOptions{}
		timeouts(uo)
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolSize, opt.PoolTimeout = uo.DialTimeout, uo.ReadTimeout, uo.WriteTimeout, uo.PoolSize, uo.PoolTimeout
		opt.MaxRetries, opt.MinRetryBackoff, opt.MaxRetryBackoff, opt.DialerRetries = uo.MaxRetries, uo.MinRetryBackoff, uo.MaxRetryBackoff, uo.DialerRetries
		opt.ContextTimeoutEnabled = uo.ContextTimeoutEnabled
		return &Redis{UniversalClient: redis.NewClient(opt), Desc: redactURL(rawURL)}, nil
	}
}

// ShareRoundTrips turns on the face PerRequest returns: the per-request
// calls of concurrent requests are written to Redis together and share one
// round trip (a pipeline), instead of one round trip (a write, a wake-up
// and a read on both sides) per call. Under a crowd that halves what these
// calls cost the shop and Redis; a lone call still goes out at once. Not
// on a Cluster, where one shard's outage would stall every shared trip
// (sharedTrips), nor on the in-process Redis of the demo, whose Lua
// interpreter runs a pipeline of rate-limit scripts slowly enough to meet
// the 1 s read timeout under a test's load; it reports whether it turned
// sharing on.
func (r *Redis) ShareRoundTrips() bool {
	if _, cluster := r.UniversalClient.(*redis.ClusterClient); cluster || r.Embedded != nil {
		return false
	}
	r.shared = newSharedTrips(r.UniversalClient)
	return true
}

// PerRequest is the client for the calls every request makes (rate limits,
// processed markers): the face that shares round trips when it is on, else
// the client itself. Locks, leases and pub/sub use the client.
func (r *Redis) PerRequest() redis.UniversalClient {
	if r.shared != nil {
		return r.shared
	}
	return r.UniversalClient
}

// Close closes the client and stops the in-process server.
func (r *Redis) Close() error {
	err := r.UniversalClient.Close()
	if r.Embedded != nil {
		r.Embedded.Close()
	}
	return err
}

// LogBackends says at start which backends are in use.
func LogBackends(log *slog.Logger, db *DB, r *Redis, c Config) {
	if db.Dialect == DialectSQLite {
		log.Warn("database: embedded SQLite file, for demos only; set SHOP_MYSQL_DSN for MySQL/MariaDB", "path", c.SQLitePath)
	} else {
		log.Info("database: MySQL/MariaDB", "dsn", redactDSN(c.MySQLDSN))
	}
	if r.Embedded != nil {
		log.Warn("redis: in-process miniredis, for demos only; set SHOP_REDIS_URL for a real Redis", "url", "redis://"+r.Embedded.Addr())
	} else {
		log.Info("redis: " + r.Desc)
	}
}

// redactURL hides the user information of a redis:// URL. The last '@'
// ends it: a password may hold '@' itself, and must not show in part.
func redactURL(u string) string {
	if i := strings.LastIndex(u, "@"); i > 0 {
		if j := strings.Index(u, "://"); j > 0 && j < i {
			return u[:j+3] + "***" + u[i:]
		}
	}
	return u
}

func redactDSN(dsn string) string {
	if i := strings.LastIndex(dsn, "@"); i > 0 {
		if j := strings.Index(dsn[:i], ":"); j > 0 {
			return dsn[:j] + ":***" + dsn[i:]
		}
	}
	return dsn
}
