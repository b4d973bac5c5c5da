package report

import (
	"fmt"
	"html"
	"io"
	"strings"
	"time"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/loadtest/internal/benchreport"
	"github.com/seckill-lab/shop/loadtest/internal/render"
	"github.com/seckill-lab/shop/loadtest/internal/verify"
)

// scenarioReport is everything one scenario run reports.
type Scenario struct {
	Name      string              `json:"name"`
	Title     string              `json:"title"`
	Setup     string              `json:"setup"`
	Strategy  string              `json:"strategy"`
	Params    map[string]any      `json:"params"`
	Started   time.Time           `json:"started"`
	Elapsed   time.Duration       `json:"elapsed_ns"`
	Summary   loadgen.Summary     `json:"summary"`
	Series    []loadgen.Point     `json:"series"`
	Verdict   *verify.Verdict     `json:"verdict,omitempty"`
	Metrics   map[string]float64  `json:"metrics,omitempty"`
	Faults    []Fault             `json:"faults,omitempty"`
	Compare   []CompareRow        `json:"compare,omitempty"`
	Bench     *benchreport.Report `json:"bench,omitempty"`
	Failover  []FailoverRow       `json:"failover,omitempty"`
	Partition []PartitionRow      `json:"partition,omitempty"`
	Notes     []string            `json:"notes,omitempty"`
	Pass      bool                `json:"pass"`
	Error     string              `json:"error,omitempty"`
	Unsettled int                 `json:"unsettled,omitempty"`
	// Linearizable: were the clients' histories linearizable (every
	// compare row's, for compare)? nil: unknown or not checked.
	Linearizable *bool `json:"linearizable"`
	// ViaAPI: the shops were --targets, judged through the audit route
	// (no verify.L2: the ledger's fences are not exposed).
	ViaAPI bool `json:"via_api,omitempty"`
}

// fill puts a load result and its verdict into the report.
func (r *Scenario) Fill(recs []loadgen.Record, v verify.Verdict, err error) {
	r.Summary = loadgen.Summarize(recs)
	r.Series = loadgen.Series(recs, 60)
	if err != nil {
		r.Error = err.Error()
		return
	}
	r.Verdict = &v
	r.Summary.AckedLost = v.Counts.LostAcks
	r.Summary.AcceptedLost = v.Counts.AcceptedLost
	r.Pass = v.OK()
	r.Linearizable = v.Linearizable
}

// fault is one injected failure and what it did.
type Fault struct {
	Name     string        `json:"name"`
	At       time.Duration `json:"at_ns"` // from the start of the load
	Lasted   time.Duration `json:"lasted_ns"`
	Target   string        `json:"target"`
	Effect   string        `json:"effect"`
	Err      string        `json:"error,omitempty"`
	Restarts int           `json:"restarts,omitempty"` // process starts it took to come back
	Instance int           `json:"-"`
	Start    time.Time     `json:"-"`
	End      time.Time     `json:"-"`
}

// compareRow is one strategy's line of the comparison table.
type CompareRow struct {
	Row        string          `json:"row"`
	Strategy   string          `json:"strategy"`
	Settings   string          `json:"settings"`
	Safe       bool            `json:"expected_safe"`
	Orders     int64           `json:"orders"`
	Oversold   int64           `json:"oversold_units"`
	Duplicates int64           `json:"duplicate_orders"`
	LostAcks   int             `json:"lost_acks"`
	Undersold  int             `json:"undersold"`
	StaleFence int64           `json:"stale_fence_accepted"`
	Violated   []string        `json:"violated"`
	Summary    loadgen.Summary `json:"summary"`
	Error      string          `json:"error,omitempty"`
	Rejected   float64         `json:"stale_fence_rejections"`
	// Linearizable is the row's histories' verdict (nil: unknown).
	Linearizable *bool                 `json:"linearizable"`
	Linear       *loadgen.LinearReport `json:"linearizability,omitempty"`
	Violations   []verify.Violation    `json:"-"`
	// The queue column's rows (queued mode): 202s answered, of them ended
	// neither as an order nor as a rejection (O3q), redeliveries counted
	// by the consumers that survived.
	Accepted     int   `json:"accepted,omitempty"`
	AcceptedLost int   `json:"accepted_lost,omitempty"`
	Redeliveries int64 `json:"redeliveries,omitempty"`
	// Partition: the same strategy under network faults (nil: not run).
	Partition *PartitionCell `json:"partition,omitempty"`
}

// allLinearizable is the verdict over several rows: false when one is not
// linearizable, else nil when one is unknown (or errored), else true.
func AllLinearizable(rows []CompareRow) *bool {
	out := true
	unknown := len(rows) == 0
	for _, c := range rows {
		switch {
		case c.Linearizable == nil:
			unknown = true
		case !*c.Linearizable:
			out = false
		}
	}
	if out && unknown {
		return nil
	}
	return &out
}

