package stampede

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// Legend explains the table's columns; it is printed under the table and
// shown under the report's.
var Legend = []string{
	"requests: requests sent; for a herd, all released at once right after the hot entry expired or was invalidated.",
	"origin queries: lookups that reached the database during the run.",
	"requests/loader: requests answered per origin query (requests / origin queries); higher means fewer trips to the database.",
	"suppression: share of requests that did not reach the database (1 - origin queries / requests).",
	"herd spread: time from the first request sent to the last; it must stay below the origin latency for a herd to be a herd.",
	"p50, p95, p99, max: latency percentiles as seen by the client.",
}

// WriteTable prints one row per mode, then the legend, then any warning
// (see Validate).
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\ttraffic\trequests\torigin queries\trequests/loader\tsuppression\therd spread\tp50\tp95\tp99\tmax\terrors\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%.2f%%\t%s\t%s\t%s\t%s\t%s\t%d\t\n",
			r.Mode, r.Traffic, r.Requests, r.OriginQueries, perLoader(r), 100*r.Suppression, spreadCell(r),
			fmtMillis(r.P50Millis), fmtMillis(r.P95Millis), fmtMillis(r.P99Millis), fmtMillis(r.MaxMillis), r.Errors)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, l := range Legend {
		fmt.Fprintln(w, "  "+l)
	}
	for _, r := range results {
		for _, warn := range r.Warnings {
			fmt.Fprintln(w, "\nWARNING: "+warn)
		}
	}
	return nil
}

func perLoader(r Result) string {
	if r.OriginQueries == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", r.RequestsPerLoader)
}

