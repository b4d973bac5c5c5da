package topo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelOptions shape a Sentinel group. The zero value is one master
// with 2 replicas and 3 sentinels (quorum 2) on free ports.
type SentinelOptions struct {
	Name         string // master name; default "shop"
	Replicas     int    // default 2
	Sentinels    int    // default 3
	Port         int    // first data port; 0: free ports
	SentinelPort int    // first sentinel port; 0: free ports
	Dir          string // "" a new temporary one, removed by Close
	// DownAfter is down-after-milliseconds: how long a silent master is
	// waited for before the sentinels fail it over. Default 1 s (Redis: 30 s).
	DownAfter time.Duration
}

// Sentinel is one master, its replicas and the sentinels watching them.
// Data[0] starts as the master.
type Sentinel struct {
	Name      string
	Data      []*Node
	Sentinels []*Node
	dir       string
	ownDir    bool
}

// StartSentinel starts the group and waits until every sentinel sees the
// master, all replicas and all other sentinels. On error everything
// started is killed.
func StartSentinel(ctx context.Context, o SentinelOptions) (_ *Sentinel, err error) {
	if o.Name == "" {
		o.Name = "shop"
	}
	if o.Replicas <= 0 {
		o.Replicas = 2
	}
	if o.Sentinels <= 0 {
		o.Sentinels = 3
	}
	if o.DownAfter <= 0 {
		o.DownAfter = time.Second
	}
	s := &Sentinel{Name: o.Name, dir: o.Dir}
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "topo-sentinel-"); err != nil {
			return nil, err
		}
		s.ownDir = true
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	data, err := ports(o.Port, 1+o.Replicas)
	if err != nil {
		return nil, err
	}
	sports, err := ports(o.SentinelPort, o.Sentinels)
	if err != nil {
		return nil, err
	}
	for i, p := range data {
		var args []string
		if i > 0 {
			args = []string{"--replicaof", "127.0.0.1", strconv.Itoa(data[0])}
		}
		args = append(args, "--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
		n, err := newNode(filepath.Join(s.dir, strconv.Itoa(p)), p, args...)
		if err != nil {
			return nil, err
		}
		s.Data = append(s.Data, n)
		if err := n.Start(ctx); err != nil {
			return nil, err
		}
	}
	quorum := o.Sentinels/2 + 1
	for _, p := range sports {
		dir := filepath.Join(s.dir, "sentinel-"+strconv.Itoa(p))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		// Sentinel rewrites its configuration file, so each gets its own.
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\nsentinel down-after-milliseconds %[1]s %[4]d\n"+
			"sentinel failover-timeout %[1]s 10000\nsentinel parallel-syncs %[1]s 2\n", o.Name, data[0], quorum, o.DownAfter.Milliseconds())
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			return nil, err
		}
		n := &Node{Port: p, Dir: dir, LogPath: filepath.Join(dir, "sentinel.log")}
		n.args = []string{conf, "--sentinel", "--port", strconv.Itoa(p), "--bind", "127.0.0.1", "--dir", dir,
			"--logfile", n.LogPath, "--daemonize", "no"}
		s.Sentinels = append(s.Sentinels, n)
		if err := n.Start(ctx); err != nil {
			return nil, err
		}
	}
	err = poll(ctx, 30*time.Second, "sentinels see the group", func(ctx context.Context) error {
		for _, n := range s.Sentinels {
			cl := n.Client()
			m, err := cl.Do(ctx, "SENTINEL", "MASTER", o.Name).Result()
			cl.Close()
			if err != nil {
				return err
			}
			f := fields(m)
			if f["num-slaves"] != strconv.Itoa(o.Replicas) || f["num-other-sentinels"] != strconv.Itoa(o.Sentinels-1) {
				return fmt.Errorf("sentinel %s sees %s replicas and %s other sentinels", n.Addr(), f["num-slaves"], f["num-other-sentinels"])
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// fields turns SENTINEL MASTER's reply (a flat list or a map) into a map.
func fields(v any) map[string]string {
	out := map[string]string{}
	switch x := v.(type) {
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			out[fmt.Sprint(x[i])] = fmt.Sprint(x[i+1])
		}
	case map[any]any:
		for k, v := range x {
			out[fmt.Sprint(k)] = fmt.Sprint(v)
		}
	}
	return out
}

// URL is the SHOP_REDIS_URL of the group: the sentinels' addresses,
// comma-separated (used with SHOP_REDIS_MASTER = Name).
func (s *Sentinel) URL() string {
	a := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		a[i] = n.Addr()
	}
	return strings.Join(a, ",")
}

// Client is a failover client that follows the sentinels (the caller closes it).
func (s *Sentinel) Client() *redis.Client {
	return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Name, SentinelAddrs: strings.Split(s.URL(), ","),
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second})
}

// Master is the data node the first answering sentinel names as master.
func (s *Sentinel) Master(ctx context.Context) (*Node, error) {
	for _, n := range s.Sentinels {
		if !n.Running() {
			continue
		}
		cl := redis.NewSentinelClient(&redis.Options{Addr: n.Addr(), DialTimeout: time.Second})
		a, err := cl.GetMasterAddrByName(ctx, s.Name).Result()
		cl.Close()
		if err != nil || len(a) != 2 {
			continue
		}
		for _, d := range s.Data {
			if d.Addr() == a[0]+":"+a[1] {
				return d, nil
			}
		}
		return nil, fmt.Errorf("topo: sentinel names unknown master %s:%s", a[0], a[1])
	}
	return nil, fmt.Errorf("topo: no sentinel answers for %s", s.Name)
}

// Failover asks one sentinel for SENTINEL FAILOVER (a replica is promoted
// without waiting for the master to fail).
func (s *Sentinel) Failover(ctx context.Context) error {
	for _, n := range s.Sentinels {
		if !n.Running() {
			continue
		}
		cl := redis.NewSentinelClient(&redis.Options{Addr: n.Addr(), DialTimeout: time.Second})
		err := cl.Failover(ctx, s.Name).Err()
		cl.Close()
		return err
	}
	return fmt.Errorf("topo: no sentinel running")
}

// WaitNewMaster waits until the sentinels name a master other than old and
// that node answers as a master.
func (s *Sentinel) WaitNewMaster(ctx context.Context, old *Node, limit time.Duration) (*Node, error) {
	var got *Node
	err := poll(ctx, limit, "new master", func(ctx context.Context) error {
		m, err := s.Master(ctx)
		if err != nil {
			return err
		}
		if m == old {
			return errNotYet
		}
		cl := m.Client()
		defer cl.Close()
		info, err := cl.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "role:master") {
			return fmt.Errorf("%s named master but says it is not", m.Addr())
		}
		got = m
		return nil
	})
	return got, err
}

// Close kills every process and removes the directory it created.
func (s *Sentinel) Close() {
	for _, n := range append(append([]*Node{}, s.Sentinels...), s.Data...) {
		n.Kill()
	}
	if s.ownDir {
		os.RemoveAll(s.dir)
	}
}
