package report

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

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

func Ms(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
}

func Outcomes(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return strings.Join(parts, " | ")
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
			s.Requests, s.Duration.Seconds(), s.Throughput, Ms(s.P50), Ms(s.P90), Ms(s.P99), Ms(s.Max), s.Errors, s.NoAnswer)
		fmt.Fprintf(w, "answers:  %s\n", Outcomes(s.ByOutcome))
	}
	if v := r.Verdict; v != nil {
		c := v.Counts
		fmt.Fprintf(w, "database: %d orders (paid %d) holding %d units, %d cancelled; %d units added; stock left %d; oversold %d; duplicate orders %d\n",
			c.Orders, c.Paid, c.Held, c.Cancelled, c.Added, c.StockLeft, c.Oversold, c.Duplicates)
		fmt.Fprintf(w, "clients:  lost acknowledgements %d; undersold refusals %d\n", c.LostAcks, c.Undersold)
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
		WriteBench(w, r.Bench)
	}
	WriteFailover(w, r.Failover)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note:     %s\n", n)
	}
	if v := r.Verdict; v != nil {
		if r.ViaAPI {
			fmt.Fprint(w, "checked:  I1-I4 O1-O2 M1-M2 (audit route), O3-O5 and money (client records, orders read through the API)")
		} else {
			fmt.Fprint(w, "checked:  I1-I4 O1-O2 M1-M2 (database audit), O3-O5 and money (client records), L2 (ledger fences)")
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
			c.Summary.Throughput, Ms(c.Summary.P50), Ms(c.Summary.P99), yesNo(c.Linearizable), v)
	}
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

