package idem

import (
	"context"
	"testing"
	"time"
)

func TestMarkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testRedis(t)
	m := NewMarkers(rdb, prefix, 200*time.Millisecond)
	if v, ok, err := m.Get(ctx, "u1:p7"); err != nil || ok || v != "" {
		t.Fatalf("unmarked Get = %q, %v, %v", v, ok, err)
	}
	if err := m.Mark(ctx, "u1:p7", "S123"); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := m.Get(ctx, "u1:p7"); err != nil || !ok || v != "S123" {
		t.Fatalf("marked Get = %q, %v, %v", v, ok, err)
	}
	if _, ok, _ := m.Get(ctx, "u2:p7"); ok {
		t.Fatal("marker leaked to another key")
	}
	time.Sleep(400 * time.Millisecond)
	if _, ok, err := m.Get(ctx, "u1:p7"); err != nil || ok {
		t.Fatalf("marker outlived its ttl: %v, %v", ok, err)
	}
}
