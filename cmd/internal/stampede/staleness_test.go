package stampede

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
)

// One instance's answers of a round, in order: old revisions until the
// new one, which counts from its first answer; an older one after it is a
// regression; an error is neither; answers after the timeout do not
// count, unless the instance had converged (then they may regress).
func TestConvergenceFindsTheFirstNewAnswerAndCountsRegressions(t *testing.T) {
	msAt := func(m float64) time.Duration { return time.Duration(m * float64(time.Millisecond)) }
	polls := []poll{
		{at: msAt(0.4), ok: true, rev: 6},
		{at: msAt(0.9), ok: true, rev: 6},
		{at: msAt(1.3), ok: false},
		{at: msAt(1.8), ok: true, rev: 7}, // converged
		{at: msAt(2.2), ok: true, rev: 8}, // newer still: fine
		{at: msAt(2.6), ok: true, rev: 6}, // regression
		{at: msAt(3.0), ok: true, rev: 7},
		{at: msAt(3.4), ok: true, rev: 5}, // regression
	}
	got := convergence(2, polls, 7, time.Second)
	want := Convergence{Instance: 2, Converged: true, ConvergedMillis: 1.8, LastStaleMillis: 0.9, Polls: 8, StalePolls: 2, Regressions: 2, Errors: 1}
	if got != want {
		t.Fatalf("convergence = %+v\nwant          %+v", got, want)
	}

	// Still old at the timeout; the new value only after it.
	late := []poll{{at: msAt(10), ok: true, rev: 1}, {at: msAt(990), ok: true, rev: 1}, {at: msAt(1001), ok: true, rev: 2}}
	got = convergence(1, late, 2, time.Second)
	want = Convergence{Instance: 1, LastStaleMillis: 990, Polls: 2, StalePolls: 2}
	if got != want {
		t.Fatalf("late convergence = %+v\nwant               %+v", got, want)
	}

	// Converged in time, regressed after the timeout: still counted.
	got = convergence(1, []poll{{at: msAt(999), ok: true, rev: 2}, {at: msAt(1100), ok: true, rev: 1}}, 2, time.Second)
	if !got.Converged || got.Regressions != 1 || got.Polls != 2 {
		t.Fatalf("regression after the timeout: %+v", got)
	}

	// New from the first answer: no stale poll, no line in the chart.
	got = convergence(1, []poll{{at: msAt(0.3), ok: true, rev: 3}}, 3, time.Second)
	if !got.Converged || got.ConvergedMillis != 0.3 || got.StalePolls != 0 || got.LastStaleMillis != 0 {
		t.Fatalf("immediate convergence = %+v", got)
	}
}

// ptr is a summary percentile in tests.
func ptr(v float64) *float64 { return &v }

func eqPtr(a, b *float64) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func fmtPtr(p *float64) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

// The percentiles are nearest-rank over every sample, a timed-out sample
// ranking above every converged one: once a percentile lands on one, it is
// reported as beyond the timeout (nil), never as a number.
func TestSummariseStalenessRanksTimeoutsAboveEveryTime(t *testing.T) {
	conv := func(i int, m float64) Convergence {
		return Convergence{Instance: i, Converged: true, ConvergedMillis: m, Polls: 3}
	}
	var rounds []StalenessRound
	// 10 rounds x 2 instances: 18 converged (1..18 ms), 2 timed out.
	for n := range 10 {
		r := StalenessRound{Round: n + 1}
		r.Instances = append(r.Instances, conv(1, float64(2*n+1)))
		if n < 8 {
			r.Instances = append(r.Instances, conv(2, float64(2*n+2)))
		} else {
			r.Instances = append(r.Instances, Convergence{Instance: 2, Polls: 40, StalePolls: 40})
		}
		rounds = append(rounds, r)
	}
	rounds[3].Instances[0].Regressions = 2
	rounds[5].Instances[1].Errors = 1
	s := summariseStaleness(rounds)
	// Sorted: 1,2,...,16,17,19,+Inf,+Inf (18 and 20 would be instance 2's
	// rounds 9 and 10, which timed out).
	if s.Samples != 20 || s.Converged != 18 || s.TimedOut != 2 || s.Regressions != 2 || s.Errors != 1 || s.Polls != 18*3+80 || s.OldAnswers != 80 {
		t.Fatalf("counts %+v", s)
	}
	for _, c := range []struct {
		name      string
		got, want *float64
	}{{"p50", s.P50Millis, ptr(10)}, {"p90", s.P90Millis, ptr(19)}, {"p99", s.P99Millis, nil}, {"max", s.MaxMillis, nil}} {
		if !eqPtr(c.got, c.want) {
			t.Errorf("%s = %s, want %s", c.name, fmtPtr(c.got), fmtPtr(c.want))
		}
	}
	if got := percentileCell(s.P99Millis, 5000); got != "> 5s" {
		t.Errorf("a timed-out p99 renders %q, want \"> 5s\"", got)
	}

	// All converged: max is the largest time.
	s = summariseStaleness(rounds[:8])
	if s.TimedOut != 0 || !eqPtr(s.MaxMillis, ptr(16)) || !eqPtr(s.P50Millis, ptr(8)) {
		t.Fatalf("all converged: %+v (max %s, p50 %s)", s, fmtPtr(s.MaxMillis), fmtPtr(s.P50Millis))
	}
	if s := summariseStaleness(nil); s.Samples != 0 || s.P50Millis != nil {
		t.Fatalf("no rounds: %+v", s)
	}
}

