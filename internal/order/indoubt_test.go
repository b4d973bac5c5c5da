package order_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/order"
	"github.com/seckill-lab/shop/internal/platform"
	"github.com/seckill-lab/shop/internal/testenv"
	"github.com/seckill-lab/shop/internal/testenv/stocktest"
	"github.com/seckill-lab/shop/internal/testenv/testdb"
)

// TestInDoubtCommitResolved cuts order's database connection at
// the batch's COMMIT, once after the server got it (the order committed,
// its answer lost), once before (nothing committed), and once after with
// the database unreachable for a while (a failover under way): each time
// the buyer is answered with what the database holds, one order, the stock
// and the ledger in step. Without the resolution the buyers got an error
// although the orders were placed; without its retries, the third. The
// same holds for a batch sent as one packet (its text ends in COMMIT).
func TestInDoubtCommitResolved(t *testing.T) {
	t.Parallel()
	t.Run("transaction", func(t *testing.T) { t.Parallel(); testInDoubt(t, false) })
	t.Run("packet", func(t *testing.T) { t.Parallel(); testInDoubt(t, true) })
}

func testInDoubt(t *testing.T, packets bool) {
	dsn := testenv.MySQL(t)
	rdb, prefix := testenv.RedisClient(t)
	f := &fixture{&stocktest.Fixture{DB: testdb.Open(t, dsn, "").DB, RDB: rdb, Prefix: prefix}}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cut := startCommitCutter(t, cfg.Addr)
	cfg.Addr = cut.addr
	ctx := context.Background()
	viaCutter, err := platform.OpenDB(ctx, cfg.FormatDSN(), "", discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { viaCutter.Close() })
	inv, _ := f.Inventory(t, inventory.Config{Strategy: inventory.LockFence})
	reg := prometheus.NewRegistry()
	oc := order.Config{BatchMax: 64}
	if packets {
		if oc.Packets, err = viaCutter.Packets(ctx, 2); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { oc.Packets.Close() })
	}
	orders := order.New(viaCutter.DB, inv, f.Markers(), oc, order.NewMetrics(reg), discard())
	t.Cleanup(orders.Wait)
	id := f.Product(t, inv, 100, 11)
	if _, _, err := orders.Seckill(ctx, 100, id); err != nil { // the price is known after it: later batches are packets
		t.Fatal(err)
	}

	for i, c := range []struct {
		forward bool
		down    time.Duration
	}{{true, 0}, {false, 0}, {true, 600 * time.Millisecond}} {
		forward := c.forward
		user := int64(i + 1)
		cut.arm(forward, c.down)
		o, created, err := orders.Seckill(ctx, user, id)
		if cut.cuts.Load() != int64(i+1) {
			t.Fatalf("user %d: the cutter cut %d connections, want %d: the test did not test", user, cut.cuts.Load(), i+1)
		}
		rows := f.Count(t, "SELECT COUNT(*) FROM orders WHERE user_id = ? AND product_id = ?", user, id)
		if err != nil || !created || o.OrderNo == "" || rows != 1 {
			t.Errorf("COMMIT cut (forwarded %v): order %q, created %v, err %v; %d rows; want the buyer's one order, created", forward, o.OrderNo, created, err, rows)
		}
	}
	if stock := f.stock(t, id); stock != 7 {
		t.Errorf("stock %d, want 7", stock)
	}
	if n := f.Count(t, "SELECT COALESCE(-SUM(delta), 0) FROM stock_ledger WHERE product_id = ? AND reason = 'order'", id); n != 4 {
		t.Errorf("units in the ledger's order rows: %d, want 4", n)
	}
	if packets {
		if got := counterValue(t, reg, "shop_orders_packets_total", "committed"); got != 2 {
			t.Errorf("packets committed: %v, want 2 (the cut ones that landed)", got)
		}
	}
	for outcome, want := range map[string]float64{"landed": 2, "rolled_back": 1} {
		if got := counterValue(t, reg, "shop_orders_commits_in_doubt_total", outcome); got != want {
			t.Errorf("commits in doubt %s: %v, want %v", outcome, got, want)
		}
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// commitCutter is a TCP proxy in front of MySQL that, once armed, cuts the
// connection that sends COMMIT: after forwarding it (the server commits,
// the client never hears) or before (the server rolls back); then, for
// down, it closes every new connection at once.
type commitCutter struct {
	addr      string
	armed     atomic.Int32 // 0 off, 1 cut after forwarding, 2 cut before
	cuts      atomic.Int64
	down      atomic.Int64 // nanoseconds of the next cut's outage
	downUntil atomic.Int64 // unix nanoseconds
}

func (c *commitCutter) arm(forward bool, down time.Duration) {
	c.down.Store(int64(down))
	if forward {
		c.armed.Store(1)
	} else {
		c.armed.Store(2)
	}
}

func startCommitCutter(t *testing.T, target string) *commitCutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &commitCutter{addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			if time.Now().UnixNano() < c.downUntil.Load() {
				client.Close()
				continue
			}
			server, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				client.Close()
				continue
			}
			var muted atomic.Bool
			go testenv.CopyAnswers(client, server, &muted)
			go c.pump(client, server, &muted)
		}
	}()
	return c
}

// pump copies client packets to the server, one MySQL packet at a time
// (3-byte length, sequence number, payload), and cuts at an armed COMMIT.
func (c *commitCutter) pump(client, server net.Conn, muted *atomic.Bool) {
	defer server.Close()
	defer client.Close()
	head := make([]byte, 4)
	for {
		if _, err := io.ReadFull(client, head); err != nil {
			return
		}
		n := int(binary.LittleEndian.Uint32(append(head[:3:3], 0)))
		body := make([]byte, n)
		if _, err := io.ReadFull(client, body); err != nil {
			return
		}
		commit := n >= 7 && body[0] == 0x03 && strings.HasSuffix(string(body[1:]), "COMMIT") // a COMMIT, or a packet's last statement
		mode := c.armed.Load()
		if commit && mode == 2 && c.armed.CompareAndSwap(2, 0) {
			c.cuts.Add(1)
			return // never forwarded: the server sees the client vanish and rolls back
		}
		cutAfter := commit && mode == 1 && c.armed.CompareAndSwap(1, 0)
		if cutAfter {
			muted.Store(true) // the server's OK goes nowhere
		}
		if _, err := server.Write(append(head, body...)); err != nil {
			return
		}
		if cutAfter {
			c.downUntil.Store(time.Now().Add(time.Duration(c.down.Load())).UnixNano())
			c.cuts.Add(1)
			time.Sleep(time.Second) // the server commits (a packet runs its statements first)
			return
		}
	}
}
