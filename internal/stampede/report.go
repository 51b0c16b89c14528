package stampede

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// WriteTable prints one row per mode.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\ttraffic\trequests\torigin queries\trequests/loader\tsuppression\tp50\tp95\tp99\tmax\terrors\t")
	for _, r := range results {
		perLoader := "n/a"
		if r.OriginQueries > 0 {
			perLoader = fmt.Sprintf("%.1f", r.RequestsPerLoader)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%.2f%%\t%s\t%s\t%s\t%s\t%d\t\n",
			r.Mode, r.Traffic, r.Requests, r.OriginQueries, perLoader, 100*r.Suppression,
			fmtMillis(r.P50Millis), fmtMillis(r.P95Millis), fmtMillis(r.P99Millis), fmtMillis(r.MaxMillis), r.Errors)
	}
	return tw.Flush()
}

func fmtMillis(m float64) string {
	switch {
	case m >= 1000:
		return fmt.Sprintf("%.2fs", m/1000)
	case m >= 10:
		return fmt.Sprintf("%.0fms", m)
	case m < 0.1:
		return fmt.Sprintf("%.2fms", m)
	default:
		return fmt.Sprintf("%.1fms", m)
	}
}

// WriteJSON prints the results as one JSON document.
func WriteJSON(w io.Writer, results []Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Results []Result `json:"results"`
	}{results})
}

// progress draws a progress bar on w until the returned func is called; a
// nil w draws nothing.
func progress(w io.Writer, mode string, done *atomic.Int64, n int, continuous bool, d time.Duration, start time.Time) func() {
	if w == nil {
		return func() {}
	}
	stop := make(chan struct{})
	finished := make(chan struct{})
	draw := func() {
		frac := float64(done.Load()) / float64(n)
		label := fmt.Sprintf("%d/%d", done.Load(), n)
		if continuous {
			frac = float64(time.Since(start)) / float64(d)
			label = fmt.Sprintf("%d requests, %.1fs/%.1fs", done.Load(), time.Since(start).Seconds(), d.Seconds())
		}
		frac = math.Max(0, math.Min(1, frac))
		const width = 30
		bar := strings.Repeat("#", int(frac*width)) + strings.Repeat("-", width-int(frac*width))
		fmt.Fprintf(w, "\r%-14s [%s] %s\033[K", mode, bar, label)
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				draw()
				fmt.Fprintln(w)
				return
			case <-t.C:
				draw()
			}
		}
	}()
	return func() { close(stop); <-finished }
}

// palette colours the modes in the report's charts.
var palette = []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"}

