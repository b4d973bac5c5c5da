// Package benchreport is the bench scenario's part of report.json, its
// types (Report: the phases, their CPU per order, the capped list) and
// writers (Write for people, HTML), apart from package report, which
// embeds a Report in the bench's Scenario.
package benchreport

import (
	"encoding/json"
	"maps"
	"slices"
	"time"
)

// Report is what the bench scenario measured.
type Report struct {
	Phase time.Duration `json:"phase_ns"`
	// InstanceCPU: each shop instance's CPU cap as read back from its
	// cgroup (--instance-cpu); "" uncapped.
	InstanceCPU string `json:"instance_cpu,omitempty"`
	// InstanceCPUs is the same cap as a fraction of a core, from the
	// same read; report.json has it in each Capped entry.
	InstanceCPUs float64  `json:"-"`
	Raw          Raw      `json:"raw"`
	Orders       []Orders `json:"orders"`
	SoldOut      Rate     `json:"sold_out"`
	// SoldOut3: the sold-out refusals on three capped instances, round
	// robin, beside SoldOut's one (--instance-cpu only).
	SoldOut3     *Rate    `json:"sold_out_3_instances,omitempty"`
	Healthz      Rate     `json:"healthz"`
	RefusalRatio float64  `json:"refusals_per_healthz"`
	Memory       Memory   `json:"memory"`
	OneUnit      OneUnit  `json:"one_unit"`
	Targets      []Target `json:"targets"`
	// Capped: what each workload did on capped instances, one entry per
	// workload and instance count, for tools (--instance-cpu only).
	Capped []CappedRun `json:"capped,omitempty"`
}

// Raw is the raw database ceiling.
type Raw struct {
	Workers  int       `json:"workers"`
	Commits  int64     `json:"commits"`
	Seconds  float64   `json:"seconds"`
	TxPerSec float64   `json:"tx_per_s"`
	Errors   int64     `json:"errors"`
	Parts    []float64 `json:"parts_tx_per_s"` // tx/s of each part, in order
}

// Plus is the ceiling over both runs.
func (r Raw) Plus(s Raw) Raw {
	out := Raw{Workers: r.Workers, Commits: r.Commits + s.Commits, Seconds: r.Seconds + s.Seconds, Errors: r.Errors + s.Errors,
		Parts: append(append([]float64{}, r.Parts...), s.Parts...)}
	if out.Seconds > 0 {
		out.TxPerSec = float64(out.Commits) / out.Seconds
	}
	return out
}

// Orders is one hot-product phase.
type Orders struct {
	Instances  int    `json:"instances"`
	Routing    string `json:"routing"`    // how the clients reach the instances (see benchRoute)
	Coalescing bool   `json:"coalescing"` // false: SHOP_BATCH_MAX=1, one order per lock hold
	// GoMaxProcs is the GOMAXPROCS the instances ran with, as each
	// reported it (ProcsMetric), the highest; 0: not reported.
	GoMaxProcs   int     `json:"gomaxprocs,omitempty"`
	Clients      int     `json:"clients"`
	Committed    int64   `json:"committed"` // order rows of the product that appeared in the window
	Seconds      float64 `json:"seconds"`
	OrdersPerSec float64 `json:"orders_per_s"`
	OfRaw        float64 `json:"of_raw_ceiling"`  // OrdersPerSec / Raw.TxPerSec (set when the ceiling is known)
	OfOne        float64 `json:"of_one_instance"` // OrdersPerSec / the coalesced one-instance phase's
	// Baseline: this phase is the one-instance baseline of the phase
	// after it, run in two halves, one just before and one just after it.
	// OfBaseline: for that next phase, OrdersPerSec / its baseline's.
	// Halves: a baseline's two halves' orders/s, the same instance and
	// load minutes apart, so their ratio shows the machine's own spread.
	Baseline   bool      `json:"baseline,omitempty"`
	OfBaseline float64   `json:"of_baseline,omitempty"`
	Halves     []float64 `json:"halves_orders_per_s,omitempty"`
	Load       Rate      `json:"load"`
	BatchMean  float64   `json:"batch_mean,omitempty"` // mean batch size over the window; 0: not exposed
	// LockHoldMs is the mean time a hold of the shop's locks lasted over
	// the window (in these phases, product locks: one hold per batch), and
	// LocksHeld their total hold time ÷ the window, the locks held at once
	// on average. A hot product whose lock is held nearly all the time
	// (LocksHeld near 1) commits about BatchMean / LockHoldMs orders per
	// ms, whatever else gets faster: only bigger batches or shorter holds
	// raise it. 0: not exposed.
	LockHoldMs float64 `json:"lock_hold_ms,omitempty"`
	LocksHeld  float64 `json:"locks_held,omitempty"`
	// Turn is a batch's turn under the product lock over the window (the
	// shop's shop_order_turn_* metrics); nil: not exposed.
	Turn *Turn `json:"turn,omitempty"`
	// MinInstanceOrders: the fewest orders an instance committed in a
	// second of the window (Series' InstanceOrders; 0: some instance
	// committed nothing in some second); nil: not measured in this phase.
	MinInstanceOrders *float64 `json:"min_instance_orders_per_s,omitempty"`
	// RestockMs: how long one restock of the hot product took, sent in
	// the middle of the window (retries included); 0: none sent.
	RestockMs float64        `json:"restock_ms,omitempty"`
	CPU       *CPU           `json:"cpu_per_order,omitempty"`
	Series    []Sample       `json:"series"`
	Answers   map[string]int `json:"answers"`
}

