package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strconv"
)

// The chart's geometry, in SVG user units.
const (
	chartW, chartH = 720, 420
	padL, padR     = 80, 170 // the legend is on the right
	padT, padB     = 40, 60
)

// palette gives each series a color, flightcache's first.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

// renderSVG draws the series as lines over a log-scale x axis (the x
// values are the ticks) and a y axis from 0, or log-scale when the values
// span more than a factor of 50.
func renderSVG(title, xLabel, yLabel string, ss []series) []byte {
	minX, maxX := math.Inf(1), math.Inf(-1)
	minY, maxY := math.Inf(1), 0.0
	for _, s := range ss {
		for _, p := range s.points {
			minX, maxX = math.Min(minX, p.x), math.Max(maxX, p.x)
			maxY = math.Max(maxY, p.y)
			if p.y > 0 {
				minY = math.Min(minY, p.y)
			}
		}
	}
	logY := maxY > 0 && minY > 0 && maxY/minY > 50
	// The image widens when a legend entry is longer than padR holds
	// (about 7 units a character); the plot keeps its size.
	width := chartW
	for _, s := range ss {
		width = max(width, chartW-padR+46+7*len(s.name)+8)
	}
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
	xAt := func(x float64) float64 {
		if maxX <= minX {
			return padL + plotW/2
		}
		return padL + (math.Log10(x)-math.Log10(minX))/(math.Log10(maxX)-math.Log10(minX))*plotW
	}
	var yTicks []float64
	var yAt func(float64) float64
	if logY {
		lo, hi := math.Floor(math.Log10(minY)), math.Ceil(math.Log10(maxY))
		yAt = func(y float64) float64 {
			return padT + plotH - (math.Log10(math.Max(y, math.Pow(10, lo)))-lo)/(hi-lo)*plotH
		}
		for e := lo; e <= hi; e++ {
			yTicks = append(yTicks, math.Pow(10, e))
		}
	} else {
		top := niceCeil(maxY * 1.1)
		yAt = func(y float64) float64 { return padT + plotH - y/top*plotH }
		for i := 0; i <= 5; i++ {
			yTicks = append(yTicks, top*float64(i)/5)
		}
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, chartH, width, chartH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", padL, html.EscapeString(title))
	// Grid and y ticks.
	for _, t := range yTicks {
		y := yAt(t)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", padL, y, padL+plotW, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, y+4, tickLabel(t, yTicks, logY))
	}
	// x ticks: the measured x values.
	for _, p := range ss[0].points {
		x := xAt(p.x)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x, padT, x, padT+plotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, padT+plotH+18, formatCount(p.x))
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#333"/>`+"\n", padL, padT+plotH, padL+plotW, padT+plotH)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%.1f" stroke="#333"/>`+"\n", padL, padT, padL, padT+plotH)
	scale := ""
	if logY {
		scale = ", log scale"
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s (log scale)</text>`+"\n", padL+plotW/2, chartH-14, html.EscapeString(xLabel))
	fmt.Fprintf(&b, `<text x="18" y="%.1f" text-anchor="middle" transform="rotate(-90 18 %.1f)">%s%s</text>`+"\n", padT+plotH/2, padT+plotH/2, html.EscapeString(yLabel), scale)
	// Series and legend.
	for i, s := range ss {
		color := palette[i%len(palette)]
		var pts bytes.Buffer
		for _, p := range s.points {
			fmt.Fprintf(&pts, "%.1f,%.1f ", xAt(p.x), yAt(p.y))
		}
		width := 2
		if i == 0 {
			width = 3
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%d" points="%s"><title>%s</title></polyline>`+"\n", color, width, bytes.TrimSpace(pts.Bytes()), html.EscapeString(s.name))
		for _, p := range s.points {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s at %s</title></circle>`+"\n", xAt(p.x), yAt(p.y), color, html.EscapeString(s.name), formatNum(p.y), formatCount(p.x))
		}
		ly := padT + 10 + i*20
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="%d"/>`+"\n", padL+plotW+16, ly, padL+plotW+40, ly, color, width)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s</text>`+"\n", padL+plotW+46, ly+4, html.EscapeString(s.name))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

// tickLabel prints an axis tick. On a linear axis every tick gets as many
// decimals as the finest one needs (0, 4, 8 rather than 0.00, 4.00, 8.00;
// 0, 0.5, 1.0 where one is needed); on a log axis, powers of ten, each
// its own (0.01, 0.1, 1, 10, 1,000).
func tickLabel(v float64, ticks []float64, logY bool) string {
	if logY {
		if v >= 1 {
			return formatCount(v)
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	decimals := 0
	for _, t := range ticks {
		d := 0
		for d < 4 && math.Abs(t*math.Pow(10, float64(d))-math.Round(t*math.Pow(10, float64(d)))) > 1e-6 {
			d++
		}
		decimals = max(decimals, d)
	}
	if decimals == 0 && v >= 1 {
		return formatCount(v)
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}
