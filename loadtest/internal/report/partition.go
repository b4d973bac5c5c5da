package report

import (
	"fmt"
	"html"
	"io"
	"strings"
	"time"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/loadtest/internal/render"
)

// PartitionRow is one fault of the partition scenario's seeded schedule
// and what followed it.
type PartitionRow struct {
	Fault  string        `json:"fault"`  // what the network did (e.g. "black-hole", "kernel drop")
	Target string        `json:"target"` // whose link: "instance 2 -> Redis", "every instance -> MySQL"
	At     time.Duration `json:"at_ns"`  // from the start of the load
	Lasted time.Duration `json:"lasted_ns"`
	// Recovery: from the heal until the hot product's first order created
	// (201) after it, on any instance; OnTarget: on the faulted instance.
	// 0: none.
	Recovery time.Duration `json:"recovery_ns"`
	OnTarget time.Duration `json:"recovery_on_target_ns,omitempty"`
	Bound    time.Duration `json:"bound_ns"` // A2: lock TTL + 3 s after the heal
	// StockLeft: units of the hot product left at the fault.
	StockLeft int64 `json:"stock_left"`
	// Slow: answers from the fault to the next one later than the request
	// timeout + 1 s; NoAnswer: requests without an answer (but give-ups).
	Slow        int                `json:"slow"`
	NoAnswer    int                `json:"no_answer"`
	ByStatus    map[string]int     `json:"by_status"` // answers overlapping the fault, by outcome
	StaleFences float64            `json:"stale_fence_rejections"`
	LocksLost   float64            `json:"locks_lost_before_release"`
	Err         string             `json:"error,omitempty"`
	Start       time.Time          `json:"-"`
	Healed      time.Time          `json:"-"`
	Instance    int                `json:"-"` // -1: every instance
	Before      map[string]float64 `json:"-"`
}

// WritePartition is the per-fault table of the text report.
func WritePartition(w io.Writer, rows []PartitionRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "partition: %-44s %6s %6s %5s %9s %9s %9s %5s %5s %5s %5s  %s\n", "fault, whose link", "at", "lasted", "left", "recovery", "on target", "A2 bound", "stale", "lost", "slow", "unans", "answers overlapping the fault")
	for _, f := range rows {
		fmt.Fprintf(w, "           %-44s %5.1fs %5.1fs %5d %9s %9s %9s %5.0f %5.0f %5d %5d  %s\n", f.Fault+", "+f.Target, f.At.Seconds(), f.Lasted.Seconds(), f.StockLeft,
			never(f.Recovery), onTarget(f), render.Ms(f.Bound), f.StaleFences, f.LocksLost, f.Slow, f.NoAnswer, render.Outcomes(f.ByStatus))
		if f.Err != "" {
			fmt.Fprintf(w, "           error: %s\n", FirstLine(f.Err))
		}
	}
	fmt.Fprintln(w, "           (recovery: from the heal to the hot product's next order, on any instance / on the faulted one; stale: stock writes refused for a stale fencing token;")
	fmt.Fprintln(w, "           lost: lock holds lost before release (watchdog or release); slow: answers later than the request timeout + 1s, unans: no answer, both from the fault to the next one)")
}

// onTarget is the recovery on the faulted instance; "-" when the fault hit
// every instance.
func onTarget(f PartitionRow) string {
	if f.Instance < 0 {
		return "-"
	}
	return never(f.OnTarget)
}

func never(d time.Duration) string {
	if d <= 0 {
		return "never"
	}
	return render.Ms(d)
}

// PartitionHTML is the per-fault table of report.html.
func PartitionHTML(rows []PartitionRow) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("<table><tr><th class=l>fault</th><th class=l>whose link</th><th>at</th><th>lasted</th><th>stock left</th><th>orders again after the heal</th><th>on the faulted instance</th><th>A2 bound</th><th>stale fences refused</th><th>locks lost</th><th>slower than timeout + 1s</th><th>no answer</th><th class=l>answers overlapping the fault</th></tr>")
	for _, f := range rows {
		cls := ""
		if f.Recovery == 0 || f.Recovery > f.Bound {
			cls = " class=bad"
		}
		fmt.Fprintf(&b, "<tr><td class=l>%s</td><td class=l>%s</td><td>%.1fs</td><td>%.1fs</td><td>%d</td><td%s>%s</td><td>%s</td><td>%s</td><td>%.0f</td><td>%.0f</td><td>%d</td><td>%d</td><td class=l>%s</td></tr>",
			html.EscapeString(f.Fault), html.EscapeString(f.Target), f.At.Seconds(), f.Lasted.Seconds(), f.StockLeft, cls, never(f.Recovery), onTarget(f), render.Ms(f.Bound),
			f.StaleFences, f.LocksLost, f.Slow, f.NoAnswer, html.EscapeString(render.Outcomes(f.ByStatus)))
	}
	b.WriteString("</table>")
	return b.String()
}

// PartitionCell is a compare row's partition column: the same strategy,
// with no lab pause, under the seeded network faults that make a lock
// holder outlive its lease (--compare-partitions).
type PartitionCell struct {
	Seed         int64           `json:"seed"`
	Faults       int             `json:"faults"`
	Orders       int64           `json:"orders"`
	Oversold     int64           `json:"oversold_units"`
	Duplicates   int64           `json:"duplicate_orders"`
	Violated     []string        `json:"violated"`
	Linearizable *bool           `json:"linearizable"`
	Clean        bool            `json:"clean"`
	Rejected     float64         `json:"stale_fence_rejections"`
	LocksLost    float64         `json:"locks_lost"`
	Summary      loadgen.Summary `json:"summary"`
	Error        string          `json:"error,omitempty"`
}

// String is the cell as the text table shows it.
func (c *PartitionCell) String() string {
	switch {
	case c == nil:
		return "-"
	case c.Error != "":
		return "error"
	case c.Clean:
		return fmt.Sprintf("clean (%d faults, %.0f holds lost, %.0f refused)", c.Faults, c.LocksLost, c.Rejected)
	}
	lin := ""
	if c.Linearizable != nil && !*c.Linearizable {
		lin = ", NOT linearizable"
	}
	return fmt.Sprintf("CAUGHT: %s (oversold %d%s; %d faults, %.0f holds lost)", strings.Join(c.Violated, " "), c.Oversold, lin, c.Faults, c.LocksLost)
}

// writePartitionColumn is the compare table's partition column, as lines
// under the table (the table is wide already).
func writePartitionColumn(w io.Writer, rows []CompareRow) {
	for _, c := range rows {
		if c.Partition != nil {
			fmt.Fprintf(w, "%-30s under partitions (seed %d): %s\n", c.Row, c.Partition.Seed, c.Partition)
		}
	}
}

// partitionColumnHTML is the partition column of report.html.
func partitionColumnHTML(rows []CompareRow) string {
	var b strings.Builder
	for _, c := range rows {
		if c.Partition == nil {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("<table><tr><th class=l>row</th><th class=l>under partitions (no lab pause)</th></tr>")
		}
		cls := "ok"
		if !c.Partition.Clean {
			cls = "bad"
		}
		fmt.Fprintf(&b, "<tr><td class=l>%s</td><td class=\"l %s\">seed %d: %s</td></tr>", html.EscapeString(c.Row), cls, c.Partition.Seed, html.EscapeString(c.Partition.String()))
	}
	if b.Len() > 0 {
		b.WriteString("</table>")
	}
	return b.String()
}