// stalenessFixture: 3 instances (2 polled), 4 rounds; instance 2 times out
// in round 3, instance 1 regresses in round 2.
func stalenessFixture() *StalenessResult {
	r := &StalenessResult{Instances: 3, TimeoutMillis: 5000, SettleMillis: 200, CacheTTLMillis: 300_000,
		ProductdArgs: []string{"-redis", "redis://:xxxxx@127.0.0.1:6379/0", "-cache-ttl", "5m0s"}}
	times := [][2]float64{{1.5, 2.5}, {4, 3}, {2, -1}, {8, 6}} // -1: timed out
	for n, tt := range times {
		rd := StalenessRound{Round: n + 1, Revision: int64(n + 1), PriceCents: 1000 + int64(n+1), PutMillis: 3}
		for i, m := range tt {
			c := Convergence{Instance: i + 1, Polls: 10, StalePolls: 2, LastStaleMillis: m / 2}
			if m >= 0 {
				c.Converged, c.ConvergedMillis = true, m
			} else {
				c.LastStaleMillis, c.StalePolls, c.Polls = 4999, 9000, 9000
			}
			rd.Instances = append(rd.Instances, c)
		}
		r.Rounds = append(r.Rounds, rd)
	}
	r.Rounds[1].Instances[0].Regressions = 1
	r.Summary = summariseStaleness(r.Rounds)
	return r
}

