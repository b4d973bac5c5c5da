package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/seckill-lab/shop/loadtest/internal/benchreport"
	"github.com/seckill-lab/shop/loadtest/internal/render"
	"github.com/seckill-lab/shop/loadtest/internal/verify"

	"github.com/seckill-lab/shop/internal/loadgen"
)

// fullReport is report.json.
type Full struct {
	Started   time.Time  `json:"started"`
	Host      string     `json:"host"`
	Command   string     `json:"command"`
	Pass      bool       `json:"pass"`
	Scenarios []Scenario `json:"scenarios"`
}

// writeText prints one scenario for a person.
func WriteText(w io.Writer, r Scenario) {
	fmt.Fprintf(w, "\n=== %s: %s\n", r.Name, r.Title)
	if r.Setup != "" {
		fmt.Fprintf(w, "setup:    %s\n", r.Setup)
	}
	s := r.Summary
	if s.Requests > 0 && r.Compare == nil {
		fmt.Fprintf(w, "load:     %d requests in %.2fs: %.0f answers/s; latency p50 %s, p90 %s, p99 %s, max %s; errors (no answer or 5xx) %d; no answer at all %d\n",
			s.Requests, s.Duration.Seconds(), s.Throughput, render.Ms(s.P50), render.Ms(s.P90), render.Ms(s.P99), render.Ms(s.Max), s.Errors, s.NoAnswer)
		fmt.Fprintf(w, "answers:  %s\n", render.Outcomes(s.ByOutcome))
	}
	if v := r.Verdict; v != nil {
		c := v.Counts
		fmt.Fprintf(w, "database: %d orders (paid %d) holding %d units, %d cancelled; %d units added; stock left %d; oversold %d; duplicate orders %d\n",
			c.Orders, c.Paid, c.Held, c.Cancelled, c.Added, c.StockLeft, c.Oversold, c.Duplicates)
		fmt.Fprintf(w, "clients:  lost acknowledgements %d; undersold refusals %d\n", c.LostAcks, c.Undersold)
		writeA3(w, r.Summary, v)
	}
	if len(r.Metrics) > 0 {
		keys := make([]string, 0, len(r.Metrics))
		for k := range r.Metrics {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %.0f", strings.TrimPrefix(k, "shop_inventory_"), r.Metrics[k]))
		}
		fmt.Fprintf(w, "metrics:  %s (summed over instances and restarts)\n", strings.Join(parts, ", "))
	}
	for _, f := range r.Faults {
		fmt.Fprintf(w, "fault:    %s on %s at %.1fs, lasted %s: %s", f.Name, f.Target, f.At.Seconds(), f.Lasted.Round(time.Millisecond), f.Effect)
		if f.Err != "" {
			fmt.Fprintf(w, " (error: %s)", f.Err)
		}
		fmt.Fprintln(w)
	}
	if r.Compare != nil {
		writeCompare(w, r.Compare)
	}
	if r.Bench != nil {
		benchreport.Write(w, r.Bench)
	}
	WriteFailover(w, r.Failover)
	WritePartition(w, r.Partition)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note:     %s\n", n)
	}
	if v := r.Verdict; v != nil {
		if r.ViaAPI {
			fmt.Fprint(w, "checked:  I1-I4 O1-O2 M1-M2 (audit route), O3-O5, A3 and money (client records, orders read through the API)")
		} else {
			fmt.Fprint(w, "checked:  I1-I4 O1-O2 M1-M2 (database audit), O3-O5, A3 and money (client records), L2 (ledger fences)")
		}
		if r.Name == "chaos" {
			fmt.Fprint(w, ", L3 (lock free after SIGKILL)")
		}
		if r.Name == "pay" {
			fmt.Fprint(w, ", PAY (every order paid or cancelled)")
		}
		fmt.Fprintln(w)
		writeLinear(w, v.Linear, r.Name, "")
		writeViolations(w, v.Violations, "  ")
	}
	if r.Error != "" {
		fmt.Fprintf(w, "error:    %s\n", r.Error)
	}
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "result:   %s (%s)\n", verdict, r.Elapsed.Round(100*time.Millisecond))
}

