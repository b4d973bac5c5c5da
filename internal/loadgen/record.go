package loadgen

import (
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Operations a Record can describe.
const (
	OpSeckill = "seckill" // POST /api/v1/seckill/{product_id}/orders
	OpOrder   = "order"   // POST /api/v1/orders (regular, with Idempotency-Key)
	OpPay     = "pay"     // POST /api/v1/orders/{order_no}/pay
	OpCredit  = "credit"  // POST /api/v1/admin/wallets/{user_id}/credit
)

// Record is what one client saw for one HTTP request: the raw material of
// the client-side checks (O3-O5) and of the latency figures. Times are the
// client's own clock, which on one machine is the shop's clock too.
type Record struct {
	Op        string    `json:"op"`
	UserID    int64     `json:"user_id"`
	ProductID int64     `json:"product_id,omitempty"`
	Quantity  int64     `json:"quantity,omitempty"` // asked for (orders)
	Key       string    `json:"key,omitempty"`      // Idempotency-Key sent, if any
	Target    int       `json:"target"`             // index into the base URLs
	Attempt   int       `json:"attempt"`            // 0 for the first send of a logical request
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`

	Status int    `json:"status"`         // 0: no answer (transport error or client timeout)
	Code   string `json:"code,omitempty"` // problem+json code
	Err    string `json:"err,omitempty"`  // transport error or client timeout
	// GaveUp: no answer because the client gave up on purpose after a
	// deliberately short timeout (Config.TinyTimeout), not a request left
	// hanging.
	GaveUp   bool `json:"gave_up,omitempty"`
	Replayed bool `json:"replayed"` // Idempotent-Replayed: true
	// OrderNo is the order a 2xx named, or the one a 503 outcome_unknown
	// said may exist (regular orders).
	OrderNo string `json:"order_no,omitempty"`
	// What the answer said about the order (2xx on order and pay routes).
	OrderQuantity int64  `json:"order_quantity,omitempty"`
	OrderUserID   int64  `json:"order_user_id,omitempty"`
	OrderProduct  int64  `json:"order_product_id,omitempty"`
	OrderStatus   string `json:"order_status,omitempty"`
	AmountCents   int64  `json:"amount_cents,omitempty"`
	Balance       int64  `json:"balance_cents,omitempty"` // credit answers
	// PaidOrderNo is the order a 2xx pay answer named (OrderNo is the one
	// the request's path named).
	PaidOrderNo string `json:"paid_order_no,omitempty"`
}

// Accepted reports an answer of the queued mode that names an order not
// placed when it was sent: a 202, or a replay of a queued or rejected one.
func (r Record) Accepted() bool {
	return r.Status == http.StatusAccepted || (r.OK() && (r.OrderStatus == "queued" || r.OrderStatus == "rejected"))
}

// Latency is how long the request took as the client saw it.
func (r Record) Latency() time.Duration { return r.End.Sub(r.Start) }

// OK reports a 2xx answer.
func (r Record) OK() bool { return r.Status >= 200 && r.Status < 300 }

// Failed reports an answer that says nothing about the outcome: no answer at
// all, or a 5xx other than 503 busy (which promises nothing was changed);
// outcome_unknown is one (its retry learns the outcome, see A3).
func (r Record) Failed() bool { return r.Status == 0 || (r.Status >= 500 && r.Code != "busy") }

// Recorder collects records from many goroutines and keeps live counters
// for progress reports.
type Recorder struct {
	mu      sync.Mutex
	records []Record
	stats   Stats
	started time.Time
}

// NewRecorder starts the clock of a run that plans to send about planned
// requests (0 when unknown).
func NewRecorder(planned int) *Recorder {
	return &Recorder{started: time.Now(), stats: Stats{Planned: planned}}
}

// Add records one request.
func (r *Recorder) Add(rec Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
	r.stats.Done++
	if rec.Failed() {
		r.stats.Errors++
	}
	r.stats.Answers.count(rec)
}

// Stats returns the counters so far.
func (r *Recorder) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Elapsed = time.Since(r.started)
	if sec := s.Elapsed.Seconds(); sec > 0 {
		s.Rate = float64(s.Done) / sec
	}
	return s
}

// Records returns a copy of everything recorded, ordered by start time.
func (r *Recorder) Records() []Record {
	r.mu.Lock()
	out := slices.Clone(r.records)
	r.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}

// Stats are the live counters of a run, for progress lines.
type Stats struct {
	Planned int           `json:"planned"`
	Done    int           `json:"done"`
	Errors  int           `json:"errors"` // no answer, or 5xx other than busy
	Rate    float64       `json:"rate"`   // requests per second so far
	Elapsed time.Duration `json:"elapsed_ns"`
	Answers Answers       `json:"answers"`
}

// Answers counts the answers a live view of a race shows, by kind: typed
// counters, so no reader parses outcome strings.
type Answers struct {
	Created  int `json:"created"`  // 201: a new order
	Replayed int `json:"replayed"` // 200 with Idempotent-Replayed: the first order again
	SoldOut  int `json:"sold_out"` // 409 sold_out
	Busy     int `json:"busy"`     // 503 busy (the buyer sends again)
}

// count adds one record's answer (what Outcome names "201", "200 replay",
// "409 sold_out" and "503 busy").
func (a *Answers) count(r Record) {
	switch {
	case r.Status == 0:
	case r.Replayed:
		if r.Status == http.StatusOK {
			a.Replayed++
		}
	case r.Status == http.StatusCreated && r.Code == "":
		a.Created++
	case r.Status == http.StatusConflict && r.Code == "sold_out":
		a.SoldOut++
	case r.Status == http.StatusServiceUnavailable && r.Code == "busy":
		a.Busy++
	}
}

// Outcome names a record's answer for counting: "201", "200 replay",
// "409 sold_out", "no answer", "gave up (tiny timeout)", ...
func Outcome(r Record) string {
	switch {
	case r.Status == 0 && r.GaveUp:
		return "gave up (tiny timeout)"
	case r.Status == 0:
		return "no answer"
	case r.Replayed:
		return strconv.Itoa(r.Status) + " replay"
	case r.Code != "":
		return strconv.Itoa(r.Status) + " " + r.Code
	default:
		return strconv.Itoa(r.Status)
	}
}

// Summary condenses records into the figures a report prints.
type Summary struct {
	Requests int `json:"requests"`
	Answered int `json:"answered"`
	Errors   int `json:"errors"`
	// NoAnswer: requests left without any answer (transport error or the
	// client's full timeout), the deliberate give-ups (GaveUp) not counted.
	NoAnswer   int            `json:"no_answer"`
	Duration   time.Duration  `json:"duration_ns"`
	Throughput float64        `json:"throughput_rps"`
	P50        time.Duration  `json:"p50_ns"`
	P90        time.Duration  `json:"p90_ns"`
	P99        time.Duration  `json:"p99_ns"`
	Max        time.Duration  `json:"max_ns"`
	ByOutcome  map[string]int `json:"by_outcome"`
	// AckedLost: acknowledged orders (2xx) the database does not have
	// (O3), filled in once the run was verified against the database: what
	// a database failover that forgot commits costs.
	AckedLost int `json:"acked_lost"`
	// OutcomeUnknown counts the 503 outcome_unknown answers (A3), and
	// OutcomeUnknownUnresolved the logical requests among them that no
	// later answer (the harness retries each with the same identity)
	// resolved to their order or a refusal.
	OutcomeUnknown           int `json:"outcome_unknown"`
	OutcomeUnknownUnresolved int `json:"outcome_unknown_unresolved"`
	// The queued mode (O3q): Accepted counts the 202s; AcceptedLost those
	// that ended neither as an order nor as a rejection (filled in once
	// the run was verified); Redeliveries the messages the consumers got
	// again, and LagP50Ms, LagP99Ms the time from a 202 to its order's
	// commit, filled in by the scenarios that fault a queue.
	Accepted     int     `json:"accepted,omitempty"`
	AcceptedLost int     `json:"accepted_lost"`
	Redeliveries int64   `json:"redeliveries,omitempty"`
	LagP50Ms     float64 `json:"lag_p50_ms,omitempty"`
	LagP99Ms     float64 `json:"lag_p99_ms,omitempty"`
}

// Summarize computes the summary of records (latency percentiles over the
// answered requests; throughput over the span from the first send to the
// last answer).
func Summarize(recs []Record) Summary {
	s := Summary{Requests: len(recs), ByOutcome: map[string]int{}}
	if len(recs) == 0 {
		return s
	}
	first, last := recs[0].Start, recs[0].End
	lat := make([]time.Duration, 0, len(recs))
	for _, r := range recs {
		if r.Start.Before(first) {
			first = r.Start
		}
		if r.End.After(last) {
			last = r.End
		}
		s.ByOutcome[Outcome(r)]++
		if r.Status == http.StatusAccepted {
			s.Accepted++
		}
		if r.Failed() {
			s.Errors++
		}
		if r.Status != 0 {
			s.Answered++
			lat = append(lat, r.Latency())
		} else if !r.GaveUp {
			s.NoAnswer++
		}
	}
	s.OutcomeUnknown, s.OutcomeUnknownUnresolved = countDoubts(recs)
	s.Duration = last.Sub(first)
	if sec := s.Duration.Seconds(); sec > 0 {
		s.Throughput = float64(s.Answered) / sec
	}
	slices.Sort(lat)
	s.P50, s.P90, s.P99 = Percentile(lat, 0.50), Percentile(lat, 0.90), Percentile(lat, 0.99)
	if len(lat) > 0 {
		s.Max = lat[len(lat)-1]
	}
	return s
}

// Percentile returns the q-quantile (nearest rank) of sorted durations.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// Point is one time bucket of a run, for charts.
type Point struct {
	T          time.Duration `json:"t_ns"` // bucket start, from the first send
	Requests   int           `json:"requests"`
	Errors     int           `json:"errors"`
	Throughput float64       `json:"throughput_rps"` // answers per second ending in the bucket
	P50        time.Duration `json:"p50_ns"`
	P99        time.Duration `json:"p99_ns"`
}

// Series buckets the records by the time their answer arrived, into about
// n buckets (at least 100ms wide).
func Series(recs []Record, n int) []Point {
	if len(recs) == 0 || n <= 0 {
		return nil
	}
	first, last := recs[0].Start, recs[0].End
	for _, r := range recs {
		if r.Start.Before(first) {
			first = r.Start
		}
		if r.End.After(last) {
			last = r.End
		}
	}
	width := max(100*time.Millisecond, last.Sub(first)/time.Duration(n))
	buckets := int(last.Sub(first)/width) + 1
	lats := make([][]time.Duration, buckets)
	pts := make([]Point, buckets)
	for i := range pts {
		pts[i].T = time.Duration(i) * width
	}
	for _, r := range recs {
		i := int(r.End.Sub(first) / width)
		pts[i].Requests++
		if r.Failed() {
			pts[i].Errors++
		}
		if r.Status != 0 {
			lats[i] = append(lats[i], r.Latency())
		}
	}
	for i := range pts {
		slices.Sort(lats[i])
		pts[i].Throughput = float64(len(lats[i])) / width.Seconds()
		pts[i].P50, pts[i].P99 = Percentile(lats[i], 0.5), Percentile(lats[i], 0.99)
	}
	return pts
}
