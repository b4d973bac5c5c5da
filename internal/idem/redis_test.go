package idem

import (
	"context"
	"crypto/rand"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const defaultTestRedisURL = "redis://127.0.0.1:6379/0"

// testRedis connects to the test Redis (SHOP_TEST_REDIS_URL: a redis://
// URL, or a comma-separated list of Cluster nodes) and returns a key prefix
// of the test's own; its keys are deleted at cleanup. The Redis is shared,
// so tests never flush it.
func testRedis(t testing.TB, tune ...func(*redis.UniversalOptions)) (redis.UniversalClient, string) {
	t.Helper()
	url := os.Getenv("SHOP_TEST_REDIS_URL")
	if url == "" {
		url = defaultTestRedisURL
	}
	o := &redis.UniversalOptions{Addrs: strings.Split(url, ",")}
	if !strings.Contains(url, ",") {
		po, err := redis.ParseURL(url)
		if err != nil {
			t.Fatalf("SHOP_TEST_REDIS_URL=%q: %v (want redis://host:port/db or host:port,host:port for a Cluster)", url, err)
		}
		o = &redis.UniversalOptions{Addrs: []string{po.Addr}, DB: po.DB, Username: po.Username, Password: po.Password}
	}
	for _, f := range tune {
		f(o)
	}
	rdb := redis.NewUniversalClient(o)
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
		each := func(ctx context.Context, c *redis.Client) error { return deletePrefix(ctx, c, prefix) }
		var err error
		if cc, ok := rdb.(*redis.ClusterClient); ok {
			err = cc.ForEachMaster(ctx, each)
		} else {
			err = each(ctx, rdb.(*redis.Client))
		}
		if err != nil {
			t.Errorf("cleanup scan: %v", err)
		}
		rdb.Close()
	})
	return rdb, prefix
}

// deletePrefix deletes one node's keys under prefix (a Cluster's SCAN
// sees one node, so cleanup runs it on every master).
func deletePrefix(ctx context.Context, rdb *redis.Client, prefix string) error {
	var cursor uint64
	for range 1000 {
		keys, next, err := rdb.Scan(ctx, cursor, prefix+"*", 500).Result()
		if err != nil {
			return err
		}
		for _, k := range keys {
			rdb.Del(ctx, k)
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
	return nil
}
