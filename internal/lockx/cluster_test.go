package lockx

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestCluster runs the scripts on a one-node Redis Cluster: Redis rejects a
// script whose keys are in different slots (CROSSSLOT) even on one node, so
// this proves the hash tags keep lock and fence keys together.
func TestCluster(t *testing.T) {
	t.Parallel()
	srv := startRedisServer(t, "--cluster-enabled", "yes", "--cluster-config-file", t.TempDir()+"/nodes.conf")
	admin := srv.client(t)
	mustNoErr(t, admin.Do(bg, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(), "add slots")
	eventually(t, 10*time.Second, "cluster_state:ok", func() bool {
		return strings.Contains(admin.ClusterInfo(bg).Val(), "cluster_state:ok")
	})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.addr()}})
	t.Cleanup(func() { _ = cc.Close() })

	// A raw cross-slot script fails here, so the test can tell.
	if err := cc.Eval(bg, "return 1", []string{"lock:a", "lock:b"}).Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("cross-slot script on cluster: %v, want CROSSSLOT (test setup proves nothing)", err)
	}
	c := newTestClient(t, cc, Options{Prefix: "lock:", MinBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second})
	l, err := c.Acquire(bg, "product:7", AcquireOptions{TTL: 5 * time.Second, Watchdog: true})
	mustNoErr(t, err, "acquire on cluster")
	if l.RedisKey() != "lock:{product:7}" {
		t.Fatalf("key %q", l.RedisKey())
	}
	inner, err := c.Acquire(l.Context(), "product:7", AcquireOptions{})
	mustNoErr(t, err, "re-enter on cluster")
	mustNoErr(t, l.Refresh(bg, 0), "refresh on cluster")
	done := make(chan error, 1)
	go func() {
		w, err := c.Acquire(bg, "product:7", AcquireOptions{TTL: time.Second, Wait: 5 * time.Second})
		if err == nil {
			if w.Fence().Number <= l.Fence().Number {
				t.Errorf("fence %d after %d", w.Fence().Number, l.Fence().Number)
			}
			err = w.Release(bg)
		}
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	mustNoErr(t, inner.Release(bg), "release inner")
	start := time.Now()
	mustNoErr(t, l.Release(bg), "release")
	mustNoErr(t, <-done, "waiter on cluster")
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("handoff on cluster took %v: pub/sub wake-up missing", d)
	}
	mustNoErr(t, c.RaiseFence(bg, "product:7", 1000), "raise fence on cluster")
}
