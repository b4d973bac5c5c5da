package benchreport

import (
	"fmt"
	"io"
	"strconv"
)

// The workloads of report.json's capped list.
const (
	CappedMany     = "many"         // 12 products at once, product-affine (RouteMany)
	CappedSoldOut  = "soldout"      // sold-out refusals, round robin
	CappedAffinity = "hot-affinity" // one hot product, product-affine (1: the baseline of the 3)
	CappedBuckets  = "hot-buckets"  // one hot product, round robin, K=3 stock buckets
)

// CappedRun is one workload on capped instances (--instance-cpu), in
// the shape issue 33's tools read. It is a phase's own figures, picked out
// of the report, never measured on its own.
type CappedRun struct {
	Workload    string  `json:"workload"`     // one of the Capped names
	Instances   int     `json:"instances"`    // capped instances the load went to
	InstanceCPU float64 `json:"instance_cpu"` // each one's cap, a fraction of a core, read back from its cgroup
	PerSec      float64 `json:"per_s"`        // committed orders/s (refusals/s for soldout)
	// IdlePct is the machine's idle share over the measurement, in
	// percent; null when the phase has no CPU measurement.
	IdlePct *float64 `json:"idle_pct"`
}

// NoIdle reports whether the machine had no idle CPU over the measurement.
func (c CappedRun) NoIdle() bool { return c.IdlePct != nil && *c.IdlePct < 2 }

// CappedRuns picks the capped list out of br's phases: many on 1 and
// 3 instances, soldout on 1 and 3, hot-affinity on 1 (the baseline the 3
// are judged against) and 3, hot-buckets on 3. A phase that did not run is
// left out; nil when the instances were not capped.
func CappedRuns(br *Report) []CappedRun {
	if br.InstanceCPUs <= 0 {
		return nil
	}
	var out []CappedRun
	add := func(workload string, instances int, perSec float64, cpu *CPU) {
		run := CappedRun{Workload: workload, Instances: instances, InstanceCPU: br.InstanceCPUs, PerSec: perSec}
		if cpu != nil {
			idle := cpu.IdleShare * 100
			run.IdlePct = &idle
		}
		out = append(out, run)
	}
	orders := func(workload string, o Orders) { add(workload, o.Instances, o.OrdersPerSec, o.CPU) }
	for _, n := range []int{1, 3} {
		for _, o := range br.Orders {
			if o.Routing == RouteMany && o.Instances == n && o.Seconds > 0 {
				orders(CappedMany, o)
				break
			}
		}
	}
	if br.SoldOut.Seconds > 0 {
		add(CappedSoldOut, 1, br.SoldOut.PerSec, br.SoldOut.CPU)
	}
	if s3 := br.SoldOut3; s3 != nil && s3.Seconds > 0 {
		add(CappedSoldOut, 3, s3.PerSec, s3.CPU)
	}
	for i, o := range br.Orders {
		if o.Routing == RouteAffine && o.Instances == 3 && o.Seconds > 0 {
			if i > 0 && br.Orders[i-1].Baseline && br.Orders[i-1].Seconds > 0 {
				orders(CappedAffinity, br.Orders[i-1])
			}
			orders(CappedAffinity, o)
			break
		}
	}
	for _, o := range br.Orders {
		if o.Routing == RouteBuckets && o.Instances == 3 && o.Seconds > 0 {
			orders(CappedBuckets, o)
			break
		}
	}
	return out
}

// writeCapped prints one line per capped entry, marking the ones whose
// machine had no idle CPU (their figure is the machine's, not the cap's).
func writeCapped(w io.Writer, runs []CappedRun) {
	for _, c := range runs {
		unit := "committed orders/s"
		if c.Workload == CappedSoldOut {
			unit = "refusals/s"
		}
		idle := "machine idle not measured"
		if c.IdlePct != nil {
			idle = "machine idle " + strconv.FormatFloat(*c.IdlePct, 'f', 0, 64) + "%"
		}
		if c.NoIdle() {
			idle += ": NO IDLE CPU, the machine and not the cap set this figure"
		}
		fmt.Fprintf(w, "capped:   %s, %d instance(s) of %.2f CPU: %.0f %s; %s\n", c.Workload, c.Instances, c.InstanceCPU, c.PerSec, unit, idle)
	}
}
