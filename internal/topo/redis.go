package topo

import (
	"context"
	"os/exec"
	"path/filepath"
)

// Redis is one standalone redis-server on a loopback port keeping nothing
// on disk: a private Redis a scenario may kill, restart (all data lost)
// and flush without touching anyone else's.
type Redis struct {
	*Node
}

// RedisInstalled reports whether redis-server is on PATH.
func RedisInstalled() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// StartRedis starts a standalone redis-server with its directory and log
// in dir and returns once it answers PING.
func StartRedis(ctx context.Context, dir string) (*Redis, error) {
	p, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	n, err := newNode(filepath.Clean(dir), p[0])
	if err != nil {
		return nil, err
	}
	r := &Redis{Node: n}
	if err := n.Start(ctx); err != nil {
		n.Kill()
		return nil, err
	}
	return r, nil
}

// URL is the redis:// URL of database 0.
func (r *Redis) URL() string { return "redis://" + r.Addr() + "/0" }

// Restart kills the server and starts it again on the same port: every
// key is gone.
func (r *Redis) Restart(ctx context.Context) error {
	r.Kill()
	return r.Start(ctx)
}

// Close kills the server.
func (r *Redis) Close() { r.Kill() }
