// Package testenv gives integration tests real services: a fresh MySQL
// database and a private Redis key namespace per test, and a shop run
// in-process on them (StartShop).
//
// Discovery order: SHOP_TEST_MYSQL_DSN / SHOP_TEST_REDIS_URL when set; else
// the local defaults (root@127.0.0.1:3306, 127.0.0.1:6379) when they answer;
// else testcontainers-go (MySQL 8, Redis 7) when a Docker engine answers;
// else the test fails with a message saying how to provide the services.
// Tests never skip because a service is missing.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	tcmysql "github.com/testcontainers/testcontainers-go/modules/mysql"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

const (
	defaultMySQL = "root@tcp(127.0.0.1:3306)/?parseTime=true&loc=UTC&charset=utf8mb4"
	defaultRedis = "redis://127.0.0.1:6379/0"
	howTo        = "start MariaDB/MySQL and Redis locally (see DEVELOPERS.md / .ci/run), " +
		"or set SHOP_TEST_MYSQL_DSN (server DSN, no database) and SHOP_TEST_REDIS_URL, or run a Docker engine for testcontainers"
)

var (
	once                sync.Once
	serverDSN, redisURL string
	discoverErr         error
)

func discover() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	serverDSN = os.Getenv("SHOP_TEST_MYSQL_DSN")
	redisURL = os.Getenv("SHOP_TEST_REDIS_URL")
	if serverDSN == "" && answers("127.0.0.1:3306") {
		serverDSN = defaultMySQL
	}
	if redisURL == "" && answers("127.0.0.1:6379") {
		redisURL = defaultRedis
	}
	if serverDSN != "" && redisURL != "" {
		return
	}
	if !dockerAnswers(ctx) {
		var missing []string
		if serverDSN == "" {
			missing = append(missing, "MySQL (127.0.0.1:3306 does not answer)")
		}
		if redisURL == "" {
			missing = append(missing, "Redis (127.0.0.1:6379 does not answer)")
		}
		discoverErr = fmt.Errorf("testenv: no %s and no Docker engine: %s", strings.Join(missing, " and no "), howTo)
		return
	}
	if serverDSN == "" {
		c, err := tcmysql.Run(ctx, "mysql:8.0", tcmysql.WithDatabase("shop"), tcmysql.WithUsername("root"), tcmysql.WithPassword("test"))
		if err != nil {
			discoverErr = fmt.Errorf("testenv: start MySQL container: %w (%s)", err, howTo)
			return
		}
		dsn, err := c.ConnectionString(ctx, "parseTime=true", "loc=UTC")
		if err != nil {
			discoverErr = err
			return
		}
		cfg, _ := gomysql.ParseDSN(dsn)
		cfg.DBName = ""
		serverDSN = cfg.FormatDSN()
	}
	if redisURL == "" {
		c, err := tcredis.Run(ctx, "redis:7")
		if err != nil {
			discoverErr = fmt.Errorf("testenv: start Redis container: %w (%s)", err, howTo)
			return
		}
		redisURL, discoverErr = c.ConnectionString(ctx)
	}
}

func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func dockerAnswers(ctx context.Context) bool {
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false
	}
	defer p.Close()
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return p.Health(hctx) == nil
}

func services(t testing.TB) {
	t.Helper()
	once.Do(discover)
	if discoverErr != nil {
		t.Fatal(discoverErr)
	}
}

// Random returns n random hex bytes, for names.
func Random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// MySQL creates a fresh database for the test, dropped at cleanup, and
// returns a DSN for it.
func MySQL(t testing.TB) string {
	t.Helper()
	services(t)
	name := "shoptest_" + Random(6)
	admin, err := sql.Open("mysql", serverDSN)
	if err != nil {
		t.Fatalf("testenv: %v (%s)", err, howTo)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatalf("testenv: create database at %s: %v (%s)", redactDSN(serverDSN), err, howTo)
	}
	t.Cleanup(func() {
		a, err := sql.Open("mysql", serverDSN)
		if err != nil {
			return
		}
		defer a.Close()
		_, _ = a.Exec("DROP DATABASE IF EXISTS " + name)
	})
	cfg, err := gomysql.ParseDSN(serverDSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = name
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	return cfg.FormatDSN()
}

// Redis returns the test Redis URL and a key prefix private to this test;
// keys under the prefix are deleted at cleanup. Tests must not FLUSHALL the
// shared server: start a private one with RedisServer for that.
//
// SHOP_TEST_REDIS_URL may be a comma-separated list of Cluster nodes (as
// printed by `go run ./cmd/topo cluster`); then the URL returned is
// that list, which platform.OpenRedis and SHOP_REDIS_URL accept as is, and
// RedisClient gives a cluster client. CI runs the Redis-using packages once
// that way, so a script whose keys straddle slots (CROSSSLOT) fails a test.
func Redis(t testing.TB) (url, prefix string) {
	t.Helper()
	services(t)
	prefix = "t" + Random(5) + ":"
	c, err := newRedisClient(redisURL)
	if err != nil {
		t.Fatalf("testenv: SHOP_TEST_REDIS_URL: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		t.Fatalf("testenv: redis %s does not answer: %v (%s)", redisURL, err, howTo)
	}
	t.Cleanup(func() {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := DeletePrefix(ctx, c, prefix); err != nil {
			t.Logf("testenv: delete keys %s*: %v", prefix, err)
		}
	})
	return redisURL, prefix
}

// IsCluster reports whether url names Cluster nodes rather than one server.
func IsCluster(url string) bool { return strings.Contains(url, ",") }

// newRedisClient opens a redis:// URL, or a Cluster from a node list.
func newRedisClient(url string) (redis.UniversalClient, error) {
	if IsCluster(url) {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(url, ","), ClusterStateReloadInterval: time.Second}), nil
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(opt), nil
}

// DeletePrefix deletes every key under prefix; on a Cluster it scans each
// master, since SCAN sees one node's keys only.
func DeletePrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	each := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		return iter.Err()
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, each)
	case *redis.Client:
		return each(ctx, c)
	}
	return fmt.Errorf("testenv: cannot scan a %T", rdb)
}

func redactDSN(dsn string) string {
	if i := strings.LastIndex(dsn, "@"); i > 0 {
		if j := strings.Index(dsn[:i], ":"); j > 0 {
			return dsn[:j] + ":***" + dsn[i:]
		}
	}
	return dsn
}

// RedisClient is Redis with a client already made (a cluster client when
// SHOP_TEST_REDIS_URL lists Cluster nodes); closed at cleanup.
func RedisClient(t testing.TB) (client redis.UniversalClient, prefix string) {
	t.Helper()
	url, prefix := Redis(t)
	client, err := newRedisClient(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client, prefix
}