// WriteHTML writes a self-contained report: the table, the origin queries
// over time of each mode, and the latency distribution of each mode, as
// inline SVG (no script, no external asset).
func WriteHTML(w io.Writer, results []Result, note string) error {
	var b strings.Builder
	b.WriteString(`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>stampede report</title><style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
svg{background:#fff;border:1px solid #ddd;margin:4px}
.small{color:#666;font-size:90%}</style></head><body>
<h1>stampede: the herd and its cure</h1>
`)
	fmt.Fprintf(&b, "<p class=small>%s</p>\n", html.EscapeString(note))
	b.WriteString("<table><tr><th>mode</th><th>traffic</th><th>requests</th><th>origin queries</th><th>requests/loader</th><th>suppression</th><th>p50</th><th>p95</th><th>p99</th><th>max</th><th>errors</th></tr>\n")
	for i, r := range results {
		perLoader := "n/a"
		if r.OriginQueries > 0 {
			perLoader = fmt.Sprintf("%.1f", r.RequestsPerLoader)
		}
		fmt.Fprintf(&b, `<tr><td><span style="color:%s">&#9632;</span> %s</td><td>%s</td><td>%d</td><td>%d</td><td>%s</td><td>%.2f%%</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d</td></tr>`+"\n",
			palette[i%len(palette)], html.EscapeString(r.Mode), r.Traffic, r.Requests, r.OriginQueries, perLoader, 100*r.Suppression,
			fmtMillis(r.P50Millis), fmtMillis(r.P95Millis), fmtMillis(r.P99Millis), fmtMillis(r.MaxMillis), r.Errors)
	}
	b.WriteString("</table>\n<h2>Origin queries over time</h2><p class=small>Cumulative queries that reached the database since the traffic started. Each mode has its own scale.</p>\n")
	for i, r := range results {
		b.WriteString(timelineSVG(r, palette[i%len(palette)]))
	}
	b.WriteString("\n<h2>Latency distribution</h2><p class=small>Share of requests (y) answered within a latency (x, log scale).</p>\n")
	b.WriteString(cdfSVG(results))
	b.WriteString("\n<h2>How requests were served</h2><table><tr><th>mode</th><th>Cache-Status</th><th>requests</th></tr>\n")
	for _, r := range results {
		keys := make([]string, 0, len(r.CacheStatus))
		for k := range r.CacheStatus {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%d</td></tr>\n", html.EscapeString(r.Mode), html.EscapeString(k), r.CacheStatus[k])
		}
	}
	b.WriteString("</table></body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

const (
	chartW, chartH = 340, 220
	padL, padR     = 50, 12
	padT, padB     = 26, 34
)

func timelineSVG(r Result, color string) string {
	var b strings.Builder
	maxX := 1.0
	var maxY int64 = 1
	for _, p := range r.Timeline {
		maxX = math.Max(maxX, p.AtMillis)
		if p.Queries > maxY {
			maxY = p.Queries
		}
	}
	x := func(v float64) float64 { return padL + v/maxX*(chartW-padL-padR) }
	y := func(v int64) float64 { return chartH - padB - float64(v)/float64(maxY)*(chartH-padT-padB) }
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-size="11">`, chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="16" font-weight="bold">%s: %d origin queries</text>`, padL, html.EscapeString(r.Mode), r.OriginQueries)
	axes(&b, fmt.Sprintf("%.0f ms", maxX), fmt.Sprint(maxY))
	// A step line: the counter holds its value until the next sample.
	var pts []string
	prev := int64(0)
	for _, p := range r.Timeline {
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.AtMillis), y(prev)), fmt.Sprintf("%.1f,%.1f", x(p.AtMillis), y(p.Queries)))
		prev = p.Queries
	}
	fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/></svg>`, color, strings.Join(pts, " "))
	return b.String()
}

func axes(b *strings.Builder, xMax, yMax string) {
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`, padL, chartH-padB, chartW-padR, chartH-padB)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`, padL, padT, padL, chartH-padB)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">0</text>`, padL-4, chartH-padB+4)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`, padL-4, padT+4, html.EscapeString(yMax))
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`, chartW-padR, chartH-padB+16, html.EscapeString(xMax))
}

func cdfSVG(results []Result) string {
	const w, h = 700, 320
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range results {
		if len(r.latencies) == 0 {
			continue
		}
		lo = math.Min(lo, ms(r.latencies[0]))
		hi = math.Max(hi, ms(r.latencies[len(r.latencies)-1]))
	}
	if math.IsInf(lo, 0) {
		return ""
	}
	lo = math.Pow(10, math.Floor(math.Log10(math.Max(lo, 0.01))))
	hi = math.Pow(10, math.Ceil(math.Log10(math.Max(hi, lo*10))))
	x := func(v float64) float64 {
		v = math.Max(v, lo)
		return padL + (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*(w-padL-padR-120)
	}
	y := func(f float64) float64 { return h - padB - f*(h-padT-padB) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-size="11">`, w, h, w, h)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`,
		padL, h-padB, w-padR-120, h-padB, padL, padT, padL, h-padB)
	for d := lo; d <= hi*1.0001; d *= 10 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`,
			x(d), padT, x(d), h-padB, x(d), h-padB+16, fmtMillis(d))
	}
	for _, f := range []float64{0, 0.5, 0.95, 1} {
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.0f%%</text>`, padL-4, y(f)+4, f*100)
	}
	for i, r := range results {
		n := len(r.latencies)
		if n == 0 {
			continue
		}
		color := palette[i%len(palette)]
		// At most ~400 points per curve keeps the file small.
		step := max(1, n/400)
		var pts []string
		for j := 0; j < n; j += step {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(ms(r.latencies[j])), y(float64(j+1)/float64(n))))
		}
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(ms(r.latencies[n-1])), y(1)))
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`, color, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`,
			w-padR-110, padT+i*18, color, w-padR-95, padT+i*18+9, html.EscapeString(r.Mode))
	}
	b.WriteString("</svg>")
	return b.String()
}