func renderHTML(rep Full) string {
	var b strings.Builder
	esc := html.EscapeString
	verdict := map[bool]string{true: `<span class="ok">PASS</span>`, false: `<span class="bad">FAIL</span>`}
	b.WriteString(`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>shop load test</title><style>
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1000px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}.ok{color:#1a7f37;font-weight:bold}.bad{color:#c62828;font-weight:bold}
pre{background:#f7f7f7;padding:6px;overflow-x:auto;font-size:12px}.muted{color:#666}svg{display:block;margin:.5em 0}
</style></head><body>`)
	fmt.Fprintf(&b, "<h1>Shop load test %s</h1><p class=muted>%s on %s<br><code>%s</code></p>",
		verdict[rep.Pass], rep.Started.Format(time.RFC3339), esc(rep.Host), esc(rep.Command))
	b.WriteString("<table><tr><th class=l>scenario</th><th>requests</th><th>answers/s</th><th>p50</th><th>p99</th><th>violations</th><th>result</th></tr>")
	for _, s := range rep.Scenarios {
		nv := "-"
		if s.Verdict != nil {
			nv = fmt.Sprint(len(s.Verdict.Violations))
		}
		fmt.Fprintf(&b, "<tr><td class=l><a href=\"#%s\">%s</a></td><td>%d</td><td>%.0f</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>",
			esc(s.Name), esc(s.Name), s.Summary.Requests, s.Summary.Throughput, Ms(s.Summary.P50), Ms(s.Summary.P99), nv, verdict[s.Pass])
	}
	b.WriteString("</table>")
	for _, s := range rep.Scenarios {
		fmt.Fprintf(&b, "<h2 id=\"%s\">%s: %s %s</h2>", esc(s.Name), esc(s.Name), esc(s.Title), verdict[s.Pass])
		if s.Setup != "" {
			fmt.Fprintf(&b, "<p class=muted>%s</p>", esc(s.Setup))
		}
		if s.Error != "" {
			fmt.Fprintf(&b, "<p class=bad>error: %s</p>", esc(s.Error))
		}
		if s.Bench != nil {
			b.WriteString(BenchHTML(s.Bench))
		}
		if s.Compare == nil && s.Summary.Requests > 0 {
			x := s.Summary
			fmt.Fprintf(&b, "<p>%d requests in %.2fs, %.0f answers/s; latency p50 %s, p90 %s, p99 %s, max %s; errors %d<br><span class=muted>%s</span></p>",
				x.Requests, x.Duration.Seconds(), x.Throughput, Ms(x.P50), Ms(x.P90), Ms(x.P99), Ms(x.Max), x.Errors, esc(Outcomes(x.ByOutcome)))
			b.WriteString(charts(s.Series, s.Faults))
		}
		if v := s.Verdict; v != nil {
			c := v.Counts
			fmt.Fprintf(&b, "<table><tr><th>orders</th><th>units held</th><th>cancelled</th><th>paid</th><th>units added</th><th>stock left</th><th>oversold</th><th>duplicates</th><th>lost acks</th><th>undersold</th></tr>"+
				"<tr><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td></tr></table>",
				c.Orders, c.Held, c.Cancelled, c.Paid, c.Added, c.StockLeft, c.Oversold, c.Duplicates, c.LostAcks, c.Undersold)
		}
		if s.Verdict != nil && s.Verdict.Linear != nil {
			b.WriteString(linearHTML(s.Verdict.Linear, s.Name, ""))
		}
		if len(s.Faults) > 0 {
			b.WriteString("<table><tr><th class=l>fault</th><th class=l>target</th><th>at</th><th>lasted</th><th class=l>effect</th></tr>")
			for _, f := range s.Faults {
				fmt.Fprintf(&b, "<tr><td class=l>%s</td><td class=l>%s</td><td>%.1fs</td><td>%s</td><td class=l>%s%s</td></tr>",
					esc(f.Name), esc(f.Target), f.At.Seconds(), f.Lasted.Round(time.Millisecond), esc(f.Effect), esc(f.Err))
			}
			b.WriteString("</table>")
		}
		b.WriteString(FailoverHTML(s.Failover))
		if len(s.Metrics) > 0 {
			b.WriteString("<p class=muted>")
			keys := make([]string, 0, len(s.Metrics))
			for k := range s.Metrics {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(&b, "%s = %.0f<br>", esc(k), s.Metrics[k])
			}
			b.WriteString("</p>")
		}
		if s.Compare != nil {
			b.WriteString("<table><tr><th class=l>row</th><th class=l>settings</th><th>orders</th><th>oversold units</th><th>duplicate orders</th><th>lost acks</th><th>undersold</th><th>answers/s</th><th>p50</th><th>p99</th><th class=l>linearizable</th><th class=l>violated</th></tr>")
			for _, c := range s.Compare {
				viol := strings.Join(c.Violated, " ")
				cls := "ok"
				if viol != "" {
					cls = "bad"
				} else {
					viol = "none"
				}
				if c.Error != "" {
					viol, cls = "error: "+c.Error, "bad"
				}
				fmt.Fprintf(&b, "<tr><td class=l>%s</td><td class=l><code>%s</code></td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%.0f</td><td>%s</td><td>%s</td><td class=l>%s</td><td class=\"l %s\">%s</td></tr>",
					esc(c.Row), esc(c.Settings), c.Orders, c.Oversold, c.Duplicates, c.LostAcks, c.Undersold, c.Summary.Throughput, Ms(c.Summary.P50), Ms(c.Summary.P99), linearCell(c.Linearizable, c.Linear, "compare "+c.Row), cls, esc(viol))
			}
			b.WriteString("</table>")
			for _, c := range s.Compare {
				if c.Linear != nil {
					b.WriteString(linearHTML(c.Linear, "compare "+c.Row, c.Row+": "))
				}
			}
			for _, c := range s.Compare {
				if len(c.Violations) > 0 {
					fmt.Fprintf(&b, "<p><b>%s</b></p>", esc(c.Row))
					b.WriteString(violationsHTML(firstPerInvariant(c.Violations)))
				}
			}
		}
		for _, n := range s.Notes {
			fmt.Fprintf(&b, "<p>%s</p>", esc(n))
		}
		if s.Verdict != nil {
			b.WriteString(violationsHTML(s.Verdict.Violations))
		}
	}
	b.WriteString("</body></html>\n")
	return b.String()
}

func violationsHTML(vs []verify.Violation) string {
	if len(vs) == 0 {
		return `<p class=ok>no violations</p>`
	}
	var b strings.Builder
	for _, v := range vs {
		rows, _ := json.MarshalIndent(v.Rows, "", " ")
		fmt.Fprintf(&b, "<p class=bad>%s product %d user %d: %s</p><pre>%s</pre>", html.EscapeString(v.Invariant), v.ProductID, v.UserID,
			html.EscapeString(v.Detail), html.EscapeString(string(rows)))
	}
	return b.String()
}

// charts draws latency (p50, p99) and throughput over time as inline SVG,
// with each fault marked.
func charts(pts []loadgen.Point, Faults []Fault) string {
	if len(pts) == 0 {
		return ""
	}
	var p50, p99, thr [][2]float64
	for _, p := range pts {
		t := p.T.Seconds()
		thr = append(thr, [2]float64{t, p.Throughput})
		if p.Requests > p.Errors {
			p50 = append(p50, [2]float64{t, float64(p.P50) / float64(time.Millisecond)})
			p99 = append(p99, [2]float64{t, float64(p.P99) / float64(time.Millisecond)})
		}
	}
	var marks []float64
	for _, f := range Faults {
		marks = append(marks, f.At.Seconds())
	}
	return lineChart("latency over time (ms)", []chartSeries{{"p99", "#c62828", p99}, {"p50", "#1565c0", p50}}, marks) +
		lineChart("throughput (answers per second)", []chartSeries{{"answers/s", "#2e7d32", thr}}, marks)
}

