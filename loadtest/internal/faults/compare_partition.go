package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/internal/topo"
	"github.com/seckill-lab/shop/loadtest/internal/harness"
	"github.com/seckill-lab/shop/loadtest/internal/report"
	"github.com/seckill-lab/shop/loadtest/internal/verify"
)

// PartitionRows are the compare rows that also run under network faults
// (--compare-partitions): the strategies that take the product lock, and
// naive; with no lab pause, so only the network can make a holder outlive
// its lease.
var PartitionRows = map[string]bool{"naive": true, "lock (pause > TTL)": true, "lock-conditional (pause > TTL)": true, "lock-fence (pause > TTL)": true}

// leaseSchedule is the faults that make a lock holder outlive its lease,
// drawn from seed: again and again one instance is cut from Redis (a black
// hole, or the kernel's DROP) while its MySQL link is slowed, so a
// transaction under way outlasts the TTL; and Redis replies are delayed
// past the TTL for every instance, so a lock arrives already expired.
func leaseSchedule(seed int64, duration time.Duration, instances int, mysql, kernel bool) []netFault {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x1ea5e))
	var plan []netFault
	t := duration / 8
	for k := 0; ; k++ {
		f := netFault{Dep: "Redis", Instance: rng.IntN(instances), At: t.Round(100 * time.Millisecond),
			Lasted: (partTTL + 200*time.Millisecond + time.Duration(rng.Int64N(int64(500*time.Millisecond)))).Round(100 * time.Millisecond)}
		switch {
		case k%4 == 3:
			f.Instance, f.Fault = -1, topo.Fault{Kind: topo.Latency, Dir: topo.Back, Delay: partTTL + 200*time.Millisecond}
		case kernel && rng.IntN(2) == 0:
			f.Cut = topo.Drop
		default:
			f.Fault = topo.Fault{Kind: topo.BlackHole}
		}
		if mysql && f.Instance >= 0 {
			f.SlowDB = time.Duration(600+rng.IntN(400)) * time.Millisecond
		}
		if f.At+f.span() > duration*85/100 {
			return plan
		}
		plan = append(plan, f)
		t = f.At + f.span() + 300*time.Millisecond + time.Duration(rng.Int64N(int64(300*time.Millisecond)))
	}
}

// comparePartition runs one strategy's race + retry load, paced over
// --chaos-duration, on shops behind nemesis links, under leaseSchedule,
// and judges it as the compare row's partition column.
func (h runner) comparePartition(ctx context.Context, strategy string, seed int64) *report.PartitionCell {
	cell := &report.PartitionCell{Seed: seed}
	e, err := h.Setup(ctx, "compare-net-"+strategy, harness.Setup{Strategy: strategy, Private: true, Net: true, Netns: true,
		Common: []string{"SHOP_LOCK_TTL=" + partTTL.String(), "SHOP_LOCK_WAIT=" + partWait.String(), "SHOP_REQUEST_TIMEOUT=" + partReqTimeout.String()}})
	if err != nil {
		cell.Error = err.Error()
		return cell
	}
	defer e.Close()
	plan := leaseSchedule(seed, h.O.ChaosDuration, len(e.Cluster.Instances), e.Net.MySQL != nil, e.Net.Ns != nil)
	cell.Faults = len(plan)
	// The hot product is kept in stock through the faults (stocker), or
	// it would sell out before most of them and no stale write could land.
	stock := int64(h.O.Stock)
	p, err := e.Client.CreateProduct(ctx, "compare partitions "+strategy, 990, stock, "lt-cmpnet-"+loadgen.RandomID(6))
	if err != nil {
		cell.Error = "create the hot product: " + err.Error()
		return cell
	}
	st := &stocker{E: e, Id: p.ID, Initial: stock, Key: "lt-cmpnet-restock-" + loadgen.RandomID(6), Lasts: h.O.ChaosDuration}
	cfg := h.RaceConfig(e, "compare (partitions) "+strategy)
	cfg.ProductID, cfg.Stock = p.ID, stock
	cfg.Attempts, cfg.RegularShare, cfg.TinyTimeout, cfg.Failover = h.O.Retries, 0.3, h.O.TinyTimeout, true
	// Regular orders on four products of their own, never sold out: each
	// is one more lock a cut instance may be holding when Redis goes.
	cfg.RegularProducts, cfg.RegularStock = 4, max(1, int64(h.O.Users)/2)
	cfg.Rate = float64(h.O.Users) / h.O.ChaosDuration.Seconds()
	cfg.Timeout = partReqTimeout + 3*time.Second
	s := e.Sample(ctx)
	loadStart := make(chan time.Time, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var t0 time.Time
		select {
		case t0 = <-loadStart:
		case <-ctx.Done():
			return
		}
		harness.Sleep(ctx, time.Until(t0.Add(time.Second)))
		_ = st.Size(ctx, t0, st.Lasts)
		for _, f := range plan {
			harness.Sleep(ctx, time.Until(t0.Add(f.At-300*time.Millisecond)))
			_ = st.Size(ctx, t0, st.Lasts)
			harness.Sleep(ctx, time.Until(t0.Add(f.At)))
			if ctx.Err() != nil {
				return
			}
			if err := f.inject(ctx, e.Net); err != nil && cell.Error == "" {
				cell.Error = "inject " + f.String() + ": " + err.Error()
			}
			harness.Sleep(context.WithoutCancel(ctx), f.Lasted)
			_ = e.Net.Heal(context.WithoutCancel(ctx))
		}
	}()
	res, err := h.RaceClocked(ctx, cfg, loadStart)
	<-done
	_ = e.Net.Heal(context.WithoutCancel(ctx))
	totals := s.Totals()
	cell.Rejected, cell.LocksLost = totals["shop_inventory_stale_fence_rejections_total"], totals[lockLost]
	if err != nil {
		cell.Error = err.Error()
		return cell
	}
	v, err := e.Verify(ctx, verify.CheckInput{Records: res.Records, Products: res.InitialStock()}, res.Tokens())
	if err != nil {
		cell.Error = err.Error()
		return cell
	}
	cell.Orders, cell.Oversold, cell.Duplicates = v.Counts.Orders, v.Counts.Oversold, v.Counts.Duplicates
	cell.Violated, cell.Linearizable, cell.Clean = v.Invariants(), v.Linearizable, v.OK()
	cell.Summary = loadgen.Summarize(res.Records)
	return cell
}

// JudgeComparePartitions: the partition column passes when lock-fence is
// clean under the faults and at least one unsafe row is caught by them.
func JudgeComparePartitions(r *report.Scenario) {
	safeClean, caught, ran := false, 0, false
	for _, c := range r.Compare {
		if c.Partition == nil {
			continue
		}
		ran = true
		switch {
		case c.Partition.Error != "":
			r.Notes = append(r.Notes, fmt.Sprintf("partition column, %s: %s", c.Row, report.FirstLine(c.Partition.Error)))
		case c.Safe:
			safeClean = c.Partition.Clean
		case !c.Partition.Clean:
			caught++
		}
	}
	if !ran {
		return
	}
	if !safeClean {
		r.Pass = false
		r.Notes = append(r.Notes, "FAIL: lock-fence is not clean under the partition schedule")
	}
	if caught == 0 {
		r.Pass = false
		r.Notes = append(r.Notes, "FAIL: no unsafe row was caught under the partition schedule")
	} else {
		r.Notes = append(r.Notes, fmt.Sprintf("partition column: %d unsafe rows caught under network faults alone (no lab pause), lock-fence clean", caught))
	}
}
