// Package topo starts real infrastructure as local processes on loopback,
// for tests, the load-test harness and people (cmd/topo), so the topology
// a chapter describes is the one the tests ran against. No Docker: it runs
// the machine's own redis-server, redis-cli, nginx, mariadbd (with
// galera-4), haproxy and rabbitmq-server, toxiproxy in process, and iptables.
//
// Every topology has one shape:
//
//   - Start...(ctx, Options) starts it and returns once it is healthy;
//   - methods give the addresses to connect to (a URL, a DSN);
//   - methods inject the faults it can suffer (kill, pause, fail over, cut);
//   - Close stops every process it started and removes its temporary files.
//
// Today: a Redis Cluster of masters with replicas (StartCluster), a
// Sentinel group (StartSentinel), one MariaDB server that a test may kill or
// turn read-only (StartMariaDB), a MariaDB primary with two
// semi-synchronous replicas behind haproxy, with the failover step a
// monitor runs (StartSemiSync, HAProxy), a three-node Galera cluster with
// one writer behind haproxy (StartGalera), nginx in front of shops
// (StartNginx), a private three-node RabbitMQ cluster beside the machine's
// own broker (StartRabbitMQ), and the network nemesis: toxiproxy links that slow, cut,
// black-hole or reset one path (StartNemesis) and, as root, network
// namespaces cut with iptables (NewNetns). Ports come from below the kernel's
// ephemeral range (FreePorts), so an outgoing connection cannot take one
// between the probe and the bind.
package topo
