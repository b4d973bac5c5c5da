package topo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// SemiSyncOptions shape a primary with two replicas.
type SemiSyncOptions struct {
	Dir string // working directory; "" a new temporary one, removed by Close
	// Async turns semi-synchronous replication off: the primary
	// acknowledges a commit its replicas may never have received (the
	// unsafe lab row of the database failover).
	Async bool
	// ReplicaDelay is MASTER_DELAY (whole seconds): the replicas apply a
	// transaction that long after the primary committed it. A stand-in
	// for the lag of an asynchronous replica under load or across a WAN:
	// on loopback an idle replica keeps up within milliseconds.
	ReplicaDelay time.Duration
	// AckTimeout is rpl_semi_sync_master_timeout: how long a commit waits
	// for a replica's acknowledgement before the primary silently falls
	// back to asynchronous replication. Default 10 s (MariaDB's).
	AckTimeout time.Duration
}

// SemiSync is a MariaDB primary with two replicas (GTID, row binlog,
// sync_binlog=1, innodb_flush_log_at_trx_commit=1, gtid_strict_mode, and,
// unless Async, semi-synchronous replication acknowledged AFTER_SYNC: a
// commit is acknowledged to the client only once a replica has the
// transaction in its relay log), behind haproxy, whose agent checks send
// every connection to the current primary. Failover is the step a monitor
// (MaxScale's mariadbmon, orchestrator) runs in production.
type SemiSync struct {
	Nodes   []*MariaDB
	Proxy   *HAProxy
	async   bool
	delay   int
	dir     string
	ownDir  bool
	primary atomic.Int32
}

// ErrRelayNotApplied is a promotion refused: the chosen replica had not
// applied every transaction it had received within the wait, and promoting
// it would lose transactions the old primary acknowledged.
var ErrRelayNotApplied = errors.New("topo: the replica has not applied its relay log")