type chartSeries struct {
	name, color string
	pts         [][2]float64
}

// lineChart is a minimal SVG line chart: x in seconds, y from 0.
func lineChart(title string, series []chartSeries, marks []float64) string {
	const w, h, l, r, t, bt = 760.0, 220.0, 60.0, 20.0, 28.0, 30.0
	var xmax, ymax float64
	for _, s := range series {
		for _, p := range s.pts {
			xmax, ymax = math.Max(xmax, p[0]), math.Max(ymax, p[1])
		}
	}
	if xmax <= 0 {
		xmax = 1
	}
	ymax = niceCeil(ymax)
	x := func(v float64) float64 { return l + v/xmax*(w-l-r) }
	y := func(v float64) float64 { return h - bt - v/ymax*(h-t-bt) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-size="11" font-family="sans-serif">`, w, h, w, h)
	fmt.Fprintf(&b, `<text x="%.0f" y="16" font-size="13">%s</text>`, l, html.EscapeString(title))
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`,
			l, w-r, y(v), y(v), l-4, y(v)+4, trimFloat(v))
	}
	for i := 0; i <= 5; i++ {
		v := xmax * float64(i) / 5
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%.1fs</text>`, x(v), h-bt+14, v)
	}
	fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="#999"/>`, l, w-r, h-bt, h-bt)
	for _, m := range marks {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.0f" y2="%.0f" stroke="#f9a825" stroke-dasharray="4 3"/>`, x(m), x(m), t, h-bt)
	}
	for i, s := range series {
		if len(s.pts) == 0 {
			continue
		}
		var pts []string
		for _, p := range s.pts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p[0]), y(p[1])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, s.color, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%.0f" y="16" fill="%s">%s</text>`, w-r-70*float64(i+1), s.color, html.EscapeString(s.name))
	}
	b.WriteString("</svg>")
	return b.String()
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
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

// linearCell is a compare row's verdict, linking its pictures.
func linearCell(v *bool, l *loadgen.LinearReport, scope string) string {
	cls := map[bool]string{true: "ok", false: "bad"}
	s := html.EscapeString(yesNo(v))
	if v != nil {
		s = fmt.Sprintf("<span class=%s>%s</span>", cls[*v], s)
	}
	if l != nil {
		for _, p := range l.Products {
			if len(p.PictureHTML) > 0 {
				s += fmt.Sprintf(` <a href="%s">p%d</a>`, pictureName(scope, p.ProductID), p.ProductID)
			}
		}
	}
	return s
}

// linearHTML is a run's linearizability verdict, each product's, the
// smallest failing sets, and links to porcupine's pictures.
func linearHTML(l *loadgen.LinearReport, scope, label string) string {
	var b strings.Builder
	esc := html.EscapeString
	cls := "muted"
	if l.Linearizable != nil {
		cls = map[bool]string{true: "ok", false: "bad"}[*l.Linearizable]
	}
	fmt.Fprintf(&b, "<p><b>%slinearizability</b>: <span class=%s>%s</span> <span class=muted>(%d operations, %d answers that promise no effect left out, checked in %s)%s</span></p><ul>",
		esc(label), cls, esc(linearWord(l.Linearizable)), l.Operations, l.LeftOut, l.Took.Round(time.Millisecond), esc(map[bool]string{true: " " + l.Reason, false: ""}[l.Reason != ""]))
	for _, p := range l.Products {
		fmt.Fprintf(&b, "<li>product %d (%d units, %d operations, %d unanswered): %s", p.ProductID, p.Stock, p.Operations, p.Unanswered, esc(p.Verdict))
		if p.Reason != "" {
			fmt.Fprintf(&b, " (%s)", esc(p.Reason))
		}
		if len(p.PictureHTML) > 0 {
			fmt.Fprintf(&b, `; <a href="%s">porcupine's picture</a> of %s (porcupine says %s)`, pictureName(scope, p.ProductID), esc(p.Picture), esc(p.Porcupine))
		}
		if len(p.Failures) > 0 {
			f := p.Failures[0]
			rows, _ := json.MarshalIndent(f.Rows, "", " ")
			fmt.Fprintf(&b, "<br><span class=bad>%s</span><pre>%s</pre>", esc(f.Reason), esc(string(rows)))
		}
		b.WriteString("</li>")
	}
	b.WriteString("</ul>")
	return b.String()
}
