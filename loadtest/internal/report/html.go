package report

import (
	"encoding/json"
	"fmt"
	"html"
	"sort"
	"strings"
	"time"

	"github.com/seckill-lab/shop/internal/loadgen"
	"github.com/seckill-lab/shop/loadtest/internal/benchreport"
	"github.com/seckill-lab/shop/loadtest/internal/render"
	"github.com/seckill-lab/shop/loadtest/internal/verify"
)

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
			esc(s.Name), esc(s.Name), s.Summary.Requests, s.Summary.Throughput, render.Ms(s.Summary.P50), render.Ms(s.Summary.P99), nv, verdict[s.Pass])
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
			b.WriteString(benchreport.HTML(s.Bench))
		}
		if s.Compare == nil && s.Summary.Requests > 0 {
			x := s.Summary
			fmt.Fprintf(&b, "<p>%d requests in %.2fs, %.0f answers/s; latency p50 %s, p90 %s, p99 %s, max %s; errors %d<br><span class=muted>%s</span></p>",
				x.Requests, x.Duration.Seconds(), x.Throughput, render.Ms(x.P50), render.Ms(x.P90), render.Ms(x.P99), render.Ms(x.Max), x.Errors, esc(render.Outcomes(x.ByOutcome)))
			b.WriteString(charts(s.Series, s.Faults))
		}
		if v := s.Verdict; v != nil {
			c := v.Counts
			fmt.Fprintf(&b, "<table><tr><th>orders</th><th>units held</th><th>cancelled</th><th>paid</th><th>units added</th><th>stock left</th><th>oversold</th><th>duplicates</th><th>lost acks</th><th>undersold</th><th>outcome unknown</th><th>unresolved (A3)</th></tr>"+
				"<tr><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td></tr></table>",
				c.Orders, c.Held, c.Cancelled, c.Paid, c.Added, c.StockLeft, c.Oversold, c.Duplicates, c.LostAcks, c.Undersold, s.Summary.OutcomeUnknown, s.Summary.OutcomeUnknownUnresolved)
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
		b.WriteString(PartitionHTML(s.Partition))
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
					esc(c.Row), esc(c.Settings), c.Orders, c.Oversold, c.Duplicates, c.LostAcks, c.Undersold, c.Summary.Throughput, render.Ms(c.Summary.P50), render.Ms(c.Summary.P99), linearCell(c.Linearizable, c.Linear, "compare "+c.Row), cls, esc(viol))
			}
			b.WriteString("</table>")
			b.WriteString(partitionColumnHTML(s.Compare))
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
func charts(pts []loadgen.Point, faults []Fault) string {
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
	for _, f := range faults {
		marks = append(marks, f.At.Seconds())
	}
	return render.LineChart("latency over time (ms)", []render.Series{{Name: "p99", Color: "#c62828", Pts: p99}, {Name: "p50", Color: "#1565c0", Pts: p50}}, marks) +
		render.LineChart("throughput (answers per second)", []render.Series{{Name: "answers/s", Color: "#2e7d32", Pts: thr}}, marks)
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