func spreadCell(r Result) string {
	if r.Traffic != "herd" {
		return "n/a"
	}
	return fmtMillis(r.SpreadMillis)
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

// ReportInfo is what the HTML report says besides the results.
type ReportInfo struct {
	// Note describes the run (target, herd size, when).
	Note string
	// OriginLatency is marked on the latency chart; zero when unknown.
	OriginLatency time.Duration
	// Staleness, when set, adds the staleness window section (see
	// ModeStaleness).
	Staleness *StalenessResult
}

// WriteHTML writes a self-contained report: the table and its legend, any
// warning that the run is not a valid comparison, the origin queries over
// time of each mode (one shared scale), and the latency distribution of
// each mode, as inline SVG (no script, no external asset); then, with
// info.Staleness, the staleness window section.
func WriteHTML(w io.Writer, results []Result, info ReportInfo) error {
	var b strings.Builder
	title := "stampede: the herd and its cure"
	if len(results) == 0 && info.Staleness != nil {
		title = "stampede: the staleness window"
	}
	b.WriteString(`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>stampede report</title><style>
body{font-family:system-ui,sans-serif;margin:2em;max-width:1150px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right;white-space:nowrap}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
svg{background:#fff;border:1px solid #ddd;margin:4px}
.small{color:#666;font-size:90%}.legend{color:#444;font-size:90%;margin:0 0 1em 1.2em;padding:0}
.warn{background:#fff3cd;border:1px solid #e0b000;padding:.6em 1em;margin:1em 0}
pre{background:#f8f8f8;border:1px solid #ddd;padding:.6em 1em;white-space:pre-wrap;font-size:90%}
td.timeout{color:#b00}</style></head><body>
`)
	fmt.Fprintf(&b, "<h1>%s</h1>\n<p class=small>%s</p>\n", html.EscapeString(title), html.EscapeString(info.Note))
	if len(results) > 0 {
		writeHerdHTML(&b, results, info)
	}
	if info.Staleness != nil {
		writeStalenessHTML(&b, info.Staleness)
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeHerdHTML writes the sections of the herd modes.
func writeHerdHTML(b *strings.Builder, results []Result, info ReportInfo) {
	for _, r := range results {
		for _, warn := range r.Warnings {
			fmt.Fprintf(b, "<p class=warn><b>Not a valid comparison.</b> %s</p>\n", html.EscapeString(warn))
		}
	}
	b.WriteString("<table><tr><th>mode</th><th>traffic</th><th>requests</th><th>origin queries</th><th>requests/loader</th><th>suppression</th><th>herd spread</th><th>p50</th><th>p95</th><th>p99</th><th>max</th><th>errors</th></tr>\n")
	for i, r := range results {
		fmt.Fprintf(b, `<tr><td><span style="color:%s">&#9632;</span> %s</td><td>%s</td><td>%d</td><td>%d</td><td>%s</td><td>%.2f%%</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d</td></tr>`+"\n",
			palette[i%len(palette)], html.EscapeString(r.Mode), r.Traffic, r.Requests, r.OriginQueries, perLoader(r), 100*r.Suppression, spreadCell(r),
			fmtMillis(r.P50Millis), fmtMillis(r.P95Millis), fmtMillis(r.P99Millis), fmtMillis(r.MaxMillis), r.Errors)
	}
	b.WriteString("</table>\n<ul class=legend>\n")
	for _, l := range Legend {
		fmt.Fprintf(b, "<li>%s</li>\n", html.EscapeString(l))
	}
	b.WriteString("</ul>\n<h2>Origin queries over time</h2><p class=small>Cumulative queries that reached the database since the traffic started. All panels share both axes; the y-axis is logarithmic, so 1 query and 1,000 stay comparable.</p>\n")
	sc := sharedScale(results)
	for i, r := range results {
		b.WriteString(timelineSVG(r, palette[i%len(palette)], sc))
	}
	b.WriteString("\n<h2>Latency distribution</h2><p class=small>Share of requests (y) answered within a latency (x, log scale). The dashed line is the origin latency: a request answered faster did not wait for the database.</p>\n")
	b.WriteString(cdfSVG(results, info.OriginLatency))
	b.WriteString("\n<h2>How requests were served</h2><table><tr><th>mode</th><th>Cache-Status</th><th>requests</th></tr>\n")
	for _, r := range results {
		keys := make([]string, 0, len(r.CacheStatus))
		for k := range r.CacheStatus {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(b, "<tr><td>%s</td><td>%s</td><td>%d</td></tr>\n", html.EscapeString(r.Mode), html.EscapeString(k), r.CacheStatus[k])
		}
	}
	b.WriteString("</table>\n")
}

const (
	chartW, chartH = 360, 250
	padL, padR     = 58, 26
	padT, padB     = 28, 46
)

// tickMillis is the one format of every time tick: milliseconds, as few
// digits as the value needs.
func tickMillis(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64) + " ms"
}

// scale is what the timeline panels share: one x range from 0 and one
// logarithmic y range.
type scale struct {
	maxX  float64 // ms, a round number
	decs  int     // y spans 10^0 .. 10^decs queries
	ticks []float64
}

func sharedScale(results []Result) scale {
	maxX, maxY := 1.0, int64(1)
	for _, r := range results {
		for _, p := range r.Timeline {
			maxX = math.Max(maxX, p.AtMillis)
			maxY = max(maxY, p.Queries)
		}
	}
	step := niceStep(maxX / 4)
	sc := scale{maxX: math.Ceil(maxX/step) * step, decs: max(1, int(math.Ceil(math.Log10(float64(maxY)+0.5))))}
	for v := 0.0; v <= sc.maxX+step/2; v += step {
		sc.ticks = append(sc.ticks, v)
	}
	return sc
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func timelineSVG(r Result, color string, sc scale) string {
	var b strings.Builder
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
	x := func(v float64) float64 { return padL + v/sc.maxX*plotW }
	// log10(1+q): 0 queries sit on the axis, 1 one step up, and the scale
	// is logarithmic above.
	top := math.Log10(1 + math.Pow(10, float64(sc.decs)))
	y := func(q int64) float64 { return float64(chartH-padB) - math.Log10(1+float64(q))/top*plotH }
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-size="11">`, chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="17" font-weight="bold">%s: %d origin queries</text>`, padL, html.EscapeString(r.Mode), r.OriginQueries)
	// Grid and ticks: y at 0, 1, 10, 100..., x at the shared round steps.
	for _, q := range append([]int64{0}, powersOfTen(sc.decs)...) {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%d</text>`,
			padL, y(q), chartW-padR, y(q), padL-4, y(q)+4, q)
	}
	for _, t := range sc.ticks {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`,
			x(t), padT, x(t), chartH-padB, x(t), chartH-padB+15, tickMillis(t))
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`,
		padL, chartH-padB, chartW-padR, chartH-padB, padL, padT, padL, chartH-padB)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444">time since the traffic started</text>`, padL+plotW/2, chartH-8)
	fmt.Fprintf(&b, `<text transform="translate(14 %.1f) rotate(-90)" text-anchor="middle" fill="#444">origin queries (log)</text>`, padT+plotH/2)
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

func powersOfTen(decs int) []int64 {
	var out []int64
	for p, i := int64(1), 0; i <= decs; p, i = p*10, i+1 {
		out = append(out, p)
	}
	return out
}

func cdfSVG(results []Result, originLatency time.Duration) string {
	const w, h = 760, 340
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
	if originLatency > 0 {
		hi = math.Max(hi, ms(originLatency))
	}
	lo = math.Pow(10, math.Floor(math.Log10(math.Max(lo, 0.01))))
	hi = math.Pow(10, math.Ceil(math.Log10(math.Max(hi, lo*10))))
	plotR := float64(w - padR - 130)
	x := func(v float64) float64 {
		v = math.Max(v, lo)
		return padL + (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*(plotR-padL)
	}
	y := func(f float64) float64 { return h - padB - f*(h-padT-padB) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-size="11">`, w, h, w, h)
	for d := lo; d <= hi*1.0001; d *= 10 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`,
			x(d), padT, x(d), h-padB, x(d), h-padB+15, tickMillis(d))
	}
	for _, f := range []float64{0, 0.5, 0.95, 1} {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%.0f%%</text>`,
			padL, y(f), plotR, y(f), padL-4, y(f)+4, f*100)
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%.1f" y2="%d" stroke="#888"/><line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`,
		padL, h-padB, plotR, h-padB, padL, padT, padL, h-padB)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444">latency (log scale)</text>`, (padL+plotR)/2, h-8)
	fmt.Fprintf(&b, `<text transform="translate(14 %.1f) rotate(-90)" text-anchor="middle" fill="#444">share of requests answered</text>`, float64(padT+h-padB)/2)
	if originLatency > 0 {
		ox := x(ms(originLatency))
		// The label sits above the plot, where no curve can cover it.
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#555" stroke-dasharray="5,4"/><text x="%.1f" y="%d" fill="#555" text-anchor="middle">origin latency %s</text>`,
			ox, padT-4, ox, h-padB, ox, padT-8, tickMillis(ms(originLatency)))
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
			w-padR-115, padT+i*18, color, w-padR-100, padT+i*18+9, html.EscapeString(r.Mode))
	}
	b.WriteString("</svg>")
	return b.String()
}
