package topo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Netns is a network namespace of its own for one process (a shop
// instance), joined to the host by a veth pair: the process listens and
// connects on NsIP, the host side is HostIP. Its dependencies are reached
// through nemesis links listening on HostIP, and the kernel cuts it off
// from one of them with iptables rules inside the namespace: DROP (silence,
// so the process's own client timeouts are what is tested, not a proxy's)
// or REJECT with a TCP reset. Root only; NetnsSupported says why not.
type Netns struct {
	Name   string
	HostIP string
	NsIP   string
	host   string // the host side's device

	mu   sync.Mutex
	cuts []string
}

// CutMode is how the kernel cuts a path.
type CutMode string

// The kernel's cuts.
const (
	Drop   CutMode = "drop"   // packets vanish both ways: silence
	Reject CutMode = "reject" // packets to the dependency are answered with a TCP reset
)

var netnsSeq atomic.Int32

// NetnsSupported says whether namespaces can be made here, and if not why.
func NetnsSupported() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not on PATH (Debian: apt-get install -y iproute2 iptables)", tool)
		}
	}
	return nil
}

// NewNetns makes a namespace and its veth pair on a /30 of 10.211.0.0/16
// (the process id and a counter pick it, so runs side by side do not
// meet), with loopback up inside.
func NewNetns(ctx context.Context) (*Netns, error) {
	if err := NetnsSupported(); err != nil {
		return nil, err
	}
	seq := int(netnsSeq.Add(1))
	id := (os.Getpid()*16 + seq) % (1 << 14) // 16384 /30 subnets in a /16
	base := id * 4
	ip := func(k int) string { return fmt.Sprintf("10.211.%d.%d", (base+k)/256, (base+k)%256) }
	n := &Netns{Name: fmt.Sprintf("shopnet-%d", id), HostIP: ip(1), NsIP: ip(2), host: fmt.Sprintf("shv%d", id)}
	peer := fmt.Sprintf("shp%d", id)
	steps := [][]string{
		{"ip", "netns", "add", n.Name},
		{"ip", "link", "add", n.host, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", n.Name},
		{"ip", "addr", "add", n.HostIP + "/30", "dev", n.host},
		{"ip", "link", "set", n.host, "up"},
		{"ip", "netns", "exec", n.Name, "ip", "addr", "add", n.NsIP + "/30", "dev", peer},
		{"ip", "netns", "exec", n.Name, "ip", "link", "set", peer, "up"},
		{"ip", "netns", "exec", n.Name, "ip", "link", "set", "lo", "up"},
	}
	_ = run(ctx, "ip", "netns", "del", n.Name) // left over from a run that was killed
	_ = run(ctx, "ip", "link", "del", n.host)
	for _, s := range steps {
		if err := run(ctx, s[0], s[1:]...); err != nil {
			n.Close()
			return nil, err
		}
	}
	return n, nil
}

func run(ctx context.Context, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("topo: %s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Command is name run inside the namespace.
func (n *Netns) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
	cmd.SysProcAttr = childAttr()
	return cmd
}

// Cut makes the kernel cut the namespace's TCP to addr (HostIP:port, a
// link's address), open connections and new ones alike.
func (n *Netns) Cut(ctx context.Context, addr string, mode CutMode) error {
	host, port, ok := strings.Cut(addr, ":")
	if _, err := strconv.Atoi(port); !ok || err != nil {
		return fmt.Errorf("topo: cut %q: not host:port", addr)
	}
	var rules []string
	switch mode {
	case Drop:
		rules = []string{
			"OUTPUT -p tcp -d " + host + " --dport " + port + " -j DROP",
			"INPUT -p tcp -s " + host + " --sport " + port + " -j DROP",
		}
	case Reject:
		rules = []string{"OUTPUT -p tcp -d " + host + " --dport " + port + " -j REJECT --reject-with tcp-reset"}
	default:
		return fmt.Errorf("topo: unknown cut %q", mode)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, r := range rules {
		if err := n.iptables(ctx, "-A", r); err != nil {
			return err
		}
		n.cuts = append(n.cuts, r)
	}
	return nil
}

// Heal removes every cut.
func (n *Netns) Heal(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for _, r := range n.cuts {
		errs = append(errs, n.iptables(ctx, "-D", r))
	}
	n.cuts = nil
	return errors.Join(errs...)
}

func (n *Netns) iptables(ctx context.Context, op, rule string) error {
	return run(ctx, "ip", append([]string{"netns", "exec", n.Name, "iptables", "-w", op}, strings.Fields(rule)...)...)
}

// Close deletes the namespace and the veth pair.
func (n *Netns) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = run(ctx, "ip", "netns", "del", n.Name)
	_ = run(ctx, "ip", "link", "del", n.host)
}
