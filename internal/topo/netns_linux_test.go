package topo

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// The kernel kind: a process in a namespace of its own reaches Redis
// through a link on the host side of its veth; iptables DROP inside the
// namespace makes it wait out its own timeout, REJECT resets it at once,
// and healing restores it. Skipped only where CI is not root.
func TestNetnsCut(t *testing.T) {
	if err := NetnsSupported(); err != nil {
		if os.Getenv("CI") != "" && os.Geteuid() == 0 {
			t.Fatalf("CI runs as root but: %v", err)
		}
		t.Skip(err)
	}
	n, a, _ := nemesisRedis(t)
	ctx := context.Background()
	ns, err := NewNetns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	l, err := n.Link("redis-ns", ns.HostIP, a.Upstream)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(l.Addr(), ":")
	// PING through the link from inside the namespace, bash's /dev/tcp, at
	// most 1.5 s.
	nsPing := func() (time.Duration, string) {
		script := "exec 3<>/dev/tcp/" + host + "/" + port + " && printf 'PING\\r\\n' >&3 && head -c 5 <&3"
		cmd := ns.Command("timeout", "1.5", "bash", "-c", script)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		s := strings.TrimSpace(string(out))
		if err != nil {
			s += " (" + err.Error() + ")"
		}
		return time.Since(start), s
	}
	if d, out := nsPing(); !strings.HasPrefix(out, "+PONG") {
		t.Fatalf("from the namespace before any cut: %q after %s", out, d)
	}
	if err := ns.Cut(ctx, l.Addr(), Drop); err != nil {
		t.Fatal(err)
	}
	d, out := nsPing()
	t.Logf("DROP:   %6s %s", d.Round(time.Millisecond), out)
	if strings.Contains(out, "PONG") || d < 1400*time.Millisecond {
		t.Errorf("DROP: %q after %s, want silence until the 1.5s timeout", out, d)
	}
	if err := ns.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ns.Cut(ctx, l.Addr(), Reject); err != nil {
		t.Fatal(err)
	}
	d, out = nsPing()
	t.Logf("REJECT: %6s %s", d.Round(time.Millisecond), out)
	if strings.Contains(out, "PONG") || d > time.Second || !strings.Contains(out, "refused") {
		t.Errorf("REJECT: %q after %s, want connection refused at once", out, d)
	}
	if err := ns.Heal(ctx); err != nil {
		t.Fatal(err)
	}
	if d, out := nsPing(); !strings.HasPrefix(out, "+PONG") {
		t.Errorf("after healing: %q after %s", out, d)
	}
}
