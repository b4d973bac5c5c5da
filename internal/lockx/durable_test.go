package lockx

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// replicated starts a master and one replica of it, in sync.
func replicated(t *testing.T) (master, replica *redisServer) {
	t.Helper()
	master = startRedisServer(t, "--repl-diskless-sync-delay", "0")
	replica = startRedisServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	rc := replica.client(t)
	eventually(t, 10*time.Second, "replica in sync", func() bool {
		return strings.Contains(rc.Info(bg, "replication").Val(), "master_link_status:up")
	})
	// The master's view too: WAIT counts only replicas it sees online.
	mc := master.client(t)
	eventually(t, 10*time.Second, "master sees the replica online", func() bool {
		return strings.Contains(mc.Info(bg, "replication").Val(), "state=online")
	})
	return master, replica
}

// TestWaitReplicas: with WaitReplicas 1, an acquire returns only once the
// replica has the lock; with the replica unable to answer, acquire fails
// with ErrNotReplicated and leaves no lock behind, and refresh fails too.
func TestWaitReplicas(t *testing.T) {
	t.Parallel()
	master, replica := replicated(t)
	rc := replica.client(t)
	// Two clients: one that waits long enough for a live replica on a
	// loaded CI machine (a live replica acks in well under a millisecond
	// when it gets the CPU; the bound only matters when it does not), and
	// one with a short bound for the paused replica, which can never ack.
	mc := redis.NewClient(&redis.Options{Addr: master.addr(), ReadTimeout: 10 * time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = mc.Close() })
	c := newTestClient(t, mc, Options{Prefix: "d:", WaitReplicas: 1, WaitTimeout: 3 * time.Second})
	short := newTestClient(t, mc, Options{Prefix: "d:", WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond})

	l, err := c.Acquire(bg, "k1", AcquireOptions{TTL: 10 * time.Second})
	mustNoErr(t, err, "acquire with a live replica")
	// WAIT returned, so the replica has the hold now, not eventually.
	if got := rc.HGet(bg, l.RedisKey(), l.Token()).Val(); got != "1" {
		t.Fatalf("replica has hold count %q right after a WaitReplicas acquire, want 1", got)
	}
	mustNoErr(t, l.Refresh(bg, 0), "refresh with a live replica")

	replica.pause()
	t.Cleanup(func() {
		if replica.cmd != nil {
			replica.resume()
		}
	})
	start := time.Now()
	_, err = short.Acquire(bg, "k2", AcquireOptions{TTL: 10 * time.Second})
	if !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("acquire with the replica stopped: %v, want ErrNotReplicated", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("acquire took %v: WAIT not bounded by WaitTimeout", d)
	}
	// The failed acquire's release waits cleanupWait at most and goes on in
	// the background, so on a loaded machine it can land just after the call.
	eventually(t, cleanupTimeout, "an acquire that failed WAIT leaves no lock on the master", func() bool {
		return mc.Exists(bg, "d:{k2}").Val() == 0
	})
	if err := l.Refresh(bg, 0); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("refresh with the replica stopped: %v, want ErrNotReplicated", err)
	}
	// A re-entry the master applied but no replica confirmed is undone:
	// the hold count stays 1, so one Release frees the lock.
	if _, err := c.Acquire(WithLock(bg, l), "k1", AcquireOptions{TTL: 10 * time.Second}); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("re-entry with the replica stopped: %v, want ErrNotReplicated", err)
	}
	if got := mc.HGet(bg, l.RedisKey(), l.Token()).Val(); got != "1" {
		t.Fatalf("hold count %q after a re-entry that failed WAIT, want 1", got)
	}
	replica.resume()
	mustNoErr(t, l.Release(bg), "release")
	if n := mc.Exists(bg, l.RedisKey()).Val(); n != 0 {
		t.Fatal("the lock is still held after its one Release")
	}
}

// TestWaitReplicasOffSendsNoWait: the default path never sends WAIT.
func TestWaitReplicasOffSendsNoWait(t *testing.T) {
	t.Parallel()
	srv := startRedisServer(t)
	rdb := srv.client(t)
	c := newTestClient(t, rdb, Options{Prefix: "d:"})
	l, err := c.Acquire(bg, "k", AcquireOptions{TTL: time.Second})
	mustNoErr(t, err, "acquire")
	mustNoErr(t, l.Refresh(bg, 0), "refresh")
	mustNoErr(t, l.Release(bg), "release")
	stats := rdb.Info(bg, "commandstats").Val()
	if strings.Contains(stats, "cmdstat_wait:") {
		t.Fatalf("WAIT sent with WaitReplicas off:\n%s", stats)
	}
}