// writeA3 is the verdict line of A3: the outcome_unknown answers, each
// retried with the same identity until an answer told its outcome, and
// the database's orders for it (one or none, never refused while it
// exists).
func writeA3(w io.Writer, s loadgen.Summary, v *verify.Verdict) {
	verdict := "OK"
	if slices.Contains(v.Invariants(), loadgen.A3) {
		verdict = "FAIL (the violations below say which)"
	}
	fmt.Fprintf(w, "A3:       %d outcome_unknown answers, each retried with the same key (or buyer and product): %d left unresolved; %s\n",
		s.OutcomeUnknown, s.OutcomeUnknownUnresolved, verdict)
}

func writeViolations(w io.Writer, vs []verify.Violation, indent string) {
	if len(vs) == 0 {
		fmt.Fprintf(w, "%sviolations: 0\n", indent)
		return
	}
	fmt.Fprintf(w, "%sviolations: %d\n", indent, len(vs))
	for _, v := range vs {
		fmt.Fprintf(w, "%s%s", indent, v.Invariant)
		if v.ProductID != 0 {
			fmt.Fprintf(w, " product %d", v.ProductID)
		}
		if v.UserID != 0 {
			fmt.Fprintf(w, " user %d", v.UserID)
		}
		fmt.Fprintf(w, ": %s\n", v.Detail)
		for i, row := range v.Rows {
			if i == 5 {
				fmt.Fprintf(w, "%s    ... %d more rows in report.json\n", indent, len(v.Rows)-5)
				break
			}
			b, _ := json.Marshal(row)
			fmt.Fprintf(w, "%s    %s\n", indent, b)
		}
	}
}

func writeCompare(w io.Writer, rows []CompareRow) {
	fmt.Fprintf(w, "%-30s %7s %9s %11s %10s %10s %8s %8s %8s %-12s  %s\n", "row", "orders", "oversold", "duplicates", "lost acks", "undersold", "req/s", "p50", "p99", "linearizable", "violated")
	for _, c := range rows {
		if c.Error != "" {
			fmt.Fprintf(w, "%-30s error: %s\n", c.Row, c.Error)
			continue
		}
		v := strings.Join(c.Violated, " ")
		if v == "" {
			v = "none"
		}
		fmt.Fprintf(w, "%-30s %7d %9d %11d %10d %10d %8.0f %8s %8s %-12s  %s\n", c.Row, c.Orders, c.Oversold, c.Duplicates, c.LostAcks, c.Undersold,
			c.Summary.Throughput, render.Ms(c.Summary.P50), render.Ms(c.Summary.P99), yesNo(c.Linearizable), v)
	}
	writePartitionColumn(w, rows)
	writeQueueColumn(w, rows)
	for _, c := range rows {
		writeLinear(w, c.Linear, "compare "+c.Row, c.Row+" ")
	}
	for _, c := range rows {
		if len(c.Violations) == 0 {
			continue
		}
		fmt.Fprintf(w, "  %s: the rows that prove it\n", c.Row)
		writeViolations(w, firstPerInvariant(c.Violations), "    ")
	}
}

// firstPerInvariant keeps the first violation of each invariant, for a
// readable table footnote.
func firstPerInvariant(vs []verify.Violation) []verify.Violation {
	seen := map[string]bool{}
	var out []verify.Violation
	for _, v := range vs {
		if !seen[v.Invariant] {
			seen[v.Invariant] = true
			if len(v.Rows) > 3 {
				v.Rows = v.Rows[:3]
			}
			out = append(out, v)
		}
	}
	return out
}

// writeFiles writes report.json and report.html into dir.
func WriteFiles(dir string, rep Full) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writePictures(dir, rep); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), b, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.html"), []byte(renderHTML(rep)), 0o644)
}

// yesNo is a linearizability verdict in a table cell.
func yesNo(b *bool) string {
	switch {
	case b == nil:
		return "unknown"
	case *b:
		return "yes"
	}
	return "NO"
}

// linearWord is a verdict in a sentence.
func linearWord(b *bool) string {
	switch {
	case b == nil:
		return "unknown"
	case *b:
		return "linearizable"
	}
	return "NOT linearizable"
}

