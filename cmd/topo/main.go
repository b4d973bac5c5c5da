// Command topo starts a real Redis topology on loopback and keeps it
// up until interrupted (or --for runs out): a Cluster of 3 masters and 3
// replicas, or a Sentinel group of 1 master, 2 replicas and 3 sentinels.
// CI runs the Redis-using packages' tests against the Cluster it starts,
// and the operations chapter uses it to show a failover. mariadb-semisync
// is a MariaDB primary with two semi-synchronous replicas behind haproxy
// (needs mariadbd and haproxy), galera a three-node Galera cluster with one
// writer behind haproxy (needs galera-4 and rsync too); both print the DSN
// of a user without SUPER. rabbitmq is a private three-node RabbitMQ
// cluster (needs rabbitmq-server) beside the machine's own broker; it
// prints SHOP_AMQP_URL, every node's URL.
//
//	topo cluster  [--port 17000] [--env-file F] [--for 30m]
//	topo sentinel [--port 17100] [--sentinel-port 26379] [--env-file F] [--for 30m]
//	topo mariadb-semisync [--dir D] [--env-file F] [--for 30m]
//	topo galera [--dir D] [--env-file F] [--for 30m]
//	topo rabbitmq [--dir D] [--env-file F] [--for 30m]
//
// It prints SHOP_REDIS_URL (and SHOP_REDIS_MASTER) once the topology is
// healthy; every redis-server it started dies with it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/seckill-lab/shop/internal/topo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "topo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || !slices.Contains([]string{"cluster", "sentinel", "mariadb-semisync", "galera", "rabbitmq"}, args[0]) {
		return errors.New("usage: topo cluster|sentinel|mariadb-semisync|galera|rabbitmq [--port N] [--sentinel-port N] [--dir D] [--env-file F] [--for D]")
	}
	kind := args[0]
	fs := flag.NewFlagSet("topo "+kind, flag.ContinueOnError)
	port := fs.Int("port", 0, "first data port (cluster bus ports: port+50...); 0: free ports")
	sport := fs.Int("sentinel-port", 0, "first sentinel port (sentinel only); 0: free ports")
	dir := fs.String("dir", "", "working directory (default: a temporary one, removed at exit)")
	envFile := fs.String("env-file", "", "also write the printed variables to this file, for `source`")
	limit := fs.Duration("for", 30*time.Minute, "stop after this long")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	start, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var env string
	switch kind {
	case "cluster":
		c, err := topo.StartCluster(start, topo.ClusterOptions{Port: *port, Dir: *dir})
		if err != nil {
			return err
		}
		defer c.Close()
		env = fmt.Sprintf("SHOP_REDIS_URL=%s\n", c.URL())
	case "sentinel":
		s, err := topo.StartSentinel(start, topo.SentinelOptions{Port: *port, SentinelPort: *sport, Dir: *dir})
		if err != nil {
			return err
		}
		defer s.Close()
		env = fmt.Sprintf("SHOP_REDIS_URL=%s\nSHOP_REDIS_MASTER=%s\n", s.URL(), s.Name)
	case "rabbitmq":
		r, err := topo.StartRabbitMQ(start, topo.RabbitMQOptions{Dir: *dir})
		if err != nil {
			return err
		}
		defer r.Close()
		env = fmt.Sprintf("SHOP_AMQP_URL=%s\n", r.URL())
	case "mariadb-semisync", "galera":
		var db interface {
			CreateUser(ctx context.Context, user, db string) error
			DSN(user, db string) string
			Close()
		}
		var err error
		if kind == "galera" {
			db, err = topo.StartGalera(start, topo.GaleraOptions{Dir: *dir})
		} else {
			db, err = topo.StartSemiSync(start, topo.SemiSyncOptions{Dir: *dir})
		}
		if err != nil {
			return err
		}
		defer db.Close()
		if err := db.CreateUser(start, "shop", "shop"); err != nil {
			return err
		}
		env = fmt.Sprintf("SHOP_MYSQL_DSN=%s\n", db.DSN("shop", "shop"))
	}
	if *envFile != "" {
		if err := os.WriteFile(*envFile, []byte(env), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprint(stdout, env)
	select {
	case <-ctx.Done():
	case <-time.After(*limit):
	}
	return nil
}
