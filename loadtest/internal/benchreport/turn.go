package benchreport

import (
	"maps"
	"slices"
)

// The shop's turn metrics: one observation per batch turn, the time the
// batch spent under the product lock (from its hold taken, or kept from
// the batch before, until its transaction was decided and the hold
// released or kept), labelled by the batch's size class.
const (
	TurnPrefix = "shop_order_turn_"
	TurnLabel  = "size" // "1", "2-3", "4-7", "8-15", "16-31", "32-63", "64+"

	TurnSecondsMetric = "shop_order_turn_seconds" // histogram
	TurnOrdersMetric  = "shop_order_turn_orders_total"
	TurnDBMetric      = "shop_order_turn_db_round_trips_total"
	TurnRedisMetric   = "shop_order_turn_redis_round_trips_total"
)

// TurnClass is one size class's turn counters.
type TurnClass struct {
	Seconds, Turns, Orders, DB, Redis float64
}

func (c TurnClass) plus(d TurnClass) TurnClass {
	return TurnClass{c.Seconds + d.Seconds, c.Turns + d.Turns, c.Orders + d.Orders, c.DB + d.DB, c.Redis + d.Redis}
}

func (c TurnClass) minus(d TurnClass) TurnClass {
	return TurnClass{c.Seconds - d.Seconds, c.Turns - d.Turns, c.Orders - d.Orders, c.DB - d.DB, c.Redis - d.Redis}
}

// TurnSnap is the turn counters of a phase's instances at one moment,
// summed over them, by size class.
type TurnSnap map[string]TurnClass

// AddInstance adds one instance's turn metrics, as loadgen's MetricsBy
// returns them (name -> size class -> value).
func (s TurnSnap) AddInstance(m map[string]map[string]float64) {
	for class, turns := range m[TurnSecondsMetric+"_count"] {
		c := s[class]
		c.Turns += turns
		c.Seconds += m[TurnSecondsMetric+"_sum"][class]
		c.Orders += m[TurnOrdersMetric][class]
		c.DB += m[TurnDBMetric][class]
		c.Redis += m[TurnRedisMetric][class]
		s[class] = c
	}
}

// minus is the counters' growth from before to s, for the classes that
// had turns in between.
func (s TurnSnap) minus(before TurnSnap) TurnSnap {
	out := TurnSnap{}
	for class, c := range s {
		if d := c.minus(before[class]); d.Turns > 0 {
			out[class] = d
		}
	}
	return out
}

// plus is the counters of s and t together.
func (s TurnSnap) plus(t TurnSnap) TurnSnap {
	out := TurnSnap{}
	for _, from := range []TurnSnap{s, t} {
		for class, c := range from {
			out[class] = out[class].plus(c)
		}
	}
	return out
}

// Turn is what a batch's turn under the product lock cost over a phase's
// window: its means per turn, and a line fitted through the size classes'
// means, a fixed cost and a cost per order (mean turn ms = FixedMs +
// PerOrderMs × mean batch, weighted least squares, each class weighted by
// its turns). With fewer than two classes seen there is no line: both are
// 0 and left out.
type Turn struct {
	HoldMs          float64 `json:"hold_ms"`
	Batch           float64 `json:"batch"`
	DBRoundTrips    float64 `json:"db_round_trips"`
	RedisRoundTrips float64 `json:"redis_round_trips"`
	FixedMs         float64 `json:"fixed_ms,omitempty"`
	PerOrderMs      float64 `json:"per_order_ms,omitempty"`
	Classes         int     `json:"size_classes"` // size classes with turns in the window
	growth          TurnSnap
}

// TurnBetween is the turn over the window from before to after; nil when
// no turn was counted in it (a shop without the turn metrics).
func TurnBetween(before, after TurnSnap) *Turn {
	return turnOf(after.minus(before))
}

func turnOf(d TurnSnap) *Turn {
	var all TurnClass
	for _, c := range d {
		all = all.plus(c)
	}
	if all.Turns <= 0 {
		return nil
	}
	t := &Turn{HoldMs: all.Seconds / all.Turns * 1000, Batch: all.Orders / all.Turns, DBRoundTrips: all.DB / all.Turns,
		RedisRoundTrips: all.Redis / all.Turns, Classes: len(d), growth: d}
	if len(d) < 2 {
		return t
	}
	// The weighted means of the classes' points are the overall means.
	mx, my := t.Batch, t.HoldMs
	var sxy, sxx float64
	for _, class := range slices.Sorted(maps.Keys(d)) {
		c := d[class]
		x, y := c.Orders/c.Turns, c.Seconds*1000/c.Turns
		sxy += c.Turns * (x - mx) * (y - my)
		sxx += c.Turns * (x - mx) * (x - mx)
	}
	if sxx > 0 {
		t.PerOrderMs = sxy / sxx
		t.FixedMs = my - t.PerOrderMs*mx
	}
	return t
}

// plus is the turn of two halves of one phase as one; a half without a
// turn leaves the other's.
func (t *Turn) plus(u *Turn) *Turn {
	if t == nil || u == nil {
		if t == nil {
			return u
		}
		return t
	}
	return turnOf(t.growth.plus(u.growth))
}