// The chart, for a known input: well-formed SVG, one row per polled
// instance, a dot per converged sample at its time on a linear axis from
// 0, a cross per timed-out one in its own column, a ring per regressed
// sample, p50 marked, p99 not (it timed out); and the same bytes every
// time.
func TestStalenessSVGPlotsEverySampleWhereItBelongs(t *testing.T) {
	r := stalenessFixture()
	svg := stalenessSVG(r)
	if svg != stalenessSVG(r) {
		t.Fatal("the chart is not deterministic")
	}
	if err := xml.Unmarshal([]byte(svg), new(struct{})); err != nil {
		t.Fatalf("not well-formed XML: %v", err)
	}
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
	}
	dots := regexp.MustCompile(`<circle cx="([0-9.]+)" cy="([0-9.]+)" r="3.2"`).FindAllStringSubmatch(svg, -1)
	if len(dots) != 7 {
		t.Fatalf("%d dots, want 7 (8 samples, 1 timed out)", len(dots))
	}
	if n := strings.Count(svg, `<path d="M`); n != 1 {
		t.Fatalf("%d crosses, want 1", n)
	}
	if n := strings.Count(svg, `r="6" fill="none" stroke="#d62728"`); n != 1 {
		t.Fatalf("%d regression rings, want 1", n)
	}
	for _, want := range []string{">instance 1<", ">instance 2<", ">timed out<", ">&gt; 5s<", ">p50 3.0ms<", ">0 ms<", ">8 ms<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the chart lacks %q", want)
		}
	}
	if strings.Contains(svg, ">p99 ") || strings.Contains(svg, ">instance 3<") {
		t.Error("the chart marks a p99 that timed out, or a row for instance 0's writes")
	}
	// Linear from 0 to 8 ms (the largest time, a round number): the 0 ms
	// tick and the 8 ms tick bound the dots; 4 ms (round 2, instance 1)
	// sits half way.
	tick := func(label string) float64 {
		m := regexp.MustCompile(`<text x="([0-9.]+)" y="[0-9.]+" text-anchor="middle">` + label + `</text>`).FindStringSubmatch(svg)
		if m == nil {
			t.Fatalf("no %s tick", label)
		}
		var v float64
		fmt.Sscan(m[1], &v)
		return v
	}
	x0, x8 := tick("0 ms"), tick("8 ms")
	var xs []float64
	for _, d := range dots {
		var v float64
		fmt.Sscan(d[1], &v)
		xs = append(xs, v)
		if v < x0 || v > x8+0.05 {
			t.Fatalf("dot at x=%v outside the axis [%v, %v]", v, x0, x8)
		}
	}
	if !slices.ContainsFunc(xs, func(v float64) bool { return v > (x0+x8)/2-0.1 && v < (x0+x8)/2+0.1 }) {
		t.Fatalf("no dot half way (%v) for 4 ms: %v", (x0+x8)/2, xs)
	}
	// Rounds run down the row: instance 1's dots, by increasing y, are
	// rounds 1..4 (1.5, 4, 2 and 8 ms); all of them lie above instance
	// 2's.
	type pt struct{ x, y float64 }
	byInstance := map[string][]pt{}
	for _, m := range regexp.MustCompile(`<circle cx="([0-9.]+)" cy="([0-9.]+)" r="3.2" fill="(#[0-9a-f]+)"`).FindAllStringSubmatch(svg, -1) {
		var p pt
		fmt.Sscan(m[1], &p.x)
		fmt.Sscan(m[2], &p.y)
		byInstance[m[3]] = append(byInstance[m[3]], p)
	}
	one, two := byInstance[instanceColor(1)], byInstance[instanceColor(2)]
	if len(one) != 4 || len(two) != 3 {
		t.Fatalf("dots per instance: %d and %d, want 4 and 3", len(one), len(two))
	}
	slices.SortFunc(one, func(a, b pt) int { return int(a.y - b.y) })
	at := func(m float64) float64 { return x0 + m/8*(x8-x0) }
	for i, m := range []float64{1.5, 4, 2, 8} {
		if d := one[i].x - at(m); d < -0.1 || d > 0.1 {
			t.Fatalf("instance 1, round %d: x=%v, want %v (%v ms)", i+1, one[i].x, at(m), m)
		}
	}
	for _, p := range two {
		if p.y <= one[3].y {
			t.Fatalf("an instance-2 dot (y=%v) is not below instance 1's row (last y=%v)", p.y, one[3].y)
		}
	}

	// Nothing converged: the axis runs to the timeout and every sample is
	// a cross.
	before := stalenessFixture()
	for i := range before.Rounds {
		for j := range before.Rounds[i].Instances {
			before.Rounds[i].Instances[j] = Convergence{Instance: j + 1, Polls: 9000, StalePolls: 9000, LastStaleMillis: 4999}
		}
	}
	before.Summary = summariseStaleness(before.Rounds)
	svg = stalenessSVG(before)
	if strings.Count(svg, `<path d="M`) != 8 || strings.Contains(svg, "<circle") || !strings.Contains(svg, ">5000 ms<") || strings.Contains(svg, ">p50") {
		t.Fatalf("a run that never converged is not 8 crosses on a 0..5000 ms axis without percentiles:\n%s", svg)
	}
	// All converged: no timed-out column.
	if svg := stalenessSVG(&StalenessResult{Instances: 2, TimeoutMillis: 5000, Rounds: []StalenessRound{{Instances: []Convergence{{Instance: 1, Converged: true, ConvergedMillis: 1}}}}}); strings.Contains(svg, "timed out") || !strings.Contains(svg, "<circle") {
		t.Fatalf("all converged:\n%s", svg)
	}
}

