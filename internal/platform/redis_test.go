package platform

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/shop/internal/testenv"
)

func TestOpenRedisEmbedded(t *testing.T) {
	t.Parallel()
	r, err := OpenRedis("", "", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	if r.Embedded == nil {
		t.Fatal("no in-process server for the empty URL")
	}
	if !strings.Contains(r.Desc, "in-process") {
		t.Errorf("Desc = %q, want it to say in-process", r.Desc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got, err := r.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v", got, err)
	}
	// Other local processes reach it by its address, like a real server.
	other := redis.NewClient(&redis.Options{Addr: r.Embedded.Addr()})
	defer other.Close()
	if err := r.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := other.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Errorf("second client GET = %q, %v", got, err)
	}

	// TTLs run on the wall clock, as on a real server: a lock lease must end.
	if err := r.Set(ctx, "lease", "v", 100*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := other.Exists(ctx, "lease").Val(); n != 0 {
		t.Error("a key set with PX 100 still exists after 300ms: the in-process Redis does not expire keys")
	}
}

func TestOpenRedisEmbeddedBusyAddressNamesVariable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = OpenRedis("", "", l.Addr().String())
	if err == nil || !strings.Contains(err.Error(), "SHOP_EMBEDDED_REDIS_ADDR") {
		t.Fatalf("err = %v, want it to name SHOP_EMBEDDED_REDIS_ADDR", err)
	}
}

// openRedis opens raw (empty: an in-process Redis), closed when t ends.
func openRedis(t *testing.T, raw string) *Redis {
	t.Helper()
	r, err := OpenRedis(raw, "", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func TestOpenRedisURL(t *testing.T) {
	t.Parallel()
	url, prefix := testenv.Redis(t)
	r := openRedis(t, url)
	if r.Embedded != nil {
		t.Error("an in-process server was started although a URL was given")
	}
	if r.Desc != url {
		t.Errorf("Desc = %q, want %q", r.Desc, url)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING %s: %v", url, err)
	}
	if err := r.Set(ctx, prefix+"k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.Get(ctx, prefix+"k").Result(); got != "v" {
		t.Errorf("GET = %q", got)
	}
}

func TestOpenRedisDescriptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		url, master, want, hidden string
	}{
		{"redis://:s3cret@127.0.0.1:1/0", "", "redis://***@127.0.0.1:1/0", "s3cret"},
		{"redis://user:pa@ssword-tail@127.0.0.1:1/0", "", "redis://***@127.0.0.1:1/0", "ssword-tail"},
		{"127.0.0.1:7000,127.0.0.1:7001", "", "cluster 127.0.0.1:7000,127.0.0.1:7001", ""},
		{"127.0.0.1:26379,127.0.0.1:26380", "mymaster", "sentinel master mymaster", ""},
	}
	for _, tt := range tests {
		r, err := OpenRedis(tt.url, tt.master, "")
		if err != nil {
			t.Errorf("%s: %v", tt.url, err)
			continue
		}
		if !strings.Contains(r.Desc, tt.want) || (tt.hidden != "" && strings.Contains(r.Desc, tt.hidden)) {
			t.Errorf("%s: Desc = %q, want it to contain %q and hide %q", tt.url, r.Desc, tt.want, tt.hidden)
		}
		_ = r.Close()
	}
	if _, err := OpenRedis("redis://127.0.0.1:6379/notadb", "", ""); err == nil || !strings.Contains(err.Error(), "SHOP_REDIS_URL") {
		t.Errorf("bad URL: err = %v, want it to name SHOP_REDIS_URL", err)
	}
}

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	if got := redactDSN("root:pw@tcp(db:3306)/shop"); got != "root:***@tcp(db:3306)/shop" {
		t.Errorf("redactDSN = %q", got)
	}
	if got := redactDSN("root:p@ss@tcp(db:3306)/shop"); got != "root:***@tcp(db:3306)/shop" {
		t.Errorf("redactDSN with @ in the password = %q", got)
	}
	if got := redactDSN("root@tcp(db:3306)/shop"); got != "root@tcp(db:3306)/shop" {
		t.Errorf("redactDSN without password = %q", got)
	}
}
