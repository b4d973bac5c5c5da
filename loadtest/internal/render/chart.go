// Package render holds the small pieces the harness's reports are written
// with: durations and answer counts as text, charts as inline SVG.
package render

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Series is one line of a chart: its name, colour and points (x, y).
type Series struct {
	Name, Color string
	Pts         [][2]float64
}

// LineChart is a minimal SVG line chart: x in seconds, y from 0.
func LineChart(title string, series []Series, marks []float64) string {
	const w, h, l, r, t, bt = 760.0, 220.0, 60.0, 20.0, 28.0, 30.0
	var xmax, ymax float64
	for _, s := range series {
		for _, p := range s.Pts {
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
		if len(s.Pts) == 0 {
			continue
		}
		var pts []string
		for _, p := range s.Pts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p[0]), y(p[1])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, s.Color, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%.0f" y="16" fill="%s">%s</text>`, w-r-70*float64(i+1), s.Color, html.EscapeString(s.Name))
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
