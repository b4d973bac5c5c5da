package topo

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/queue"
)

// TestRabbitMQLeaderKilled starts the cluster, declares a quorum queue
// through the shop's publisher (its URL lists every node), and checks the
// queue has a member on each node; then it kills the queue's leader: a
// publish through the same URL list is confirmed by the two left, and the
// killed node restarts, rejoins and is a member online again.
func TestRabbitMQLeaderKilled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	r, err := StartRabbitMQ(ctx, RabbitMQOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	const name = "topo-test"
	pub := queue.NewPublisher(queue.Config{URL: r.URL(), Queue: name})
	defer pub.Close()
	if err := pub.Publish(ctx, "m1", []byte("1")); err != nil {
		t.Fatal(err)
	}
	q, err := r.Quorum(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Members) != 3 {
		t.Fatalf("quorum queue members %v, want the three nodes", q.Members)
	}
	q.Leader.Kill()
	// The first publishes may meet the dead node's connection, or the
	// queue between leaders.
	if err := poll(ctx, 30*time.Second, "a publish confirmed after the leader died", func(ctx context.Context) error {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		err := pub.Publish(pctx, "m2", []byte("2"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := q.Leader.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitClustered(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := r.WaitOnline(ctx, name, q.Leader, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed leader %s back in the queue after %s", q.Leader.Name, time.Since(t0).Round(time.Millisecond))
}