// The p50 and p99 labels stay inside the chart and never overlap: p99's
// turns to the left near the right edge, and p50's then moves up a line
// when the two would collide.
func TestPercentileLabelsStayInsideAndApart(t *testing.T) {
	const w = 760
	x := func(v float64) float64 { return 96 + v/30*(w-26-96) }
	label := regexp.MustCompile(`<text x="([0-9.]+)" y="([0-9.]+)" fill="#555" text-anchor="(start|end)">(p\d\d [^<]+)</text>`)
	for _, c := range []struct{ p50, p99 float64 }{{3, 10}, {17, 29}, {28, 29}, {29, 29}} {
		marks := percentileMarks(StalenessSummary{P50Millis: ptr(c.p50), P99Millis: ptr(c.p99)}, x, 40, 200, w)
		type box struct{ lo, hi, y float64 }
		var boxes []box
		for _, m := range label.FindAllStringSubmatch(marks, -1) {
			var tx, ty float64
			fmt.Sscan(m[1], &tx)
			fmt.Sscan(m[2], &ty)
			width := 6.2 * float64(len(m[4]))
			b := box{tx, tx + width, ty}
			if m[3] == "end" {
				b = box{tx - width, tx, ty}
			}
			if b.lo < 0 || b.hi > w {
				t.Errorf("p50 %v, p99 %v: label %q spans [%v, %v], outside the chart", c.p50, c.p99, m[4], b.lo, b.hi)
			}
			boxes = append(boxes, b)
		}
		if len(boxes) != 2 {
			t.Fatalf("p50 %v, p99 %v: %d labels in %s", c.p50, c.p99, len(boxes), marks)
		}
		if a, b := boxes[0], boxes[1]; a.y == b.y && a.lo < b.hi && b.lo < a.hi {
			t.Errorf("p50 %v, p99 %v: the labels overlap: %+v", c.p50, c.p99, boxes)
		}
	}
}

