package ride

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestTakenOnce: a ride goes with the first round trip that takes it and
// never again; it has replied only once its taker said so; no ride, or a
// nil one, is nothing to take and never replied.
func TestTakenOnce(t *testing.T) {
	bg := context.Background()
	if With(bg, nil) != bg || Take(bg) != nil || (*Ride)(nil).Replied() {
		t.Fatal("a nil ride, or none, must be nothing")
	}
	get := redis.NewStringCmd(bg, "get", "k")
	r := New(get)
	ctx := With(bg, r)
	got := Take(ctx)
	if got != r || len(got.Cmds()) != 1 || got.Cmds()[0] != get {
		t.Fatalf("Take = %v, want the ride with its command", got)
	}
	if Take(ctx) != nil {
		t.Error("a ride taken twice would be sent twice")
	}
	if r.Replied() {
		t.Error("replied before its taker said so")
	}
	r.Done()
	if !r.Replied() {
		t.Error("not replied after Done")
	}
}
