package topo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSemiSyncFailoverLosesNothingAcknowledged kills the primary under
// four writers: every insert the primary acknowledged is on the promoted
// replica, the shop's address (haproxy) reaches the new primary, and the
// old primary rejoins as a replica and catches up.
func TestSemiSyncFailoverLosesNothingAcknowledged(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, db := startSemiSync(t, ctx)
	w := startInserts(ctx, db, 4)
	w.waitFor(ctx, 200)
	old := s.KillPrimary()
	promoted, err := s.Failover(ctx, 10*time.Second)
	if err != nil {
		w.stop()
		t.Fatalf("failover: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // writes resume through haproxy
	w.stop()
	direct := rootDB(t, promoted, "shopdb")
	if missing := w.missing(ctx, direct); missing > 0 {
		t.Errorf("%d of %d acknowledged inserts are not on the promoted replica", missing, w.n.Load())
	}

	if err := s.Rejoin(ctx, old); err != nil {
		t.Fatalf("rejoin the old primary: %v", err)
	}
	if err := caughtUp(ctx, direct, rootDB(t, old, "shopdb")); err != nil {
		t.Error("the old primary: ", err)
	}
}

// TestPromotionRefusesUnappliedRelayLog: a replica that received
// transactions but has not applied them (its SQL thread stopped) is not
// promoted: that would drop transactions the old primary acknowledged.
func TestPromotionRefusesUnappliedRelayLog(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, db := startSemiSync(t, ctx)
	stalled, other := s.Nodes[1], s.Nodes[2]
	if err := stalled.exec(ctx, "STOP SLAVE SQL_THREAD"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := db.ExecContext(ctx, "INSERT INTO t (v) VALUES (?)", i); err != nil {
			t.Fatal(err)
		}
	}
	other.Kill()
	s.KillPrimary()
	_, err := s.Failover(ctx, time.Second)
	if !errors.Is(err, ErrRelayNotApplied) {
		t.Fatalf("failover to a replica with an unapplied relay log: %v, want ErrRelayNotApplied", err)
	}
	if s.Primary() == stalled {
		t.Error("the stalled replica was made primary")
	}
}

// startSemiSync starts a topology for the test (closed at cleanup) with
// database shopdb and its table t, and a pool of user shop through haproxy.
func startSemiSync(t *testing.T, ctx context.Context) (*SemiSync, *sql.DB) {
	t.Helper()
	s, err := StartSemiSync(ctx, SemiSyncOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, shopTable(t, ctx, s.Primary(), s.DSN("shop", "shopdb"))
}

// shopTable creates database shopdb, its user shop and its table t on
// primary, and opens a pool of that user at dsn (closed at cleanup).
func shopTable(t *testing.T, ctx context.Context, primary *MariaDB, dsn string) *sql.DB {
	t.Helper()
	if err := primary.CreateUser(ctx, "shop", "shopdb"); err != nil {
		t.Fatal(err)
	}
	if err := primary.exec(ctx, "CREATE TABLE shopdb.t (id BIGINT AUTO_INCREMENT PRIMARY KEY, v BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn+"?timeout=1s&readTimeout=5s&writeTimeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// inserts are writers inserting distinct values into t until stopped,
// remembering those acknowledged.
type inserts struct {
	acked sync.Map
	n     atomic.Int64
	wg    sync.WaitGroup
	done  chan struct{}
}

func startInserts(ctx context.Context, db *sql.DB, writers int) *inserts {
	w := &inserts{done: make(chan struct{})}
	for k := range writers {
		w.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-w.done:
					return
				default:
				}
				v := k*1_000_000 + i
				if _, err := db.ExecContext(ctx, "INSERT INTO t (v) VALUES (?)", v); err == nil {
					w.acked.Store(v, true)
					w.n.Add(1)
				} else {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	return w
}

// waitFor waits until n inserts were acknowledged.
func (w *inserts) waitFor(ctx context.Context, n int64) {
	for w.n.Load() < n && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
}

func (w *inserts) stop() {
	close(w.done)
	w.wg.Wait()
}

// missing counts the acknowledged inserts db does not have.
func (w *inserts) missing(ctx context.Context, db *sql.DB) int {
	missing := 0
	w.acked.Range(func(k, _ any) bool {
		var one int
		if err := db.QueryRowContext(ctx, "SELECT 1 FROM t WHERE v = ?", k).Scan(&one); err != nil {
			missing++
		}
		return true
	})
	return missing
}

// caughtUp waits until node holds as many rows of t as writer.
func caughtUp(ctx context.Context, writer, node *sql.DB) error {
	var want, got int64
	if err := writer.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&want); err != nil {
		return err
	}
	return poll(ctx, 60*time.Second, "caught up", func(ctx context.Context) error {
		if err := node.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&got); err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%d rows of %d", got, want)
		}
		return nil
	})
}

func rootDB(t *testing.T, m *MariaDB, db string) *sql.DB {
	t.Helper()
	d, err := sql.Open("mysql", m.DSN("root", db)+"?timeout=1s&readTimeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
