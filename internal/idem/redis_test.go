package idem

import (
	"context"
	"crypto/rand"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const defaultTestRedisURL = "redis://127.0.0.1:6379/0"

// testRedis connects to the test Redis (SHOP_TEST_REDIS_URL) and returns a
// key prefix of the test's own; its keys are deleted at cleanup. The Redis
// is shared, so tests never flush it.
func testRedis(t testing.TB, tune ...func(*redis.Options)) (*redis.Client, string) {
	t.Helper()
	url := os.Getenv("SHOP_TEST_REDIS_URL")
	if url == "" {
		url = defaultTestRedisURL
	}
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("SHOP_TEST_REDIS_URL=%q: %v (want redis://host:port/db)", url, err)
	}
	for _, f := range tune {
		f(o)
	}
	rdb := redis.NewClient(o)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		t.Fatalf("idem tests need a Redis at %s: %v\n"+
			"start one (redis-server --port 6379) or point SHOP_TEST_REDIS_URL at one, e.g. redis://127.0.0.1:6380/0", url, err)
	}
	prefix := "idemtest:" + rand.Text() + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var cursor uint64
		for range 1000 {
			keys, next, err := rdb.Scan(ctx, cursor, prefix+"*", 500).Result()
			if err != nil {
				t.Errorf("cleanup scan: %v", err)
				break
			}
			if len(keys) > 0 {
				rdb.Del(ctx, keys...)
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
		rdb.Close()
	})
	return rdb, prefix
}
