package harness

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/shop/internal/topo"
	"github.com/seckill-lab/shop/loadtest/internal/shops"
)

// Net is the network between a scenario's shops and their dependencies:
// instance i reaches Redis through Redis[i] and MySQL through MySQL[i],
// links of the nemesis of its own, so one instance can be slowed or cut
// while the others are fine. With namespaces (root), instance i also runs
// in Ns[i], so the kernel can cut it (iptables DROP or REJECT).
type Net struct {
	Nemesis *topo.Nemesis
	Redis   []*topo.Link
	MySQL   []*topo.Link // nil with SQLite: no database link to fault
	Ns      []*topo.Netns
	NsErr   error // why there are no namespaces, when they were asked for
}

// startNet makes the links (and namespaces) of n instances on b, and
// returns the settings that point instance i at its links, and where it
// runs.
func startNet(ctx context.Context, b *shops.Backend, n int, namespaces bool) (_ *Net, extra func(i int) []string, place func(i int) shops.Placement, err error) {
	nem, err := topo.StartNemesis(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	net := &Net{Nemesis: nem}
	defer func() {
		if err != nil {
			net.Close()
		}
	}()
	if namespaces {
		net.NsErr = topo.NetnsSupported()
		for i := 0; i < n && net.NsErr == nil; i++ {
			ns, err := topo.NewNetns(ctx)
			if err != nil {
				net.NsErr = err
				break
			}
			net.Ns = append(net.Ns, ns)
		}
		if net.NsErr != nil {
			for _, ns := range net.Ns {
				ns.Close()
			}
			net.Ns = nil
		}
	}
	ru, err := url.Parse(b.RedisURL)
	if err != nil || strings.Contains(b.RedisURL, ",") {
		return nil, nil, nil, fmt.Errorf("nemesis: a single Redis URL is needed, not %q", b.RedisURL)
	}
	var db *gomysql.Config
	if dsn := b.DSN(); dsn != "" {
		if db, err = gomysql.ParseDSN(dsn); err != nil {
			return nil, nil, nil, err
		}
	}
	settings := make([][]string, n)
	for i := range n {
		host := ""
		if net.Ns != nil {
			host = net.Ns[i].HostIP
		}
		rl, err := nem.Link(fmt.Sprintf("redis-%d", i+1), host, ru.Host)
		if err != nil {
			return nil, nil, nil, err
		}
		net.Redis = append(net.Redis, rl)
		u := *ru
		u.Host = rl.Addr()
		settings[i] = []string{"SHOP_REDIS_URL=" + u.String()}
		if db != nil {
			ml, err := nem.Link(fmt.Sprintf("mysql-%d", i+1), host, db.Addr)
			if err != nil {
				return nil, nil, nil, err
			}
			net.MySQL = append(net.MySQL, ml)
			c := *db
			c.Addr = ml.Addr()
			settings[i] = append(settings[i], "SHOP_MYSQL_DSN="+c.FormatDSN())
		}
		if net.Ns != nil {
			// The harness reaches the instance from the host side of its veth.
			settings[i] = append(settings[i], "SHOP_TRUSTED_PROXIES="+net.Ns[i].HostIP)
		}
	}
	extra = func(i int) []string { return settings[i] }
	if net.Ns != nil {
		place = func(i int) shops.Placement {
			return shops.Placement{Host: net.Ns[i].NsIP, Prefix: []string{"ip", "netns", "exec", net.Ns[i].Name}}
		}
	}
	return net, extra, place, nil
}

// Heal heals every link and every kernel cut.
func (n *Net) Heal(ctx context.Context) error {
	err := n.Nemesis.HealAll()
	for _, ns := range n.Ns {
		if e := ns.Heal(ctx); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// Close stops the nemesis and deletes the namespaces.
func (n *Net) Close() {
	n.Nemesis.Close()
	for _, ns := range n.Ns {
		ns.Close()
	}
}

// Describe says how the shops reach their dependencies.
func (n *Net) Describe() string {
	s := fmt.Sprintf("each instance through links of its own (toxiproxy, in the harness) to Redis%s", map[bool]string{true: " and MySQL", false: ""}[n.MySQL != nil])
	switch {
	case n.Ns != nil:
		s += ", each in a network namespace of its own (kernel cuts: iptables DROP and REJECT)"
	case n.NsErr != nil:
		s += "; no network namespaces (" + n.NsErr.Error() + "): toxiproxy faults only"
	}
	return s
}

// joinSettings is instance i's settings of a, then b's.
func joinSettings(a, b func(i int) []string) func(i int) []string {
	if a == nil {
		return b
	}
	return func(i int) []string { return append(a(i), b(i)...) }
}
