package stampede

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// StalenessLegend explains the staleness table; it is printed under the
// table and shown under the report's. r gives the timeout, settle time and
// TTL of the run.
func StalenessLegend(r *StalenessResult) []string {
	return []string{
		"Before each round every instance answers the product from its memory tier (Cache-Status hit). Then instance 0 takes a PUT of a new price, and each other instance is polled back to back on its own connection.",
		"instance N: time from the PUT's response to instance N's first answer with the PUT's revision (or a newer one). It includes one poll's round trip and, once the instance dropped its copy, the reload of the product.",
		"old answers after the PUT: answers with an older revision to polls sent after the PUT's response, before the new one; 0 means no instance served the old price once the write was acknowledged (the first poll goes out the moment the PUT's response arrives).",
		fmt.Sprintf("timeout: instance N still served an older revision when the round's timeout (%s) ended. The instances' cache TTL is %s, so no copy expired during a round: expiry cannot explain a convergence.", fmtSpan(r.TimeoutMillis), fmtSpan(r.CacheTTLMillis)),
		fmt.Sprintf("regressions: answers with an older revision after the instance had answered with the new one, while the round went on (polling continues %s after the last instance converged) and in the next warm-up's GETs.", fmtSpan(r.SettleMillis)),
	}
}

// fmtSpan renders a configured duration: whole minutes or seconds as such
// ("5m", "2s"), anything else as fmtMillis does.
func fmtSpan(m float64) string {
	d := time.Duration(m * float64(time.Millisecond))
	switch {
	case d >= time.Minute && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d >= time.Second && d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return fmtMillis(m)
}

// convergenceCell renders one sample: its time, or "timeout".
func convergenceCell(c Convergence) string {
	if !c.Converged {
		return "timeout"
	}
	return fmtMillis(c.ConvergedMillis)
}

// percentileCell renders a summary percentile: nil lies beyond the timeout.
func percentileCell(v *float64, timeoutMillis float64) string {
	if v == nil {
		return "> " + fmtSpan(timeoutMillis)
	}
	return fmtMillis(*v)
}

// stalenessSummaryLine is the summary in one sentence.
func stalenessSummaryLine(r *StalenessResult) string {
	s := r.Summary
	return fmt.Sprintf("convergence over %d samples (%d rounds x %d instances): p50 %s, p90 %s, p99 %s, max %s; converged %d, timed out %d; old answers after the PUT %d%s; regressions %d; poll errors %d",
		s.Samples, len(r.Rounds), r.Instances-1,
		percentileCell(s.P50Millis, r.TimeoutMillis), percentileCell(s.P90Millis, r.TimeoutMillis),
		percentileCell(s.P99Millis, r.TimeoutMillis), percentileCell(s.MaxMillis, r.TimeoutMillis),
		s.Converged, s.TimedOut, s.OldAnswers, lastOld(s), s.Regressions, s.Errors)
}

// lastOld says when the last old answer arrived, if any did.
func lastOld(s StalenessSummary) string {
	if s.OldAnswers == 0 {
		return ""
	}
	return " (the last at " + fmtMillis(s.LastOldMillis) + ")"
}

// roundRegressions sums a round's regressions.
func roundRegressions(r StalenessRound) int {
	n := 0
	for _, c := range r.Instances {
		n += c.Regressions
	}
	return n
}

// WriteStalenessTable prints the productd command line, one row per
// round, the summary, the legend and any warning.
func WriteStalenessTable(w io.Writer, r *StalenessResult) error {
	fmt.Fprintf(w, "staleness: %d productd processes; each round PUTs a new price on instance 0 and polls the others until they serve it\n", r.Instances)
	fmt.Fprintf(w, "productd %s\n\n", strings.Join(r.ProductdArgs, " "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "round\trevision\tprice\tPUT\t"
	for i := 1; i < r.Instances; i++ {
		head += "instance " + strconv.Itoa(i) + "\t"
	}
	fmt.Fprintln(tw, head+"regressions\t")
	for _, rd := range r.Rounds {
		row := fmt.Sprintf("%d\t%d\t%d\t%s\t", rd.Round, rd.Revision, rd.PriceCents, fmtMillis(rd.PutMillis))
		for _, c := range rd.Instances {
			row += convergenceCell(c) + "\t"
		}
		fmt.Fprintln(tw, row+strconv.Itoa(roundRegressions(rd))+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\n"+stalenessSummaryLine(r))
	fmt.Fprintln(w)
	for _, l := range StalenessLegend(r) {
		fmt.Fprintln(w, "  "+l)
	}
	for _, warn := range r.Warnings {
		fmt.Fprintln(w, "\nWARNING: "+warn)
	}
	return nil
}

// WriteStalenessJSON prints the result as one JSON document.
func WriteStalenessJSON(w io.Writer, r *StalenessResult) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Staleness *StalenessResult `json:"staleness"`
	}{r})
}

// instanceColor colours instance i (from 1) in the staleness chart; red is
// kept for regressions and timeouts.
func instanceColor(i int) string {
	return palette[1+(i-1)%(len(palette)-1)]
}

// writeStalenessHTML writes the staleness section: warnings, summary, the
// chart, the rounds and the productd command line.
func writeStalenessHTML(b *strings.Builder, r *StalenessResult) {
	b.WriteString("<h2>Staleness window after a write</h2>\n")
	for _, warn := range r.Warnings {
		fmt.Fprintf(b, "<p class=warn><b>Read with care.</b> %s</p>\n", html.EscapeString(warn))
	}
	s := r.Summary
	b.WriteString("<table><tr><th>samples</th><th>converged</th><th>timed out</th><th>p50</th><th>p90</th><th>p99</th><th>max</th><th>old answers after the PUT</th><th>regressions</th><th>poll errors</th><th>polls</th></tr>\n")
	fmt.Fprintf(b, "<tr><td>%d</td><td>%d</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%d%s</td><td>%d</td><td>%d</td><td>%d</td></tr></table>\n",
		s.Samples, s.Converged, s.TimedOut,
		percentileCell(s.P50Millis, r.TimeoutMillis), percentileCell(s.P90Millis, r.TimeoutMillis),
		percentileCell(s.P99Millis, r.TimeoutMillis), percentileCell(s.MaxMillis, r.TimeoutMillis),
		s.OldAnswers, lastOld(s), s.Regressions, s.Errors, s.Polls)
	b.WriteString("<ul class=legend>\n")
	for _, l := range StalenessLegend(r) {
		fmt.Fprintf(b, "<li>%s</li>\n", html.EscapeString(l))
	}
	b.WriteString("</ul>\n<h3>Convergence time per instance and round</h3>\n<p class=small>One row per polled instance; within a row, one line per round, round 1 at the top. " +
		"A line runs from the PUT's response to the instance's last answer with the old price; a dot is its first answer with the new one. " +
		"A cross in the right-hand column: still the old price at the timeout. A red ring: an older price after the new one.</p>\n")
	b.WriteString(stalenessSVG(r))
	b.WriteString("\n<h3>Rounds</h3>\n<table><tr><th>round</th><th>revision</th><th>price (cents)</th><th>PUT</th>")
	for i := 1; i < r.Instances; i++ {
		fmt.Fprintf(b, `<th><span style="color:%s">&#9632;</span> instance %d</th>`, instanceColor(i), i)
	}
	b.WriteString("<th>regressions</th></tr>\n")
	for _, rd := range r.Rounds {
		fmt.Fprintf(b, "<tr><td>%d</td><td>%d</td><td>%d</td><td>%s</td>", rd.Round, rd.Revision, rd.PriceCents, fmtMillis(rd.PutMillis))
		for _, c := range rd.Instances {
			class := ""
			if !c.Converged {
				class = " class=timeout"
			}
			fmt.Fprintf(b, "<td%s>%s</td>", class, convergenceCell(c))
		}
		fmt.Fprintf(b, "<td>%d</td></tr>\n", roundRegressions(rd))
	}
	b.WriteString("</table>\n<h3>productd command line (every instance)</h3>\n")
	fmt.Fprintf(b, "<pre>productd %s</pre>\n", html.EscapeString(strings.Join(r.ProductdArgs, " ")))
}

// stalenessSVG plots every sample: x is the convergence time (linear, from
// 0), one row per polled instance, one line per round within a row; the
// samples that timed out are crosses in a column of their own at the
// right; dashed lines mark p50 and p99 when they converged.
func stalenessSVG(r *StalenessResult) string {
	const w = 760
	const left, bandW = 96, 84
	rows, rounds := r.Instances-1, len(r.Rounds)
	if rows < 1 || rounds == 0 {
		return ""
	}
	rowPx := max(40, min(160, 8*rounds))
	rowH := float64(rowPx)
	h := padT + 12 + rowPx*rows + padB
	top := float64(padT + 12)
	hi, timedOut := 0.0, false
	for _, rd := range r.Rounds {
		for _, c := range rd.Instances {
			if c.Converged {
				hi = math.Max(hi, c.ConvergedMillis)
			} else {
				timedOut = true
			}
		}
	}
	if hi == 0 {
		hi = r.TimeoutMillis
	}
	step := niceStep(hi / 5)
	maxX := math.Ceil(hi/step) * step
	plotR := float64(w - padR)
	if timedOut {
		plotR -= bandW + 24
	}
	x := func(v float64) float64 { return left + v/maxX*(plotR-left) }
	bottom := top + rowH*float64(rows)
	y := func(row, round int) float64 {
		const inset = 5 // keeps a row's first and last rounds off its edges
		return top + rowH*float64(row) + inset + (float64(round)+0.5)/float64(rounds)*(rowH-2*inset)
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-size="11">`, w, h, w, h)
	// Row bands, alternately shaded, with the instance's name.
	for i := range rows {
		if i%2 == 1 {
			fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%.1f" height="%.1f" fill="#f6f6f6"/>`, left, top+rowH*float64(i), float64(w-padR-left), rowH)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="%s">instance %d</text>`, left-6, top+rowH*(float64(i)+0.5)+4, instanceColor(i+1), i+1)
	}
	for v := 0.0; v <= maxX+step/2; v += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e4e4e4"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`,
			x(v), top, x(v), bottom, x(v), bottom+15, tickMillis(v))
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888"/><line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#888"/>`,
		left, bottom, plotR, bottom, left, top, left, bottom)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#444">time from the PUT's response to the first answer with the new price</text>`, (left+plotR)/2, h-8)
	bandX := plotR + 24
	if timedOut {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%d" height="%.1f" fill="#fdecea" stroke="#e8b4ae"/>`, bandX, top, bandW, bottom-top)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#b00">timed out</text><text x="%.1f" y="%.1f" text-anchor="middle" fill="#b00">&gt; %s</text>`,
			bandX+bandW/2, bottom+15, bandX+bandW/2, bottom+28, html.EscapeString(fmtSpan(r.TimeoutMillis)))
	}
	b.WriteString(percentileMarks(r.Summary, x, top, bottom, w))
	for j, rd := range r.Rounds {
		for _, c := range rd.Instances {
			row := c.Instance - 1
			if row < 0 || row >= rows {
				continue
			}
			color, cy := instanceColor(c.Instance), y(row, j)
			if c.StalePolls > 0 { // seen serving the old price until then
				fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-opacity="0.45" stroke-width="2"/>`,
					left, cy, x(math.Min(c.LastStaleMillis, maxX)), cy, color)
			}
			if !c.Converged {
				cx := bandX + bandW/2
				fmt.Fprintf(&b, `<path d="M%.1f %.1fl6 6m0 -6l-6 6" stroke="#b00" stroke-width="1.6"/>`, cx-3, cy-3)
				continue
			}
			cx := x(c.ConvergedMillis)
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.2" fill="%s"/>`, cx, cy, color)
			if c.Regressions > 0 {
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="6" fill="none" stroke="#d62728" stroke-width="1.8"/>`, cx, cy)
			}
		}
	}
	b.WriteString("</svg>")
	return b.String()
}

// percentileMarks draws p50 and p99 (those that converged) as dashed lines
// over the plot, labelled above it: p50's label ends at its line, p99's
// starts at its line unless that would leave the chart, and when the two
// labels would overlap, p50's moves up a line.
func percentileMarks(s StalenessSummary, x func(float64) float64, top, bottom float64, w int) string {
	const charW = 6.2 // at font-size 11, generously
	var b strings.Builder
	mark := func(name string, v float64, end bool, dy float64) (lo, hi float64) {
		mx, label := x(v), name+" "+fmtMillis(v)
		width := charW * float64(len(label))
		tx, anchor := mx+3, "start"
		lo, hi = tx, tx+width
		if end {
			tx, anchor = mx-3, "end"
			lo, hi = tx-width, tx
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="5,4"/><text x="%.1f" y="%.1f" fill="#555" text-anchor="%s">%s</text>`,
			mx, top-14-dy, mx, bottom, tx, top-6-dy, anchor, html.EscapeString(label))
		return lo, hi
	}
	p99lo, p99hi := math.Inf(1), math.Inf(1)
	if s.P99Millis != nil {
		end := x(*s.P99Millis)+3+charW*float64(len("p99 "+fmtMillis(*s.P99Millis))) > float64(w-4)
		p99lo, p99hi = mark("p99", *s.P99Millis, end, 0)
	}
	if s.P50Millis != nil {
		mx := x(*s.P50Millis)
		width := charW * float64(len("p50 "+fmtMillis(*s.P50Millis)))
		dy := 0.0
		if mx-3 > p99lo && mx-3-width < p99hi {
			dy = 14
		}
		mark("p50", *s.P50Millis, true, dy)
	}
	return b.String()
}