// CPU is the CPU time each process spent per unit of a phase (an
// order committed, a refusal answered), from /proc over the measured
// window, and the machine's idle share over it. These vary far less
// between runs than throughput does.
type CPU struct {
	Per       string    `json:"per"`          // "order" or "refusal"
	Shop      float64   `json:"shop_us"`      // all shop instances together
	ShopEach  []float64 `json:"shop_us_each"` // each instance
	MariaDB   float64   `json:"mariadb_us"`   // 0: not measured (SQLite, or the server not readable)
	Redis     float64   `json:"redis_us"`     // 0: not measured (in-process Redis)
	IdleShare float64   `json:"idle_share"`   // of the machine's CPU time
}

// CPUUs is a phase's CPU per unit in the shape issue 33's tools read
// (report.json's cpu_us_per_order: per committed order, per refusal in
// the sold-out phases, per request for /healthz). It is CPU's
// figures, written beside it, never measured on its own.
type CPUUs struct {
	Shop    float64 `json:"shop"`     // all shop instances together
	MariaDB float64 `json:"mariadbd"` // 0: not measured
	Redis   float64 `json:"redis"`    // 0: not measured
}

// Us is c's figures as cpu_us_per_order; nil when c is.
func (c *CPU) Us() *CPUUs {
	if c == nil {
		return nil
	}
	return &CPUUs{Shop: c.Shop, MariaDB: c.MariaDB, Redis: c.Redis}
}

// NoIdle reports whether the machine had no idle CPU over the measured
// window (under 2%): the machine, not the shop or its cap, set the figure.
func (c *CPU) NoIdle() bool { return c != nil && c.IdleShare < 0.02 }

// plus is the CPU of two halves of one phase as one: the times per unit
// weighted by the units each half counted, the idle share by its seconds.
// A half without a measurement leaves the other's.
func (c *CPU) plus(d *CPU, cUnits, dUnits int64, cSec, dSec float64) *CPU {
	if c == nil || d == nil || cUnits+dUnits <= 0 || cSec+dSec <= 0 {
		if c == nil {
			return d
		}
		return c
	}
	per := func(a, b float64) float64 {
		return (a*float64(cUnits) + b*float64(dUnits)) / float64(cUnits+dUnits)
	}
	out := &CPU{Per: c.Per, Shop: per(c.Shop, d.Shop), MariaDB: per(c.MariaDB, d.MariaDB), Redis: per(c.Redis, d.Redis),
		IdleShare: (c.IdleShare*cSec + d.IdleShare*dSec) / (cSec + dSec)}
	if len(c.ShopEach) == len(d.ShopEach) {
		for i := range c.ShopEach {
			out.ShopEach = append(out.ShopEach, per(c.ShopEach[i], d.ShopEach[i]))
		}
	}
	return out
}

