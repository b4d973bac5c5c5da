package order

import (
	"testing"
	"time"

	"github.com/seckill-lab/shop/internal/dbx"
	"github.com/seckill-lab/shop/internal/inventory"
	"github.com/seckill-lab/shop/internal/testenv/stocktest"
)

// BenchmarkTurn is one leader's batches of 32 new buyers of one product, one
// after another, alone on the machine: a batch's turn, with each piece of
// issue 46 on and off (go test -run XXX -bench Turn ./internal/order/).
func BenchmarkTurn(b *testing.B) {
	for _, c := range []struct {
		name    string
		packets bool
		keep    int
	}{
		{"statements,release", false, 1},
		{"statements,kept", false, 16},
		{"packet,release", true, 1},
		{"packet,kept", true, 16},
	} {
		b.Run(c.name, func(b *testing.B) {
			f := stocktest.New(b)
			inv, _ := f.Inventory(b, inventory.Config{Strategy: inventory.LockFence, SoldOutRecheck: time.Minute, KeepBatches: c.keep, KeepFor: time.Second})
			var w *dbx.Writer
			if c.packets {
				w = f.Packets(b)
			}
			s := New(f.DB, inv, f.Markers(), Config{BatchMax: 64, UnpaidLimit: 100, Packets: w}, nil, stocktest.Discard())
			b.Cleanup(s.Wait)
			id := f.Product(b, inv, 100, 1_000_000_000)
			l := s.leadBatches(id)
			defer l.idle()
			user := int64(0)
			batch := func() []*request {
				out := make([]*request, 32)
				for i := range out {
					user++
					out[i] = seckillReq(user, id)
				}
				return out
			}
			l.run(batch()) // the price is read once
			b.ResetTimer()
			for b.Loop() {
				bt := batch()
				l.run(bt)
				for _, r := range bt {
					<-r.done
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/32, "µs/order")
		})
	}
}
