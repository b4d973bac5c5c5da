// Package shops is the cluster of shop processes a scenario runs against:
// it builds cmd/shop, gives each run a backend of its own (a fresh MySQL
// database or SQLite file and a Redis key prefix on a shared, private or
// in-process Redis), starts N instances on loopback ports, kills and
// restarts them, and reads their metrics. Infrastructure that is not the
// shop (redis-server, nginx) comes from internal/topo.
package shops
