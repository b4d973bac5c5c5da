package faults

import (
	"context"
	"fmt"
	"time"

	"github.com/seckill-lab/shop/internal/topo"
)

// semiSyncTopology is a MariaDB primary with two replicas behind haproxy:
// semi-synchronous, killed twice (failover-db-semisync), or asynchronous,
// killed once and the most advanced replica promoted at once
// (failover-db-async, the unsafe row).
func semiSyncTopology(ctx context.Context, async bool) (*topology, error) {
	o := topo.SemiSyncOptions{Async: async}
	if async {
		// On loopback an asynchronous replica keeps up within a
		// millisecond, and a careless promotion then loses nothing
		// (measured: the replica had every transaction the primary
		// committed). A replica 1 s behind, as under load or across a WAN,
		// shows what the careless promotion drops.
		o.ReplicaDelay = time.Second
	}
	s, err := topo.StartSemiSync(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := s.CreateUser(ctx, shopUser, shopDatabases); err != nil {
		s.Close()
		return nil, err
	}
	t := &topology{MysqlDSN: s.DSN(shopUser, ""), Close: s.Close}
	if async {
		// The careless operator: SIGKILL, then promote whichever replica
		// received the most, without waiting for it to apply what it
		// received; the old primary, holding transactions nobody else
		// has, is left out. The window: transactions the primary had
		// committed (read just before the kill) that the new primary
		// lacks.
		var window []string
		t.Desc = "a MariaDB primary with 2 asynchronous replicas 1 s behind (MASTER_DELAY) behind haproxy, promoted carelessly (unsafe lab row)"
		t.Unsafe = true
		t.Window = func() []string { return window }
		t.Faults = []plannedFault{{Name: "SIGKILL of the primary database, careless promotion", At: 0.4, Run: func(ctx context.Context, _ string) (string, func() error, error) {
			committed, err := s.Primary().GTIDSeq(ctx)
			if err != nil {
				return "", nil, err
			}
			old := s.KillPrimary()
			return old.Addr(), func() error {
				m, err := s.Failover(ctx, 0)
				if err != nil {
					return err
				}
				applied, err := m.GTIDSeq(ctx)
				window = append(window, fmt.Sprintf("window: the primary had committed at least %d transactions (read just before the kill); the replica promoted had %d: %d committed transactions (order batches, payments, restocks) are not on the new primary",
					committed, applied, max(0, committed-applied)))
				return err
			}, nil
		}}}
		return t, nil
	}
	// SIGKILL of the writer; then the monitor's step: promote the replica
	// that received the most once it applied it, repoint haproxy, and bring
	// the old primary back as a replica, so the second kill finds two
	// replicas again.
	kill := func(ctx context.Context, _ string) (string, func() error, error) {
		old := s.KillPrimary()
		return old.Addr(), func() error {
			if _, err := s.Failover(ctx, 10*time.Second); err != nil {
				return err
			}
			return s.Rejoin(ctx, old)
		}, nil
	}
	t.Desc = "a MariaDB primary with 2 semi-synchronous replicas behind haproxy (Redis: --redis-url, or a private one)"
	t.Faults = []plannedFault{
		{Name: "SIGKILL of the primary database", At: 0.25, Run: kill},
		{Name: "SIGKILL of the new primary database", At: 0.65, Run: kill},
	}
	return t, nil
}

// galeraTopology is a three-node Galera cluster, one writer through
// haproxy, the writer killed twice: the monitor chooses a synced survivor,
// haproxy follows, and the killed node rejoins (incremental state
// transfer) before the second kill.
func galeraTopology(ctx context.Context) (*topology, error) {
	g, err := topo.StartGalera(ctx, topo.GaleraOptions{})
	if err != nil {
		return nil, err
	}
	if err := g.CreateUser(ctx, shopUser, shopDatabases); err != nil {
		g.Close()
		return nil, err
	}
	// The killed node rejoins while the sale goes on; the next kill waits
	// for it, since one node of three left alone has no quorum.
	rejoined := make(chan error, 1)
	rejoined <- nil
	ready := func(ctx context.Context) error {
		select {
		case err := <-rejoined:
			if err != nil {
				return fmt.Errorf("the node killed before did not rejoin: %w", err)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	kill := func(ctx context.Context, _ string) (string, func() error, error) {
		old := g.KillWriter()
		return old.Addr(), func() error {
			_, err := g.WaitNewWriter(ctx, old, 30*time.Second)
			go func() { rejoined <- g.Rejoin(ctx, old, 2*time.Minute) }()
			return err
		}, nil
	}
	// A commit in flight when a node dies waits until the survivors evict
	// it (evs.suspect_timeout 2 s, then a new view: 3-4 s in all on two
	// loaded cores), and a commit whose connection died there is resolved
	// only once the new writer answers, within the request's deadline plus
	// a grace: the request timeout must outlast the stall, or commits are
	// cut mid-stall (with 3.2 s, 15 answers of a run came later than the
	// timeout + 1 s; with 4.2 s and the shop's commit grace, one run of two
	// sold nothing for 13 s after the second kill).
	// 6.2 s passed every run since.
	return &topology{Desc: "a 3-node Galera cluster, one writer through haproxy (Redis: --redis-url, or a private one)",
		MysqlDSN: g.DSN(shopUser, ""), Close: g.Close, LockWait: 6 * time.Second,
		// The second kill waits for the first node's rejoin (a recovery
		// run, then IST), 10-26 s on two loaded cores: over a 20 s sale
		// it came after the end in two runs, and the part failed for want
		// of an order after it. Over 50 s, the kills at 12.5 s and 32.5 s
		// leave the rejoin 16 s (more delays the second kill) and the
		// sale 17 s after it.
		MinDuration: 50 * time.Second,
		Faults: []plannedFault{
			{Name: "SIGKILL of the Galera writer", At: 0.25, Run: kill, Ready: ready},
			{Name: "SIGKILL of the new Galera writer", At: 0.65, Run: kill, Ready: ready},
		}}, nil
}
