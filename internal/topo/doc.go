// Package topo starts real infrastructure as local processes on loopback,
// for tests, the load-test harness and people (cmd/topo), so the topology
// a chapter describes is the one the tests ran against. No Docker: it runs
// the machine's own redis-server, redis-cli, nginx (and, as they are added,
// mariadbd, haproxy and the network nemesis).
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
// turn read-only (StartMariaDB), and a MariaDB primary with two
// semi-synchronous replicas behind haproxy, with the failover step a
// monitor runs (StartSemiSync, HAProxy). Ports come from below the kernel's
// ephemeral range (FreePorts), so an outgoing connection cannot take one
// between the probe and the bind.
package topo