// StartSemiSync starts the three servers, wires replication from node 0 and
// starts haproxy in front. The shop connects through DSN.
func StartSemiSync(ctx context.Context, o SemiSyncOptions) (_ *SemiSync, err error) {
	s := &SemiSync{async: o.Async, delay: int(o.ReplicaDelay.Seconds())}
	if s.dir, s.ownDir, err = workDir(o.Dir, "topo-semisync-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	ack := o.AckTimeout
	if ack <= 0 {
		ack = 10 * time.Second
	}
	for i := range 3 {
		args := []string{"--server-id=" + strconv.Itoa(i+1), "--log-bin=mysql-bin", "--log-slave-updates=ON",
			"--binlog-format=ROW", "--sync-binlog=1", "--innodb-flush-log-at-trx-commit=1", "--gtid-strict-mode=ON",
			"--rpl-semi-sync-master-wait-point=AFTER_SYNC",
			"--rpl-semi-sync-master-timeout=" + strconv.FormatInt(ack.Milliseconds(), 10),
			"--slave-net-timeout=5"}
		m, err := StartMariaDB(ctx, MariaDBOptions{Dir: filepath.Join(s.dir, "node"+strconv.Itoa(i)), Args: args})
		if err != nil {
			return nil, err
		}
		s.Nodes = append(s.Nodes, m)
	}
	if err := s.Nodes[0].exec(ctx, s.masterSide(true)...); err != nil {
		return nil, err
	}
	for _, r := range s.Nodes[1:] {
		if err := r.exec(ctx, "SET GLOBAL read_only = ON"); err != nil {
			return nil, err
		}
		if err := s.follow(ctx, r, s.Nodes[0], "slave_pos"); err != nil {
			return nil, err
		}
	}
	if s.Proxy, err = StartHAProxy(ctx, HAProxyOptions{Dir: filepath.Join(s.dir, "haproxy"), Backends: addrsOf(s.Nodes), Writer: s.writer}); err != nil {
		return nil, err
	}
	return s, nil
}

// masterSide is what makes a node the primary: writable, and the master
// side of semi-sync on (off in the async lab). The master side stays off on
// replicas: there it blocks their apply thread.
func (s *SemiSync) masterSide(on bool) []string {
	semi := "OFF"
	if on && !s.async {
		semi = "ON"
	}
	stmts := []string{"SET GLOBAL rpl_semi_sync_master_enabled = " + semi}
	if on {
		stmts = append(stmts, "SET GLOBAL rpl_semi_sync_slave_enabled = OFF", "SET GLOBAL read_only = OFF")
	}
	return stmts
}

// follow makes r replicate from primary, starting at r's GTID position pos
// ("slave_pos" or "current_pos").
func (s *SemiSync) follow(ctx context.Context, r, primary *MariaDB, pos string) error {
	semi := "ON"
	if s.async {
		semi = "OFF"
	}
	return r.exec(ctx, "STOP SLAVE", "SET GLOBAL rpl_semi_sync_master_enabled = OFF",
		"SET GLOBAL rpl_semi_sync_slave_enabled = "+semi,
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_CONNECT_RETRY=1, MASTER_USE_GTID=%s, MASTER_DELAY=%d", primary.Port, pos, s.delay),
		"START SLAVE")
}

// writer is haproxy's agent: the backend that takes connections.
func (s *SemiSync) writer() int { return int(s.primary.Load()) }

// Primary is the current primary.
func (s *SemiSync) Primary() *MariaDB { return s.Nodes[s.primary.Load()] }

// DSN is the shop's DSN for user and database db, through haproxy.
func (s *SemiSync) DSN(user, db string) string {
	return fmt.Sprintf("%s@tcp(%s)/%s", user, s.Proxy.Addr(), db)
}

// CreateUser creates db and user on the primary (replicated to the rest).
func (s *SemiSync) CreateUser(ctx context.Context, user, db string) error {
	return s.Primary().CreateUser(ctx, user, db)
}

// Failover promotes the live replica that received the most, after it has
// applied all it received (waiting up to applyWait; ErrRelayNotApplied
// when it could not), points haproxy at it and the other replica at it.
// The old primary must be dead (KillPrimary), or it would still take
// writes. Async: it promotes the most advanced replica at once, without
// waiting, as a careless operator would.
func (s *SemiSync) Failover(ctx context.Context, applyWait time.Duration) (*MariaDB, error) {
	old := s.Primary()
	if old.Running() {
		return nil, fmt.Errorf("topo: the primary on %d is still running", old.Port)
	}
	best, bestSeq := -1, int64(-1)
	var bestPos string
	for i, n := range s.Nodes {
		if n == old || !n.Running() {
			continue
		}
		pos, err := n.queryString(ctx, "SELECT @@gtid_slave_pos")
		if err != nil {
			continue
		}
		io, err := n.slaveIOPos(ctx)
		if err != nil {
			continue
		}
		if io == "" {
			io = pos
		}
		if seq := gtidSeq(io); seq > bestSeq {
			best, bestSeq, bestPos = i, seq, io
		}
	}
	if best < 0 {
		return nil, errors.New("topo: no live replica to promote")
	}
	r := s.Nodes[best]
	if !s.async && bestPos != "" {
		if err := r.waitApplied(ctx, bestPos, applyWait); err != nil {
			return nil, err
		}
	}
	if err := r.exec(ctx, append([]string{"STOP SLAVE", "RESET SLAVE ALL"}, s.masterSide(true)...)...); err != nil {
		return nil, err
	}
	s.primary.Store(int32(best))
	for _, n := range s.Nodes {
		if n == r || n == old || !n.Running() {
			continue
		}
		if err := s.follow(ctx, n, r, "slave_pos"); err != nil {
			return nil, err
		}
	}
	return r, s.Proxy.WaitWriter(ctx, r.Addr(), 30*time.Second)
}

// KillPrimary SIGKILLs the current primary.
func (s *SemiSync) KillPrimary() *MariaDB {
	p := s.Primary()
	p.Kill()
	return p
}

// Rejoin restarts a dead former primary as a replica of the current one.
// With init_rpl_role=SLAVE it first truncates the tail of its binlog that
// no replica acknowledged (transactions its clients were never told
// committed), so it cannot carry a transaction the new primary lacks.
func (s *SemiSync) Rejoin(ctx context.Context, m *MariaDB) error {
	if m.Running() {
		return fmt.Errorf("topo: node %d is running", m.Port)
	}
	m.args = append(m.args, "--init-rpl-role=SLAVE", "--read-only=ON")
	if err := m.Start(ctx); err != nil {
		return err
	}
	if err := m.exec(ctx, "SET GLOBAL gtid_slave_pos = @@gtid_binlog_pos"); err != nil {
		return err
	}
	return s.follow(ctx, m, s.Primary(), "slave_pos")
}

// Close stops haproxy and every server, and removes the directory it made.
func (s *SemiSync) Close() {
	if s.Proxy != nil {
		s.Proxy.Close()
	}
	for _, n := range s.Nodes {
		n.Close()
	}
	if s.ownDir {
		_ = os.RemoveAll(s.dir)
	}
}

// slaveIOPos is the replica's Gtid_IO_Pos: what it has received.
func (m *MariaDB) slaveIOPos(ctx context.Context) (string, error) {
	db, err := m.Root()
	if err != nil {
		return "", err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil || !rows.Next() {
		return "", err
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return "", err
	}
	for i, c := range cols {
		if c == "Gtid_IO_Pos" {
			return vals[i].String, nil
		}
	}
	return "", errors.New("topo: SHOW SLAVE STATUS has no Gtid_IO_Pos")
}

// waitApplied waits until the replica's SQL thread has applied pos.
func (m *MariaDB) waitApplied(ctx context.Context, pos string, wait time.Duration) error {
	got, err := m.queryString(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", pos, wait.Seconds())
	if err != nil {
		return err
	}
	if got != "0" {
		return fmt.Errorf("%w: %s not applied on %d after %s", ErrRelayNotApplied, pos, m.Port, wait)
	}
	return nil
}

func (m *MariaDB) queryString(ctx context.Context, q string, args ...any) (string, error) {
	db, err := m.Root()
	if err != nil {
		return "", err
	}
	defer db.Close()
	var v sql.NullString
	err = db.QueryRowContext(ctx, q, args...).Scan(&v)
	return v.String, err
}

// gtidSeq is the sequence number of a one-domain GTID position
// ("0-1-42" -> 42); -1 when empty.
func gtidSeq(pos string) int64 {
	var best int64 = -1
	for _, g := range strings.Split(pos, ",") {
		parts := strings.Split(strings.TrimSpace(g), "-")
		if len(parts) != 3 {
			continue
		}
		if n, err := strconv.ParseInt(parts[2], 10, 64); err == nil && n > best {
			best = n
		}
	}
	return best
}
