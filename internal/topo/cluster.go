package topo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterOptions shape a Cluster. The zero value is 3 masters with one
// replica each on free ports in a new temporary directory.
type ClusterOptions struct {
	Masters  int    // default 3
	Replicas int    // per master; default 1 (negative: none)
	Port     int    // first data port (then Port+1, ...); 0: free ports
	BusPort  int    // first cluster-bus port; 0: Port+50 with Port, else free ports
	Dir      string // working directory; "" a new temporary one, removed by Close
	// NodeTimeout is cluster-node-timeout: how long a silent master is
	// waited for before its replica is promoted. Default 1 s (Redis: 15 s),
	// so a failover takes a second or two, not a quarter of a minute.
	NodeTimeout time.Duration
}

// Cluster is a Redis Cluster on loopback: Nodes[:Masters] were created as
// masters, the rest as their replicas (after a failover the roles move;
// ask Master or Role).
type Cluster struct {
	Nodes   []*Node
	Masters int
	dir     string
	ownDir  bool
}

// StartCluster starts the nodes, joins them with redis-cli --cluster create
// and waits until every slot is served and every replica is in sync.
// On error everything started is killed.
func StartCluster(ctx context.Context, o ClusterOptions) (_ *Cluster, err error) {
	if o.Masters <= 0 {
		o.Masters = 3
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Replicas < 0 {
		o.Replicas = 0
	}
	if o.NodeTimeout <= 0 {
		o.NodeTimeout = time.Second
	}
	n := o.Masters * (1 + o.Replicas)
	c := &Cluster{Masters: o.Masters, dir: o.Dir}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "topo-cluster-"); err != nil {
			return nil, err
		}
		c.ownDir = true
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	data, err := ports(o.Port, n)
	if err != nil {
		return nil, err
	}
	busBase := o.BusPort
	if busBase == 0 && o.Port > 0 {
		busBase = o.Port + 50
	}
	bus, err := ports(busBase, n)
	if err != nil {
		return nil, err
	}
	for i := range n {
		node, err := newNode(filepath.Join(c.dir, strconv.Itoa(data[i])), data[i],
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus[i]),
			"--cluster-node-timeout", strconv.FormatInt(o.NodeTimeout.Milliseconds(), 10),
			// A replica may always take over, however long it was cut off:
			// the lab wants the failover, and the fence makes it safe.
			"--cluster-replica-validity-factor", "0",
			// Keep serving the slots that still have a master while one is
			// being replaced (Redis's default refuses every key, CLUSTERDOWN,
			// until all 16384 slots are covered again).
			"--cluster-require-full-coverage", "no",
			"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, node)
		if err := node.Start(ctx); err != nil {
			return nil, err
		}
	}
	if err := c.create(ctx, o.Replicas); err != nil {
		return nil, err
	}
	if err := c.WaitHealthy(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) create(ctx context.Context, replicas int) error {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return fmt.Errorf("topo: redis-cli not on PATH (Debian: apt-get install redis-tools): %w", err)
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("topo: redis-cli %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Addrs lists every node's address.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// URL is the SHOP_REDIS_URL of the cluster: the seed addresses of the
// nodes created as masters, comma-separated (clients discover the rest).
func (c *Cluster) URL() string { return strings.Join(c.Addrs()[:c.Masters], ",") }

// Client is a cluster client seeded with every node (the caller closes it).
// It reloads the slot map every second: go-redis reloads it on MOVED but
// not when a master stops answering, so with its default (60 s) a client
// keeps dialling a dead master for up to a minute after the failover.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), DialTimeout: time.Second, ReadTimeout: 2 * time.Second,
		ClusterStateReloadInterval: time.Second})
}

// Node returns the node listening on addr.
func (c *Cluster) Node(addr string) *Node {
	for _, n := range c.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// view is one live node's CLUSTER NODES, parsed.
type view struct {
	masters map[string]string // node id -> addr, masters not marked fail
	slots   map[string][][2]int
	role    map[string]string // addr -> "master" | "slave"
	failed  map[string]bool   // addr marked fail or noaddr
}

func (c *Cluster) view(ctx context.Context) (view, error) {
	var lastErr error = errors.New("no node answers")
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := n.Client()
		s, err := cl.ClusterNodes(ctx).Result()
		cl.Close()
		if err != nil {
			lastErr = err
			continue
		}
		return parseNodes(s), nil
	}
	return view{}, lastErr
}