// TestFailoverLosesLockFenceRejects is Kleppmann's argument against
// Redlock-style safety, run for real. Holder A takes the lock on a master
// whose replica has not received it, the master is SIGKILLed and the
// replica promoted: the lock
// is gone, so holder B obtains it too. Both read one unit of stock and both
// sell it. With the fence checked by the store, A's late write is refused
// and one unit is sold once; without it (the same setup, read-modify-write
// under the lock only) the unit is sold twice.
func TestFailoverLosesLockFenceRejects(t *testing.T) {
	db := stockDB(t)
	for _, fenced := range []bool{true, false} {
		name := map[bool]string{true: "fenced", false: "unfenced"}[fenced]
		t.Run(name, func(t *testing.T) {
			master, replica := replicated(t)
			mc, rc := master.client(t), replica.client(t)
			a := newTestClient(t, mc, Options{Prefix: "d:"})

			// Earlier sales, replicated: the fence counter is at 3 on both.
			for range 3 {
				l, err := a.Acquire(bg, "product:1", AcquireOptions{TTL: 10 * time.Second})
				mustNoErr(t, err, "earlier holder")
				mustNoErr(t, l.Release(bg), "earlier release")
			}
			mustNoErr(t, mc.Do(bg, "WAIT", 1, 2000).Err(), "WAIT")
			row := newStockRow(t, db, 1, 3)

			// The replica falls behind: cut from the replication stream now,
			// it misses A's acquire exactly as a lagging replica would. (A
			// SIGSTOPped replica would not do: the kernel buffers the stream
			// and it reads A's write on SIGCONT.) Then the master dies and
			// the replica is promoted.
			mustNoErr(t, rc.Do(bg, "REPLICAOF", "NO", "ONE").Err(), "detach the replica")
			la, err := a.Acquire(bg, "product:1", AcquireOptions{TTL: 10 * time.Second})
			mustNoErr(t, err, "holder A")
			qtyA := row.read(t)
			master.kill()

			b := newTestClient(t, rc, Options{Prefix: "d:"})
			lb, err := b.Acquire(bg, "product:1", AcquireOptions{TTL: 10 * time.Second})
			if err != nil {
				t.Fatalf("holder B after promotion: %v; the lock should have been lost with the master", err)
			}
			if lb.Fence().Number > la.Fence().Number {
				t.Fatalf("B's fence %d above A's %d: the promoted replica had the fence increment, the setup shows nothing", lb.Fence().Number, la.Fence().Number)
			}
			qtyB := row.read(t)
			// B sells first (it believes it holds the lock), then A wakes up
			// and sells too, both from what they read.
			okB := row.sell(t, qtyB, lb, fenced)
			okA := row.sell(t, qtyA, la, fenced)
			sold := row.sold(t)
			if fenced {
				if !okB || okA {
					t.Fatalf("fenced: B's write accepted %v, A's (stale) accepted %v; want B only", okB, okA)
				}
				if sold != 1 || row.read(t) != 0 {
					t.Fatalf("fenced: %d sold, stock %d; want 1 sold, 0 left", sold, row.read(t))
				}
				return
			}
			if !okA || !okB || sold != 2 {
				t.Fatalf("unfenced: A %v, B %v, %d sold; want both writes and 2 sales of 1 unit (the oversell the fence prevents)", okA, okB, sold)
			}
			t.Logf("unfenced: 1 unit sold %d times after the failover lost A's lock", sold)
		})
	}
}

