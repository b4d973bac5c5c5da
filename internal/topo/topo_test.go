package topo

import (
	"context"
	"testing"
	"time"
)

// TestClusterFailover: the cluster serves every slot, and after SIGKILL of
// the master that owns a key's slot, its replica takes the slot over and
// the key's writes go on.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := StartCluster(ctx, ClusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if len(c.Nodes) != 6 {
		t.Fatalf("%d nodes, want 3 masters + 3 replicas", len(c.Nodes))
	}
	cc := c.Client()
	t.Cleanup(func() { cc.Close() })
	const key = "lock:{product:1}"
	if err := cc.Set(ctx, key, "a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := cc.Wait(ctx, 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	slot, err := c.KeySlot(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	old, err := c.MasterOf(ctx, slot)
	if err != nil {
		t.Fatal(err)
	}
	old.Kill()
	promoted, err := c.WaitPromoted(ctx, slot, old, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if promoted == old {
		t.Fatal("same master after kill")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cc.Set(ctx, key, "b", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes to %s do not resume after failover: %v", key, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The killed master comes back as a replica of the promoted one.
	if err := old.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if now, _ := c.MasterOf(ctx, slot); now != promoted {
		t.Fatalf("slot %d moved back to %v after the old master returned", slot, now)
	}
}

// TestSentinelFailover: SENTINEL FAILOVER and SIGKILL of the master each
// promote a replica, and the failover client follows.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := StartSentinel(ctx, SentinelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	cl := s.Client()
	t.Cleanup(func() { cl.Close() })
	m0, err := s.Master(ctx)
	if err != nil || m0 != s.Data[0] {
		t.Fatalf("master %v, %v; want %s", m0, err, s.Data[0].Addr())
	}
	if err := s.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	m1, err := s.WaitNewMaster(ctx, m0, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	m1.Kill()
	m2, err := s.WaitNewMaster(ctx, m1, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for cl.Set(ctx, "k", "v", 0).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("failover client does not reach the new master %s", m2.Addr())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