// failoverRow is one fault of the failover scenario as the report shows it.
type FailoverRow struct {
	Fault  string        `json:"fault"`
	Target string        `json:"target"` // the master that went away
	At     time.Duration `json:"at_ns"`  // from the start of the load
	// Promoted: until the topology named a new master for the hot lock.
	Promoted time.Duration `json:"promoted_after_ns"`
	// Recovery: until orders of the hot product flow again: its first 201
	// after the last of its sends that failed in the fault's span. 0: none.
	Recovery time.Duration `json:"recovery_ns"`
	// Bound is A2's limit on Recovery: lock TTL + promotion + 3 s slack.
	Bound time.Duration `json:"bound_ns"`
	// StockLeft: units of the hot product left when the fault was injected
	// (the database's); 0 fails the run, which then proves nothing about
	// the sale resuming.
	StockLeft int64 `json:"stock_left"`
	Restocked int64 `json:"restocked"` // units added to the hot product before the fault, in all
	// Slow: answers in the fault's span that took longer than lock wait +
	// 1 s, and NoAnswer: requests the client gave up on (see Record).
	Slow     int `json:"slow"`
	NoAnswer int `json:"no_answer"`
	// ByStatus: answers to requests that overlapped the window (fault to
	// recovery), by outcome.
	ByStatus    map[string]int `json:"by_status"`
	StaleFences float64        `json:"stale_fence_rejections"`    // from the fault to the next one (or the end)
	LocksLost   float64        `json:"locks_lost_before_release"` // same span
	// InDoubt: order batches whose COMMIT lost its connection, resolved
	// from the database by their order numbers (same span).
	InDoubt float64 `json:"commits_in_doubt"`
	// OutcomeUnknown: answers 503 outcome_unknown from the fault to the
	// next one (or the end), each retried until resolved (A3).
	OutcomeUnknown int                `json:"outcome_unknown"`
	Err            string             `json:"error,omitempty"`
	Start          time.Time          `json:"-"`
	PromotedAt     time.Time          `json:"-"`
	Before         map[string]float64 `json:"-"` // shop metrics at the fault
}

// writeFailover prints the per-fault table of a failover part.
func WriteFailover(w io.Writer, rows []FailoverRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "failover: %-48s %7s %6s %9s %9s %9s %6s %6s %6s %7s %6s %6s  %s\n", "fault (master killed or failed over)", "at", "left", "promoted", "recovery", "A2 bound", "stale", "lost", "doubt", "unknown", "slow", "unans", "answers in the window (fault to recovery)")
	for _, f := range rows {
		rec := "never"
		if f.Recovery > 0 {
			rec = render.Ms(f.Recovery)
		}
		fmt.Fprintf(w, "          %-48s %6.1fs %6d %9s %9s %9s %6.0f %6.0f %6.0f %7d %6d %6d  %s\n", f.Fault+" "+f.Target, f.At.Seconds(), f.StockLeft, render.Ms(f.Promoted), rec, render.Ms(f.Bound),
			f.StaleFences, f.LocksLost, f.InDoubt, f.OutcomeUnknown, f.Slow, f.NoAnswer, render.Outcomes(f.ByStatus))
		if f.Err != "" {
			fmt.Fprintf(w, "          error: %s\n", FirstLine(f.Err))
		}
	}
	fmt.Fprintln(w, "          (left: units of the hot product left at the fault; stale: stock writes the database refused for a stale fencing token; lost: product locks found gone at release;")
	fmt.Fprintln(w, "          doubt: order batches whose COMMIT lost its connection, looked up in the database; unknown: answers 503 outcome_unknown (the look-up outlasted the deadline), each retried until resolved (A3);")
	fmt.Fprintln(w, "          slow: answers later than the request timeout + 1s, unans: requests without an answer, both from the fault to the next one)")
}

// failoverHTML is the per-fault table of report.html.
func FailoverHTML(rows []FailoverRow) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("<table><tr><th class=l>fault</th><th class=l>master</th><th>at</th><th>stock left</th><th>promoted</th><th>orders flow again</th><th>A2 bound</th><th>stale fences refused</th><th>locks lost</th><th>commits in doubt</th><th>outcome unknown</th><th>slower than the request timeout + 1s</th><th>no answer</th><th class=l>answers in the window</th></tr>")
	for _, f := range rows {
		rec, cls := "never", "bad"
		if f.Recovery > 0 {
			rec = render.Ms(f.Recovery)
			if f.Recovery <= f.Bound {
				cls = "ok"
			}
		}
		fmt.Fprintf(&b, "<tr><td class=l>%s</td><td class=l>%s</td><td>%.1fs</td><td>%d</td><td>%s</td><td class=%s>%s</td><td>%s</td><td>%.0f</td><td>%.0f</td><td>%.0f</td><td>%d</td><td>%d</td><td>%d</td><td class=l>%s%s</td></tr>",
			html.EscapeString(f.Fault), html.EscapeString(f.Target), f.At.Seconds(), f.StockLeft, render.Ms(f.Promoted), cls, rec, render.Ms(f.Bound),
			f.StaleFences, f.LocksLost, f.InDoubt, f.OutcomeUnknown, f.Slow, f.NoAnswer, html.EscapeString(render.Outcomes(f.ByStatus)), html.EscapeString(f.Err))
	}
	b.WriteString("</table>")
	return b.String()
}

func FirstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