// The text and JSON outputs and the report's section carry the rounds,
// the summary with a timed-out percentile as such, the legend, the
// productd command line, and the warning of a timeout not shorter than
// the TTL.
func TestStalenessOutputsShowRoundsSummaryAndFlags(t *testing.T) {
	r := stalenessFixture()
	r.Warnings = []string{"the round timeout is not shorter than the TTL"}
	var table bytes.Buffer
	if err := WriteStalenessTable(&table, r); err != nil {
		t.Fatal(err)
	}
	out := table.String()
	for _, want := range []string{"productd -redis redis://:xxxxx@127.0.0.1:6379/0 -cache-ttl 5m0s", "instance 1", "instance 2", "timeout",
		"p50 3.0ms, p90 > 5s, p99 > 5s, max > 5s; converged 7, timed out 1; old answers after the PUT 9014 (the last at 5.00s); regressions 1", "cache TTL is 5m", "WARNING: the round timeout"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	rows := regexp.MustCompile(`(?m)^\s+(\d+)\s+\d+\s+\d+\s+\S+\s+(\S+)\s+(\S+)\s+(\d+)$`).FindAllStringSubmatch(out, -1)
	if len(rows) != 4 || rows[2][3] != "timeout" || rows[1][2] != "4.0ms" || rows[1][4] != "1" {
		t.Fatalf("rows %q", rows)
	}

	var js bytes.Buffer
	if err := WriteStalenessJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Staleness struct {
			Rounds  []StalenessRound
			Summary map[string]any
		}
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Staleness.Rounds) != 4 || doc.Staleness.Summary["p99Ms"] != nil || doc.Staleness.Summary["p50Ms"] != 3.0 || doc.Staleness.Rounds[2].Instances[1].Converged {
		t.Fatalf("JSON %s", js.Bytes())
	}

	var report bytes.Buffer
	if err := WriteHTML(&report, nil, ReportInfo{Note: "note", Staleness: r}); err != nil {
		t.Fatal(err)
	}
	h := report.String()
	for _, want := range []string{"stampede: the staleness window", "Staleness window after a write", "<svg", "class=timeout>timeout<",
		"productd -redis redis://:xxxxx@127.0.0.1:6379/0 -cache-ttl 5m0s", "Read with care."} {
		if !strings.Contains(h, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	if strings.Contains(h, "Origin queries over time") {
		t.Error("a staleness report has the herd's sections")
	}
}

func TestStalenessFlagsAreChecked(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-mode", "staleness"}, "-mode staleness needs -instances 2 or more"},
		{[]string{"-mode", "staleness", "-instances", "1", "-redis", "redis://127.0.0.1:1"}, "-mode staleness needs -instances 2 or more"},
		{[]string{"-mode", "staleness", "-instances", "2"}, "-instances needs -redis"},
		{[]string{"-mode", "staleness,local", "-instances", "2", "-redis", "redis://127.0.0.1:1"}, "-mode staleness runs alone"},
		{[]string{"-mode", "staleness", "-instances", "2", "-redis", "redis://127.0.0.1:1", "-rounds", "-1"}, "-rounds must be"},
		{[]string{"-mode", "staleness", "-instances", "2", "-redis", "redis://127.0.0.1:1", "-staleness-timeout", "1ms"}, "-staleness-timeout must be"},
	} {
		var stderr bytes.Buffer
		if code := Main(context.Background(), c.args, io.Discard, &stderr, false); code != 1 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("Main(%q) = %d, %q; want 1 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// The mode end to end: productd built from this module, 2 processes on a
// private redis-server and one SQLite file, a few rounds. productd with
// -redis invalidates a PUT's product on every instance through the bus, so
// the watched instance serves the new price in every round, well before
// the timeout (the instances' TTL is 5m), and never goes back to the old
// one; the measurements are consistent with each other.
func TestStalenessModeShowsEveryInstanceConvergingAfterEveryWrite(t *testing.T) {
	srv := testenv.StartRedis(t)
	report := filepath.Join(t.TempDir(), "report.html")
	// A generous timeout: a slow convergence on a loaded machine under
	// -race is still one; a missing invalidation never converges.
	const rounds, timeout = 3, 10 * time.Second
	var stdout, stderr bytes.Buffer
	code := mainWith(context.Background(), Config{Catalog: &smallCatalog},
		[]string{"-instances", "2", "-redis", "redis://" + srv.Addr + "/0", "-mode", "staleness", "-rounds", fmt.Sprint(rounds),
			"-staleness-timeout", timeout.String(), "-json", "-report", report}, &stdout, &stderr, false)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var doc struct{ Staleness *StalenessResult }
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil || doc.Staleness == nil {
		t.Fatalf("stdout is not the JSON document: %v\n%s", err, stdout.Bytes())
	}
	r := doc.Staleness
	args := strings.Join(r.ProductdArgs, " ")
	if r.Instances != 2 || r.TimeoutMillis != ms(timeout) || r.CacheTTLMillis != ms(StalenessTTL) ||
		!strings.Contains(args, "-cache-ttl 5m0s") || !strings.Contains(args, "-redis redis://"+srv.Addr+"/0") || len(r.Warnings) != 0 {
		t.Fatalf("run %+v", r)
	}
	if len(r.Rounds) != rounds {
		t.Fatalf("%d rounds, want %d", len(r.Rounds), rounds)
	}
	var firstPrice int64
	for n, rd := range r.Rounds {
		// A fresh database: the seeded row is revision 0, each PUT commits
		// the next one, each at a price one cent above the previous.
		if rd.Round != n+1 || rd.Revision != int64(n+1) || rd.PutMillis <= 0 || len(rd.Instances) != 1 {
			t.Fatalf("round %d: %+v", n+1, rd)
		}
		if n == 0 {
			firstPrice = rd.PriceCents
		} else if rd.PriceCents != firstPrice+int64(n) {
			t.Fatalf("round %d: price %d, want %d", n+1, rd.PriceCents, firstPrice+int64(n))
		}
		c := rd.Instances[0]
		t.Logf("round %d: %+v", n+1, c)
		if c.Instance != 1 || !c.Converged || c.Errors != 0 || c.Regressions != 0 {
			t.Fatalf("round %d: %+v; want the new price within %v, no error, no regression", n+1, c, timeout)
		}
		if c.ConvergedMillis <= 0 || c.ConvergedMillis > ms(timeout) || c.LastStaleMillis >= c.ConvergedMillis ||
			(c.StalePolls == 0) != (c.LastStaleMillis == 0) || c.Polls < c.StalePolls+1 {
			t.Fatalf("round %d: inconsistent convergence %+v", n+1, c)
		}
	}
	s := r.Summary
	// The summary is the rounds' (compared as JSON: the percentiles are
	// pointers).
	got, _ := json.Marshal(summariseStaleness(r.Rounds))
	if want, _ := json.Marshal(s); !bytes.Equal(got, want) {
		t.Fatalf("summary %s does not match the rounds' %s", want, got)
	}
	if s.Samples != rounds || s.Converged != rounds || s.TimedOut != 0 || s.MaxMillis == nil || s.Regressions != 0 {
		t.Fatalf("summary %+v", s)
	}
	h, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(h, []byte("<svg")) || !bytes.Contains(h, []byte("-cache-ttl 5m0s")) ||
		regexp.MustCompile(`(?i)<script|\ssrc=|\shref=|@import|url\(`).Match(h) {
		t.Fatal("the report lacks the chart or the productd command line, or references external assets")
	}
}