// MarshalJSON writes the phase with cpu_us_per_order beside cpu_per_order,
// from the same measurement.
func (o Orders) MarshalJSON() ([]byte, error) {
	type plain Orders // (without this method)
	return json.Marshal(struct {
		plain
		Us *CPUUs `json:"cpu_us_per_order,omitempty"`
	}{plain(o), o.CPU.Us()})
}

// MarshalJSON writes the load with cpu_us_per_order beside
// cpu_per_request, from the same measurement (absent where the load's CPU
// is not measured, as in a hot-product phase's load).
func (r Rate) MarshalJSON() ([]byte, error) {
	type plain Rate
	return json.Marshal(struct {
		plain
		Us *CPUUs `json:"cpu_us_per_order,omitempty"`
	}{plain(r), r.CPU.Us()})
}

// Sample is one second of a hot-product phase.
type Sample struct {
	T         float64 `json:"t_s"`
	Orders    float64 `json:"orders_per_s"`
	BatchMean float64 `json:"batch_mean,omitempty"`
	// InstanceOrders: each instance's orders per second committed in its
	// turns (TurnOrdersMetric), where the phase measures them.
	InstanceOrders []float64 `json:"instance_orders_per_s,omitempty"`
}

// MinInstanceOrders is the fewest orders per second an instance committed
// in one of series' seconds; nil when no second has instances' figures.
func MinInstanceOrders(series []Sample) *float64 {
	var low *float64
	for _, s := range series {
		for _, n := range s.InstanceOrders {
			if low == nil || n < *low {
				low = &n
			}
		}
	}
	return low
}

// Rate is a closed-loop load's answers.
type Rate struct {
	Clients  int `json:"clients"`
	Requests int `json:"requests"` // sent in the measured window
	Sent     int `json:"sent"`     // sent in all, warm-up included
	// Unanswered counts the clients that got no answer to any request
	// (one that never got to send counts too).
	Unanswered int            `json:"clients_without_answer"`
	Seconds    float64        `json:"seconds"`
	PerSec     float64        `json:"per_s"` // answers with the expected status per second
	P50        time.Duration  `json:"p50_ns"`
	P90        time.Duration  `json:"p90_ns"`
	P99        time.Duration  `json:"p99_ns"`
	Max        time.Duration  `json:"max_ns"`
	Answers    map[string]int `json:"answers"`
	// CPU: per request sent over the whole phase, warm-up included
	// (set for the sold-out and /healthz phases).
	CPU *CPU `json:"cpu_per_request,omitempty"`
	// Failures counts the requests without an answer by what the client
	// saw (the error's last part: a timeout, a reset, ...).
	Failures map[string]int `json:"failures,omitempty"`
}

// OneUnit is the product with one unit that the refusal and memory
// phases hammer: it must end with exactly one order.
type OneUnit struct {
	Buyers int   `json:"buyers"` // distinct users who sent a seckill order for it
	Orders int64 `json:"orders"`
}

// Memory is the memory phase.
type Memory struct {
	Clients    int     `json:"clients"`
	Seconds    float64 `json:"seconds"`
	Load       Rate    `json:"load"`
	PeakRSSMB  float64 `json:"peak_rss_mb"`  // VmHWM, reset when the phase starts
	MaxRSSMB   float64 `json:"max_rss_mb"`   // highest VmRSS sampled every 100 ms
	StartRSSMB float64 `json:"start_rss_mb"` // VmRSS before the phase
	MaxConns   string  `json:"max_conns"`    // the shop's connection cap, as configured
	// ListenOverflows: connects the kernel dropped during the phase
	// because a listen queue was full (TcpExt ListenOverflows, whole
	// machine; -1: not known), and SoMaxConn the queue's bound
	// (net.core.somaxconn; Go listens with it). A dropped connect is
	// retried by the client's kernel 1 s, 3 s, 7 s later.
	ListenOverflows int64 `json:"listen_overflows"`
	SoMaxConn       int64 `json:"somaxconn,omitempty"`
}

// Target is one target of issue 14 next to this run's figure.
type Target struct {
	What   string  `json:"what"`
	Want   string  `json:"want"`
	Got    float64 `json:"got"`
	Unit   string  `json:"unit"`
	Met    bool    `json:"met"`
	Missed string  `json:"missed,omitempty"`
}

