package topo

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// GaleraOptions shape a three-node Galera cluster.
type GaleraOptions struct {
	Dir string // working directory; "" a new temporary one, removed by Close
	// SuspectTimeout is evs.suspect_timeout: how long the survivors wait
	// before they evict a silent node, and so how long commits stall when a
	// node dies. Default 2 s (Galera's own is 5 s).
	SuspectTimeout time.Duration
}

// Galera is a three-node MariaDB Galera cluster (virtually synchronous
// replication: a commit is certified by every node before it is
// acknowledged) on loopback addresses 127.0.2.1-3, with haproxy in front
// sending every connection to one writer. Galera accepts writes on every
// node, but two writers of one hot row make most of the orders fail
// certification (error 1213 at COMMIT); one writer has no conflicts. A
// monitor in this process chooses the writer: the current one while it is
// synced, else the first synced node (what MaxScale's galeramon or
// haproxy's clustercheck do in production).
type Galera struct {
	Nodes []*MariaDB
	Proxy *HAProxy

	dir    string
	ownDir bool
	writer atomic.Int32
	stop   chan struct{}
	done   sync.WaitGroup
}

// StartGalera bootstraps node 0, joins the other two (state transfer by
// rsync), starts the writer monitor and haproxy in front.
func StartGalera(ctx context.Context, o GaleraOptions) (_ *Galera, err error) {
	provider := "/usr/lib/galera/libgalera_smm.so"
	if _, err := os.Stat(provider); err != nil {
		return nil, fmt.Errorf("topo: the Galera provider %s is missing (Debian: apt-get install galera-4): %w", provider, err)
	}
	g := &Galera{stop: make(chan struct{})}
	if g.dir, g.ownDir, err = workDir(o.Dir, "topo-galera-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	suspect := o.SuspectTimeout
	if suspect <= 0 {
		suspect = 2 * time.Second
	}
	// Per node: SQL, group communication, incremental and snapshot state
	// transfer ports, each node on an address of its own.
	ports, err := FreePorts(12)
	if err != nil {
		return nil, err
	}
	host := func(i int) string { return "127.0.2." + strconv.Itoa(i+1) }
	var peers []string
	for i := range 3 {
		peers = append(peers, fmt.Sprintf("%s:%d", host(i), ports[4*i+1]))
	}
	for i := range 3 {
		gcomm, ist, sst := ports[4*i+1], ports[4*i+2], ports[4*i+3]
		args := []string{"--wsrep-on=ON", "--wsrep-provider=" + provider,
			"--wsrep-cluster-name=topo", "--wsrep-node-name=node" + strconv.Itoa(i),
			"--wsrep-cluster-address=gcomm://" + strings.Join(peers, ","),
			"--wsrep-node-address=" + host(i),
			fmt.Sprintf("--wsrep-provider-options=gmcast.listen_addr=tcp://%s:%d;ist.recv_addr=%s:%d;evs.suspect_timeout=PT%gS;evs.inactive_timeout=PT%gS;evs.keepalive_period=PT%gS;evs.inactive_check_period=PT%gS;evs.install_timeout=PT%gS",
				host(i), gcomm, host(i), ist, suspect.Seconds(), 2*suspect.Seconds(), suspect.Seconds()/4, suspect.Seconds()/4, 2*suspect.Seconds()),
			"--wsrep-sst-method=rsync", fmt.Sprintf("--wsrep-sst-receive-address=%s:%d", host(i), sst),
			"--binlog-format=ROW", "--default-storage-engine=InnoDB", "--innodb-autoinc-lock-mode=2",
			"--innodb-flush-log-at-trx-commit=1",
			// Causality checks: a read, UPDATE or DELETE first waits until
			// the node has applied every write set certified before it.
			// Without it a node made writer reads what the old writer
			// committed but it has not applied yet (stale stock).
			"--wsrep-sync-wait=3"}
		first := i == 0
		if first {
			args = append(args, "--wsrep-new-cluster")
		}
		m, err := StartMariaDB(ctx, MariaDBOptions{Host: host(i), Port: ports[4*i], Dir: filepath.Join(g.dir, "node"+strconv.Itoa(i)), Args: args})
		if err != nil {
			return nil, err
		}
		if first { // a restart joins the cluster, never bootstraps a new one
			m.args = slices.DeleteFunc(m.args, func(a string) bool { return a == "--wsrep-new-cluster" })
		}
		g.Nodes = append(g.Nodes, m)
		if err := g.WaitSynced(ctx, m, 60*time.Second); err != nil {
			return nil, err
		}
	}
	g.done.Add(1)
	go g.monitor()
	if g.Proxy, err = StartHAProxy(ctx, HAProxyOptions{Dir: filepath.Join(g.dir, "haproxy"), Backends: addrsOf(g.Nodes), Writer: g.Writer}); err != nil {
		return nil, err
	}
	return g, nil
}

// synced reports whether node n is alive, in the primary component and
// synced (wsrep_local_state 4): a node that may take writes.
func synced(ctx context.Context, n *MariaDB) bool {
	if !n.Running() {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	state, err := n.queryString(ctx, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_LOCAL_STATE'")
	if err != nil || state != "4" {
		return false
	}
	status, err := n.queryString(ctx, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_CLUSTER_STATUS'")
	return err == nil && status == "Primary"
}

// monitor chooses the writer every 100 ms: the current one while it is
// synced (a writer that comes back does not take over again), else the
// first synced node. A writer whose process is gone is replaced at once;
// one that is alive but fails its check is given three checks in a row, so
// a status query slowed by load does not move the writes.
func (g *Galera) monitor() {
	defer g.done.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	failed := 0
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		cur := int(g.writer.Load())
		if synced(context.Background(), g.Nodes[cur]) {
			failed = 0
			continue
		}
		if failed++; g.Nodes[cur].Running() && failed < 3 {
			continue
		}
		for i, n := range g.Nodes {
			if i != cur && synced(context.Background(), n) {
				g.writer.Store(int32(i))
				failed = 0
				break
			}
		}
	}
}

// Writer is the index of the node that takes the writes now.
func (g *Galera) Writer() int { return int(g.writer.Load()) }

// Primary is the node that takes the writes now.
func (g *Galera) Primary() *MariaDB { return g.Nodes[g.Writer()] }

// DSN is the shop's DSN for user and database db, through haproxy.
func (g *Galera) DSN(user, db string) string {
	return fmt.Sprintf("%s@tcp(%s)/%s", user, g.Proxy.Addr(), db)
}

// CreateUser creates db and user on the writer (replicated to the rest).
func (g *Galera) CreateUser(ctx context.Context, user, db string) error {
	return g.Primary().CreateUser(ctx, user, db)
}

// KillWriter SIGKILLs the writer.
func (g *Galera) KillWriter() *MariaDB {
	p := g.Primary()
	p.Kill()
	return p
}

// WaitNewWriter waits until the monitor chose a writer other than old,
// haproxy routes to it (to the writer of the moment, should the monitor
// move it again meanwhile), and the survivors have evicted the dead node
// (the writer's view holds only the running nodes): until then a commit
// there waits.
func (g *Galera) WaitNewWriter(ctx context.Context, old *MariaDB, limit time.Duration) (*MariaDB, error) {
	var w *MariaDB
	err := poll(ctx, limit, "a new Galera writer routed to", func(ctx context.Context) error {
		if w = g.Primary(); w == old {
			return fmt.Errorf("the writer is still %s", old.Addr())
		}
		if err := g.Proxy.routesTo(ctx, w.Addr()); err != nil {
			return err
		}
		running := 0
		for _, n := range g.Nodes {
			if n.Running() {
				running++
			}
		}
		size, err := w.queryString(ctx, "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_CLUSTER_SIZE'")
		if err != nil {
			return err
		}
		if size != strconv.Itoa(running) {
			return fmt.Errorf("the view holds %s nodes, %d running", size, running)
		}
		return nil
	})
	return w, err
}

// Rejoin restarts a dead node; it joins the cluster again and waits until
// synced. After a SIGKILL the node does not know its position (seqno -1 in
// grastate.dat), so it first recovers it from InnoDB (mariadbd
// --wsrep-recover, as the galera_recovery script of the systemd unit
// does) and starts from there: an incremental state transfer from a
// survivor's cache. Should a full transfer (rsync) be needed, it blocks its
// donor for its length: the donor asked for is a survivor that is not the
// writer, so the writes go on.
func (g *Galera) Rejoin(ctx context.Context, m *MariaDB, limit time.Duration) error {
	if m.Running() {
		return fmt.Errorf("topo: node %s is running", m.Addr())
	}
	m.args = slices.DeleteFunc(m.args, func(a string) bool {
		return strings.HasPrefix(a, "--wsrep-sst-donor=") || strings.HasPrefix(a, "--wsrep-start-position=")
	})
	if pos, err := m.recoverPosition(ctx); err == nil {
		m.args = append(m.args, "--wsrep-start-position="+pos)
	}
	for i, n := range g.Nodes {
		if n != m && i != g.Writer() && n.Running() {
			m.args = append(m.args, "--wsrep-sst-donor=node"+strconv.Itoa(i)+",") // the comma: any other if it cannot
			break
		}
	}
	if err := m.Start(ctx); err != nil {
		return err
	}
	return g.WaitSynced(ctx, m, limit)
}

// recoverPosition runs mariadbd --wsrep-recover on the stopped node's
// datadir: it recovers InnoDB, logs "WSREP: Recovered position: uuid:seqno"
// and exits.
func (m *MariaDB) recoverPosition(ctx context.Context) (string, error) {
	log := filepath.Join(m.Dir, "wsrep-recover.log")
	_ = os.Remove(log)
	path, err := exec.LookPath("mariadbd")
	if err != nil {
		path = "/usr/sbin/mariadbd"
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append(slices.Clone(m.args), "--wsrep-recover", "--log-error="+log)...)
	cmd.Dir = m.Dir
	cmd.SysProcAttr = userAttr(m.uid, m.gid)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("topo: mariadbd --wsrep-recover: %w\n%s", err, out)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		return "", err
	}
	const mark = "WSREP: Recovered position: "
	i := strings.LastIndex(string(b), mark)
	if i < 0 {
		return "", fmt.Errorf("topo: mariadbd --wsrep-recover printed no position:\n%s", b)
	}
	pos, _, _ := strings.Cut(string(b[i+len(mark):]), "\n")
	return strings.TrimSpace(pos), nil
}

// WaitSynced waits until node m is synced in the primary component.
func (g *Galera) WaitSynced(ctx context.Context, m *MariaDB, limit time.Duration) error {
	return poll(ctx, limit, "Galera node "+m.Addr()+" synced", func(ctx context.Context) error {
		if !synced(ctx, m) {
			return fmt.Errorf("not synced; log %s:\n%s", m.LogPath, tail(m.LogPath))
		}
		return nil
	})
}

// Close stops the monitor, haproxy and every node, and removes the
// directory it made.
func (g *Galera) Close() {
	select {
	case <-g.stop:
	default:
		close(g.stop)
	}
	g.done.Wait()
	if g.Proxy != nil {
		g.Proxy.Close()
	}
	for _, n := range g.Nodes {
		n.Close()
	}
	if g.ownDir {
		_ = os.RemoveAll(g.dir)
	}
}
