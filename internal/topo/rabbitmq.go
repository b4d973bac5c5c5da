package topo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbitBin is where Debian's rabbitmq-server package keeps the server and
// its command-line tools (/usr/sbin/rabbitmq-server would switch to the
// user rabbitmq and the machine's own node).
const rabbitBin = "/usr/lib/rabbitmq/bin"

// RabbitMQOptions shape a three-node RabbitMQ cluster.
type RabbitMQOptions struct {
	Dir string // working directory; "" a new temporary one, removed by Close
}

// RabbitMQ is a private three-node RabbitMQ cluster on loopback: nodes
// topoN-<id>@localhost with AMQP and distribution ports of their own, their
// data and logs under one directory, one Erlang cookie. It shares only
// epmd with the machine's own broker (rabbit@localhost on 5672). A quorum
// queue declared once the cluster formed has a member on every node.
type RabbitMQ struct {
	Nodes []*RabbitNode

	dir    string
	ownDir bool
}

// RabbitNode is one rabbitmq-server of the cluster. Kill and Start keep
// its name, ports and data, so a killed node comes back as a member.
type RabbitNode struct {
	Name     string // node name, topoN-<id>@localhost
	Port     int    // AMQP
	DistPort int    // Erlang distribution
	LogPath  string
	env      []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// RabbitMQInstalled reports whether Debian's rabbitmq-server is installed.
func RabbitMQInstalled() bool {
	_, err := os.Stat(filepath.Join(rabbitBin, "rabbitmq-server"))
	return err == nil
}

// StartRabbitMQ starts three nodes, joins the second and third to the
// first (rabbitmqctl join_cluster) and returns once all three run in one
// cluster.
func StartRabbitMQ(ctx context.Context, o RabbitMQOptions) (_ *RabbitMQ, err error) {
	if !RabbitMQInstalled() {
		return nil, fmt.Errorf("topo: %s/rabbitmq-server is missing (Debian: apt-get install rabbitmq-server)", rabbitBin)
	}
	r := &RabbitMQ{}
	if r.dir, r.ownDir, err = workDir(o.Dir, "topo-rabbitmq-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if err := r.configure(); err != nil {
		return nil, err
	}
	errs := make([]error, len(r.Nodes))
	var wg sync.WaitGroup
	for i, n := range r.Nodes {
		wg.Go(func() { errs[i] = n.Start(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, n := range r.Nodes[1:] {
		if err := r.join(ctx, n); err != nil {
			return nil, err
		}
	}
	return r, r.WaitClustered(ctx, 30*time.Second)
}

// configure writes the cookie, the configuration and each node's
// environment.
func (r *RabbitMQ) configure() error {
	ports, err := FreePorts(6)
	if err != nil {
		return err
	}
	id := make([]byte, 4)
	cookie := make([]byte, 16)
	_, _ = rand.Read(id)
	_, _ = rand.Read(cookie)
	files := map[string]string{
		".erlang.cookie":    strings.ToUpper(hex.EncodeToString(cookie)),
		"enabled_plugins":   "[].\n",
		"rabbitmq-env.conf": "", // not the machine's /etc/rabbitmq/rabbitmq-env.conf
	}
	for name, body := range files {
		mode := os.FileMode(0o644)
		if name == ".erlang.cookie" {
			mode = 0o400
		}
		if err := os.WriteFile(filepath.Join(r.dir, name), []byte(body), mode); err != nil {
			return err
		}
	}
	for i := range 3 {
		n := &RabbitNode{Name: fmt.Sprintf("topo%d-%s@localhost", i, hex.EncodeToString(id)), Port: ports[2*i], DistPort: ports[2*i+1]}
		dir := filepath.Join(r.dir, "node"+strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		conf := filepath.Join(dir, "rabbitmq.conf")
		if err := os.WriteFile(conf, fmt.Appendf(nil, "listeners.tcp.1 = 127.0.0.1:%d\nlog.file.level = info\n", n.Port), 0o644); err != nil {
			return err
		}
		n.LogPath = filepath.Join(dir, "log", n.Name+".log")
		n.env = append(os.Environ(),
			"HOME="+r.dir, // the cookie, for the server and rabbitmqctl
			"RABBITMQ_NODENAME="+n.Name,
			"RABBITMQ_NODE_PORT="+strconv.Itoa(n.Port),
			"RABBITMQ_DIST_PORT="+strconv.Itoa(n.DistPort),
			"RABBITMQ_CONFIG_FILE="+conf,
			"RABBITMQ_CONF_ENV_FILE="+filepath.Join(r.dir, "rabbitmq-env.conf"),
			"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(r.dir, "enabled_plugins"),
			"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
			"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
			"ERL_EPMD_ADDRESS=127.0.0.1",
			// The script then execs the VM instead of waiting on it, so a
			// SIGKILL reaches the node itself.
			"RUNNING_UNDER_SYSTEMD=true",
		)
		r.Nodes = append(r.Nodes, n)
	}
	return nil
}

// join makes n a member of the first node's cluster.
func (r *RabbitMQ) join(ctx context.Context, n *RabbitNode) error {
	for _, args := range [][]string{{"stop_app"}, {"join_cluster", r.Nodes[0].Name}, {"start_app"}} {
		if _, err := n.Ctl(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// URL is every node's amqp:// URL (guest, vhost /), comma separated, the
// form SHOP_AMQP_URL takes.
func (r *RabbitMQ) URL() string {
	var out []string
	for _, n := range r.Nodes {
		out = append(out, n.URL())
	}
	return strings.Join(out, ",")
}

// URL is the node's amqp:// URL.
func (n *RabbitNode) URL() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.Port) }

// Running reports whether the node's process is alive.
func (n *RabbitNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// Start starts the node and waits up to 60 s for its AMQP port to answer.
// A node that was a member rejoins its cluster on its own.
func (n *RabbitNode) Start(ctx context.Context) error {
	n.mu.Lock()
	cmd := exec.Command(filepath.Join(rabbitBin, "rabbitmq-server"))
	cmd.Env = n.env
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		n.mu.Unlock()
		return fmt.Errorf("topo: start rabbitmq-server %s: %w", n.Name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	return poll(ctx, 60*time.Second, "rabbitmq "+n.Name+" answering on "+strconv.Itoa(n.Port), func(context.Context) error {
		select {
		case <-exited:
			return fmt.Errorf("exited at start; log %s:\n%s", n.LogPath, tail(n.LogPath))
		default:
		}
		conn, err := amqp.DialConfig(n.URL(), amqp.Config{Dial: amqp.DefaultDial(time.Second)})
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

// Kill sends SIGKILL to the node and waits for it to be gone.
func (n *RabbitNode) Kill() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.cmd = nil
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// Ctl runs rabbitmqctl against the node and returns its output.
func (n *RabbitNode) Ctl(ctx context.Context, args ...string) ([]byte, error) {
	return n.tool(ctx, "rabbitmqctl", args...)
}

func (n *RabbitNode) tool(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(rabbitBin, name), append([]string{"-n", n.Name, "-q"}, args...)...)
	cmd.Env = n.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("topo: %s %s on %s: %w: %s", name, strings.Join(args, " "), n.Name, err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// WaitClustered waits until a running node sees every node running in its
// cluster.
func (r *RabbitMQ) WaitClustered(ctx context.Context, limit time.Duration) error {
	return poll(ctx, limit, "a cluster of three running nodes", func(ctx context.Context) error {
		out, err := r.live().Ctl(ctx, "cluster_status", "--formatter", "json")
		if err != nil {
			return err
		}
		var st struct {
			Running []string `json:"running_nodes"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			return fmt.Errorf("cluster_status: %w: %s", err, out)
		}
		if len(st.Running) != len(r.Nodes) {
			return fmt.Errorf("running nodes %v", st.Running)
		}
		return nil
	})
}

// live is the first node whose process runs (the first node if none).
func (r *RabbitMQ) live() *RabbitNode {
	for _, n := range r.Nodes {
		if n.Running() {
			return n
		}
	}
	return r.Nodes[0]
}

// QuorumQueue is where a quorum queue's members are.
type QuorumQueue struct {
	Leader  *RabbitNode
	Members []string // node names
	Online  []string
}

// Quorum reports the leader and members of the quorum queue name.
func (r *RabbitMQ) Quorum(ctx context.Context, name string) (QuorumQueue, error) {
	out, err := r.live().Ctl(ctx, "list_queues", "name", "leader", "members", "online", "--formatter", "json")
	if err != nil {
		return QuorumQueue{}, err
	}
	var qs []struct {
		Name    string   `json:"name"`
		Leader  string   `json:"leader"`
		Members []string `json:"members"`
		Online  []string `json:"online"`
	}
	if err := json.Unmarshal(out, &qs); err != nil {
		return QuorumQueue{}, fmt.Errorf("topo: list_queues: %w: %s", err, out)
	}
	for _, q := range qs {
		if q.Name != name {
			continue
		}
		res := QuorumQueue{Members: q.Members, Online: q.Online}
		for _, n := range r.Nodes {
			if n.Name == q.Leader {
				res.Leader = n
			}
		}
		if res.Leader == nil {
			return res, fmt.Errorf("topo: queue %s has no leader among the nodes (%q)", name, q.Leader)
		}
		return res, nil
	}
	return QuorumQueue{}, fmt.Errorf("topo: no queue %s", name)
}

// WaitOnline waits until node n is an online member of the quorum queue
// name (a restarted node has rejoined and caught up with the queue).
func (r *RabbitMQ) WaitOnline(ctx context.Context, name string, n *RabbitNode, limit time.Duration) error {
	return poll(ctx, limit, n.Name+" online in queue "+name, func(ctx context.Context) error {
		q, err := r.Quorum(ctx, name)
		if err != nil {
			return err
		}
		if !slices.Contains(q.Online, n.Name) {
			return fmt.Errorf("online %v", q.Online)
		}
		return nil
	})
}

// Close kills every node and removes the directory if it made it.
func (r *RabbitMQ) Close() {
	for _, n := range r.Nodes {
		n.Kill()
	}
	if r.ownDir {
		_ = os.RemoveAll(r.dir)
	}
}