// The routings a hot-product phase can use.
const (
	RouteDirect       = "direct"                          // one instance
	RouteDefaultProcs = "direct, Go's default GOMAXPROCS" // one instance without the bench's SHOP_MAXPROCS (--bench-maxprocs N)
	RouteOneProc      = "direct, SHOP_MAXPROCS=1"         // one instance at 1, where the bench's shops run at Go's default
	RouteAffine       = "product-affine"                  // the harness's consistent hash, the default
	RouteSpread       = "round robin (lab)"               // every instance takes a share of the product
	RouteNginx        = "nginx, product-affine"           // deploy/nginx.conf in front
	RouteBuckets      = "round robin, K=3 stock buckets"  // each instance starts at its own bucket (docs chapter 9)
	RouteMany         = "12 products, product-affine"     // --instance-cpu: a sale of many products at once, load spread evenly
	RouteNoNginx      = "nginx not installed: skipped"    // (not a phase)
)

// Plus is two halves of one load as one (see Orders.Plus).
func (r Rate) Plus(s Rate) Rate {
	out := r
	out.Requests, out.Sent, out.Unanswered = r.Requests+s.Requests, r.Sent+s.Sent, r.Unanswered+s.Unanswered
	out.Seconds = r.Seconds + s.Seconds
	if r.Seconds > 0 && s.Seconds > 0 {
		out.PerSec = (r.PerSec*r.Seconds + s.PerSec*s.Seconds) / out.Seconds
	}
	out.P50, out.P90, out.P99, out.Max = max(r.P50, s.P50), max(r.P90, s.P90), max(r.P99, s.P99), max(r.Max, s.Max)
	out.Answers, out.Failures = AddCounts(r.Answers, s.Answers), AddCounts(r.Failures, s.Failures)
	out.CPU = r.CPU.plus(s.CPU, int64(r.Sent), int64(s.Sent), r.Seconds, s.Seconds)
	return out
}

// AddCounts is a and b added key by key, in a new map (nil when both are
// empty, so an absent table stays absent).
func AddCounts(a, b map[string]int) map[string]int {
	if len(a) == 0 && len(b) == 0 {
		return a
	}
	out := maps.Clone(a)
	if out == nil {
		out = map[string]int{}
	}
	for k, v := range b {
		out[k] += v
	}
	return out
}

const BatchMetric = "shop_orders_batch_size"

// HoldMetric is the histogram of the shop's lock holds (lockx).
const HoldMetric = "shop_lock_hold_duration_seconds"

// ProcsMetric is the Go runtime's GOMAXPROCS, from the shop's Go collector.
const ProcsMetric = "go_sched_gomaxprocs_threads"

// Plus is two halves of one phase as one: counts add up; a latency
// quantile is the larger of the two halves' (never understated); the
// mean batch is weighted by the orders each half committed.
func (o Orders) Plus(p Orders) Orders {
	out := o
	out.Committed, out.Seconds = o.Committed+p.Committed, o.Seconds+p.Seconds
	if out.Seconds > 0 {
		out.OrdersPerSec = float64(out.Committed) / out.Seconds
	}
	if o.BatchMean > 0 && p.BatchMean > 0 {
		ob, pb := float64(o.Committed)/o.BatchMean, float64(p.Committed)/p.BatchMean // batches
		out.BatchMean = float64(out.Committed) / (ob + pb)
		if o.LockHoldMs > 0 && p.LockHoldMs > 0 { // one hold per batch
			out.LockHoldMs = (o.LockHoldMs*ob + p.LockHoldMs*pb) / (ob + pb)
		}
	}
	if out.Seconds > 0 {
		out.LocksHeld = (o.LocksHeld*o.Seconds + p.LocksHeld*p.Seconds) / out.Seconds
	}
	out.Series = slices.Clone(o.Series)
	for _, s := range p.Series {
		s.T += o.Seconds
		out.Series = append(out.Series, s)
	}
	out.CPU = o.CPU.plus(p.CPU, o.Committed, p.Committed, o.Seconds, p.Seconds)
	out.Turn = o.Turn.plus(p.Turn)
	out.MinInstanceOrders = MinInstanceOrders(out.Series)
	out.Load = o.Load.Plus(p.Load)
	out.Answers = out.Load.Answers
	return out
}