func parseNodes(s string) view {
	v := view{masters: map[string]string{}, slots: map[string][][2]int{}, role: map[string]string{}, failed: map[string]bool{}}
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr := f[1]
		if i := strings.IndexByte(addr, '@'); i >= 0 {
			addr = addr[:i]
		}
		flags := f[2]
		failed := strings.Contains(flags, "fail") && !strings.Contains(flags, "fail?") || strings.Contains(flags, "noaddr")
		v.failed[addr] = failed
		switch {
		case strings.Contains(flags, "master"):
			v.role[addr] = "master"
			if !failed {
				v.masters[f[0]] = addr
			}
			for _, r := range f[8:] {
				if strings.HasPrefix(r, "[") {
					continue // slot being migrated
				}
				lo, hi, ok := strings.Cut(r, "-")
				if !ok {
					hi = lo
				}
				a, _ := strconv.Atoi(lo)
				b, _ := strconv.Atoi(hi)
				v.slots[addr] = append(v.slots[addr], [2]int{a, b})
			}
		case strings.Contains(flags, "slave"):
			v.role[addr] = "slave"
		}
	}
	return v
}

// MasterOf returns the node that serves slot now, in the view of a live node.
func (c *Cluster) MasterOf(ctx context.Context, slot int) (*Node, error) {
	v, err := c.view(ctx)
	if err != nil {
		return nil, err
	}
	for addr, rs := range v.slots {
		if v.failed[addr] {
			continue
		}
		for _, r := range rs {
			if slot >= r[0] && slot <= r[1] {
				return c.Node(addr), nil
			}
		}
	}
	return nil, fmt.Errorf("topo: no live master serves slot %d", slot)
}

// KeySlot is CLUSTER KEYSLOT key, asked of a live node.
func (c *Cluster) KeySlot(ctx context.Context, key string) (int, error) {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cl := n.Client()
		s, err := cl.ClusterKeySlot(ctx, key).Result()
		cl.Close()
		if err == nil {
			return int(s), nil
		}
	}
	return 0, errors.New("topo: no node answers CLUSTER KEYSLOT")
}

// WaitHealthy waits until every running node says cluster_state:ok, all
// 16384 slots are served by running masters, and every running replica's
// link to its master is up.
func (c *Cluster) WaitHealthy(ctx context.Context, limit time.Duration) error {
	return poll(ctx, limit, "cluster healthy", func(ctx context.Context) error {
		v, err := c.view(ctx)
		if err != nil {
			return err
		}
		covered := 0
		for addr, rs := range v.slots {
			if n := c.Node(addr); n == nil || !n.Running() || v.failed[addr] {
				continue
			}
			for _, r := range rs {
				covered += r[1] - r[0] + 1
			}
		}
		if covered != 16384 {
			return fmt.Errorf("%d of 16384 slots served by live masters", covered)
		}
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			cl := n.Client()
			info, err := cl.ClusterInfo(ctx).Result()
			repl := ""
			if err == nil {
				repl, err = cl.Info(ctx, "replication").Result()
			}
			cl.Close()
			switch {
			case err != nil:
				return fmt.Errorf("%s: %w", n.Addr(), err)
			case !strings.Contains(info, "cluster_state:ok"):
				return fmt.Errorf("%s: cluster_state not ok", n.Addr())
			case strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up"):
				return fmt.Errorf("%s: replica link not up", n.Addr())
			}
		}
		return nil
	})
}

// WaitPromoted waits until a node other than old serves slot.
func (c *Cluster) WaitPromoted(ctx context.Context, slot int, old *Node, limit time.Duration) (*Node, error) {
	var got *Node
	err := poll(ctx, limit, "replica promoted", func(ctx context.Context) error {
		n, err := c.MasterOf(ctx, slot)
		if err != nil {
			return err
		}
		if n == old {
			return errNotYet
		}
		got = n
		return nil
	})
	return got, err
}

// Close kills every node and removes the directory it created.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Kill()
	}
	if c.ownDir {
		os.RemoveAll(c.dir)
	}
}
