package topo

import (
	"context"
	"testing"
	"time"
)

// TestGaleraWriterKilled kills the writer under four writers: every
// insert acknowledged is on the new writer, haproxy routes there, and the
// killed node rejoins and catches up.
func TestGaleraWriterKilled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	g, err := StartGalera(ctx, GaleraOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	db := shopTable(t, ctx, g.Primary(), g.DSN("shop", "shopdb"))

	w := startInserts(ctx, db, 4)
	w.waitFor(ctx, 200)
	old := g.KillWriter()
	t0 := time.Now()
	writer, err := g.WaitNewWriter(ctx, old, 30*time.Second)
	if err != nil {
		w.stop()
		t.Fatalf("no new writer: %v", err)
	}
	t.Logf("new writer %s after %s", writer.Addr(), time.Since(t0).Round(time.Millisecond))
	before := w.n.Load()
	w.waitFor(ctx, before+100) // writes resume through haproxy
	w.stop()
	direct := rootDB(t, writer, "shopdb")
	if missing := w.missing(ctx, direct); missing > 0 {
		t.Errorf("%d of %d acknowledged inserts are not on the new writer", missing, w.n.Load())
	}
	t0 = time.Now()
	if err := g.Rejoin(ctx, old, 90*time.Second); err != nil {
		t.Fatalf("rejoin: %v", err)
	}
	t.Logf("rejoined in %s", time.Since(t0).Round(time.Millisecond))
	if err := caughtUp(ctx, direct, rootDB(t, old, "shopdb")); err != nil {
		t.Error("the rejoined node: ", err)
	}
	if g.Primary() != writer {
		t.Errorf("the writer moved to %s when the old one rejoined", g.Primary().Addr())
	}
}
