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
	var acked sync.Map
	var n atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				v := w*1_000_000 + i
				if _, err := db.ExecContext(ctx, "INSERT INTO t (v) VALUES (?)", v); err == nil {
					acked.Store(v, true)
					n.Add(1)
				} else {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	for n.Load() < 200 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	old := s.KillPrimary()
	promoted, err := s.Failover(ctx, 10*time.Second)
	if err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("failover: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // writes resume through haproxy
	close(stop)
	wg.Wait()

	direct := rootDB(t, promoted, "shopdb")
	missing := 0
	acked.Range(func(k, _ any) bool {
		var one int
		if err := direct.QueryRowContext(ctx, "SELECT 1 FROM t WHERE v = ?", k).Scan(&one); err != nil {
			missing++
		}
		return true
	})
	if missing > 0 {
		t.Errorf("%d of %d acknowledged inserts are not on the promoted replica", missing, n.Load())
	}

	if err := s.Rejoin(ctx, old); err != nil {
		t.Fatalf("rejoin the old primary: %v", err)
	}
	var want, got int64
	if err := direct.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&want); err != nil {
		t.Fatal(err)
	}
	back := rootDB(t, old, "shopdb")
	err = poll(ctx, 60*time.Second, "the old primary caught up", func(ctx context.Context) error {
		if err := back.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&got); err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%d rows of %d", got, want)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
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
	if err := s.CreateUser(ctx, "shop", "shopdb"); err != nil {
		t.Fatal(err)
	}
	if err := s.Primary().exec(ctx, "CREATE TABLE shopdb.t (id BIGINT AUTO_INCREMENT PRIMARY KEY, v BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", s.DSN("shop", "shopdb")+"?timeout=1s&readTimeout=5s&writeTimeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return s, db
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