// pictureName is the file, beside report.html, of porcupine's picture of
// one product of a scenario (or compare row): scope names which.
func pictureName(scope string, product int64) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(scope) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return fmt.Sprintf("linear-%s-p%d.html", strings.TrimSuffix(b.String(), "-"), product)
}

// writeLinear prints a run's linearizability verdict, each product's, and
// the smallest failing set of each product that is not linearizable, with
// its times and answers.
func writeLinear(w io.Writer, l *loadgen.LinearReport, scope, label string) {
	if l == nil {
		return
	}
	fmt.Fprintf(w, "linear:   %s%s: %d operations in %d products (%d answers that promise no effect left out), checked in %s, pictures in %s",
		label, linearWord(l.Linearizable), l.Operations, len(l.Products), l.LeftOut, l.Took.Round(time.Millisecond), l.PicturesTook.Round(time.Millisecond))
	if l.Reason != "" {
		fmt.Fprintf(w, "; %s", l.Reason)
	}
	fmt.Fprintln(w)
	for _, p := range l.Products {
		fmt.Fprintf(w, "            product %d (%d units, %d operations, %d unanswered): %s", p.ProductID, p.Stock, p.Operations, p.Unanswered, p.Verdict)
		if p.Reason != "" {
			fmt.Fprintf(w, " (%s)", p.Reason)
		}
		if len(p.PictureHTML) > 0 {
			fmt.Fprintf(w, "; picture %s: %s, porcupine says %s", pictureName(scope, p.ProductID), p.Picture, p.Porcupine)
		}
		if p.NoPicture != "" {
			fmt.Fprintf(w, "; no picture (%s)", p.NoPicture)
		}
		fmt.Fprintln(w)
		if len(p.Failures) == 0 {
			continue
		}
		f := p.Failures[0]
		fmt.Fprintf(w, "            %s\n            the smallest set of operations that cannot be ordered (failing), with what shows why (evidence):\n", f.Reason)
		for i, row := range f.Rows {
			if i == 10 {
				fmt.Fprintf(w, "              ... %d more in report.json\n", len(f.Rows)-10)
				break
			}
			answer := fmt.Sprint(row["answer"])
			if no, ok := row["order_no"]; ok {
				answer += " " + fmt.Sprint(no)
			}
			fmt.Fprintf(w, "              %-8s %s -> %-15v user %v, instance %v: %s\n", row["role"], row["start"], row["end"], row["user_id"], row["target"].(int)+1, answer)
		}
		if len(p.Failures) > 1 {
			fmt.Fprintf(w, "            (%d reasons found in all; report.json lists them)\n", len(p.Failures))
		}
	}
}

// linearLists are the linearizability reports of a run with the scope
// their pictures are named by.
func linearLists(rep Full) map[string]*loadgen.LinearReport {
	out := map[string]*loadgen.LinearReport{}
	for _, s := range rep.Scenarios {
		if s.Verdict != nil && s.Verdict.Linear != nil {
			out[s.Name] = s.Verdict.Linear
		}
		for _, c := range s.Compare {
			if c.Linear != nil {
				out["compare "+c.Row] = c.Linear
			}
		}
	}
	return out
}

// writePictures writes porcupine's pictures beside report.html and names
// them in the report.
func writePictures(dir string, rep Full) error {
	for scope, l := range linearLists(rep) {
		for i := range l.Products {
			p := &l.Products[i]
			if len(p.PictureHTML) == 0 {
				continue
			}
			p.PictureFile = pictureName(scope, p.ProductID)
			if err := os.WriteFile(filepath.Join(dir, p.PictureFile), p.PictureHTML, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeQueueColumn adds the queue rows' own figures (O3q): the 202s, the
// accepted orders that ended neither placed nor rejected, the redeliveries.
func writeQueueColumn(w io.Writer, rows []CompareRow) {
	for _, c := range rows {
		if c.Accepted > 0 && c.Error == "" {
			fmt.Fprintf(w, "queue:    %-28s accepted (202) %d, accepted lost %d, redeliveries %d\n", c.Row, c.Accepted, c.AcceptedLost, c.Redeliveries)
		}
	}
}