// stockDB is a fresh MariaDB/MySQL database for the simulated stock row
// (SHOP_TEST_MYSQL_DSN, a server DSN, or root@127.0.0.1:3306), dropped at
// cleanup. It never skips: without a database the test fails saying so.
func stockDB(t *testing.T) *sql.DB {
	t.Helper()
	dsn := os.Getenv("SHOP_TEST_MYSQL_DSN")
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3306)/"
	}
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("SHOP_TEST_MYSQL_DSN: %v", err)
	}
	name := "lockxtest_" + strings.ToLower(rand.Text()[:10])
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("this test needs MariaDB/MySQL at %s (set SHOP_TEST_MYSQL_DSN to a server DSN): %v", cfg.Addr, err)
	}
	cfg.DBName = name
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Close()
		if a, err := sql.Open("mysql", dsn); err == nil {
			_, _ = a.Exec("DROP DATABASE IF EXISTS " + name)
			a.Close()
		}
	})
	for _, q := range []string{
		"CREATE TABLE stock (id BIGINT PRIMARY KEY, qty BIGINT NOT NULL, fence BIGINT NOT NULL, fence_holder VARCHAR(64) NOT NULL DEFAULT '')",
		"CREATE TABLE sales (id BIGINT AUTO_INCREMENT PRIMARY KEY, product BIGINT NOT NULL, fence BIGINT NOT NULL)",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// stockRow is one product's stock and the last fence its store accepted.
type stockRow struct {
	db *sql.DB
	id int64
}

func newStockRow(t *testing.T, db *sql.DB, qty, fence int64) stockRow {
	t.Helper()
	id := time.Now().UnixNano()
	if _, err := db.Exec("INSERT INTO stock (id, qty, fence) VALUES (?, ?, ?)", id, qty, fence); err != nil {
		t.Fatal(err)
	}
	return stockRow{db: db, id: id}
}

func (r stockRow) read(t *testing.T) int64 {
	t.Helper()
	var q int64
	if err := r.db.QueryRow("SELECT qty FROM stock WHERE id = ?", r.id).Scan(&q); err != nil {
		t.Fatal(err)
	}
	return q
}

func (r stockRow) sold(t *testing.T) int64 {
	t.Helper()
	var n int64
	if err := r.db.QueryRow("SELECT COUNT(*) FROM sales WHERE product = ?", r.id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// sell writes qty-1 as read under the lock and records a sale. Fenced, the
// store takes the write only from a fence above the last it accepted, or
// equal to it from the same holder: a failover can hand the same fence to
// two holders (the increment was lost with the master), so an equal fence
// from another holder is refused as well.
func (r stockRow) sell(t *testing.T, read int64, l *Lock, fenced bool) bool {
	t.Helper()
	if read < 1 {
		return false
	}
	tx, err := r.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	fence := l.Fence().Number
	q, args := "UPDATE stock SET qty = ? WHERE id = ?", []any{read - 1, r.id}
	if fenced {
		q = "UPDATE stock SET qty = ?, fence = ?, fence_holder = ? WHERE id = ? AND (fence < ? OR (fence = ? AND fence_holder = ?))"
		args = []any{read - 1, fence, l.Token(), r.id, fence, fence, l.Token()}
	}
	res, err := tx.Exec(q, args...)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); fenced && n != 1 {
		return false
	}
	if _, err := tx.Exec("INSERT INTO sales (product, fence) VALUES (?, ?)", r.id, fence); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return true
}

// TestWaitReplicasShared runs WaitReplicas on the shared test Redis: on the
// CI Cluster (one replica per master) the acquire is confirmed by the
// slot's replica; on a lone server, with no replica to confirm, it fails
// with ErrNotReplicated and leaves no lock.
func TestWaitReplicasShared(t *testing.T) {
	t.Parallel()
	rdb := sharedRedis(t)
	c := newTestClient(t, rdb, Options{WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond})
	l, err := c.Acquire(bg, "product:9", AcquireOptions{TTL: 5 * time.Second})
	if _, cluster := rdb.(*redis.ClusterClient); !cluster {
		if !errors.Is(err, ErrNotReplicated) {
			t.Fatalf("WaitReplicas 1 on a server without replicas: %v, want ErrNotReplicated", err)
		}
		return
	}
	mustNoErr(t, err, "acquire on the cluster with WaitReplicas 1")
	mustNoErr(t, l.Refresh(bg, 0), "refresh on the cluster")
	mustNoErr(t, l.Release(bg), "release on the cluster")
}

// BenchmarkWaitReplicas: the price of WaitReplicas 1 on one acquire and
// release, against a master with one replica on loopback (docs/perf-lockx.md).
func BenchmarkWaitReplicas(b *testing.B) {
	master := startRedisServer(b, "--repl-diskless-sync-delay", "0")
	replica := startRedisServer(b, "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	rc := replica.client(b)
	eventually(b, 10*time.Second, "replica in sync", func() bool {
		return strings.Contains(rc.Info(bg, "replication").Val(), "master_link_status:up")
	})
	mc := master.client(b)
	for _, n := range []int{0, 1} {
		b.Run("replicas="+strconv.Itoa(n), func(b *testing.B) {
			c := newTestClient(b, mc, Options{Prefix: "bench:", WaitReplicas: n})
			for b.Loop() {
				l, err := c.Acquire(bg, "k", AcquireOptions{TTL: 5 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(bg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
