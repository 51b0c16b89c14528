package main

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const sample = `goos: linux
goarch: amd64
BenchmarkCurveWaiters/waiters=10/impl=flightcache-2   	  100	  5000 ns/op	  50.0 ns/caller	  2.00 allocs/caller
BenchmarkCurveWaiters/waiters=10/impl=flightcache-2   	  100	  5000 ns/op	  70.0 ns/caller	  2.00 allocs/caller
BenchmarkCurveWaiters/waiters=10/impl=flightcache-2   	  100	  5000 ns/op	  60.0 ns/caller	  2.00 allocs/caller
BenchmarkCurveWaiters/waiters=1/impl=xsync-2          	  100	  5000 ns/op	  40.0 ns/caller	  1.00 allocs/caller
BenchmarkCurveWaiters/waiters=1/impl=flightcache-2    	  100	  5000 ns/op	  30.0 ns/caller	  1.00 allocs/caller
BenchmarkCurveWaiters/waiters=10/impl=xsync-2         	  100	  5000 ns/op	  90.0 ns/caller	  1.00 allocs/caller
BenchmarkHitLocal/impl=otter-raw-2                    	1000000	  20.0 ns/op	   0 B/op	   0 allocs/op
BenchmarkHitLocal/impl=flightcache-2                  	1000000	  40.0 ns/op	   0 B/op	   0 allocs/op
PASS
`

// The report takes each point's median over the runs, orders the series
// flightcache first and by x, and states each peer's ratio.
func TestCurvesAndTablesFromBenchmarkOutput(t *testing.T) {
	res := parse(strings.NewReader(sample))
	ss, err := curve(res, "BenchmarkCurveWaiters", "waiters", "ns/caller")
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 || ss[0].name != "flightcache" || ss[1].name != "xsync" {
		t.Fatalf("series %+v, want flightcache then xsync", ss)
	}
	if got := ss[0].points; len(got) != 2 || got[0] != (point{1, 30}) || got[1] != (point{10, 60}) {
		t.Fatalf("flightcache's points %v, want (1, 30) and the median (10, 60)", got)
	}
	var page bytes.Buffer
	writeCurveTable(&page, chart{file: "w.svg", title: "T", x: "waiters", yLabel: "ns per caller"}, ss, "", "")
	if !strings.Contains(page.String(), "| 10 | 60.0 | 90.0 (1.50×) |") {
		t.Fatalf("curve table lacks the ratio row:\n%s", page.String())
	}
	rows, err := impls(res, "BenchmarkHitLocal", []string{"ns/op", "allocs/op"})
	if err != nil {
		t.Fatal(err)
	}
	page.Reset()
	writeTable(&page, table{title: "Hit", bench: "BenchmarkHitLocal"}, rows)
	if !strings.Contains(page.String(), "| flightcache | 40.0 | 0.00 |") || !strings.Contains(page.String(), "| otter-raw | 20.0 (0.50×) |") {
		t.Fatalf("table:\n%s", page.String())
	}
	if _, err := curve(res, "BenchmarkCurveWaiters", "waiters", "B/key"); err == nil {
		t.Fatal("a metric the benchmark does not report gave no error")
	}
	if _, err := curve(res, "BenchmarkCurveKeysInFlight", "keys", "ns/caller"); err == nil {
		t.Fatal("a benchmark that did not run gave no error")
	}
}

// The chart is well-formed SVG with a line and a legend entry per series.
func TestChartIsWellFormedSVG(t *testing.T) {
	ss := []series{
		{"flightcache", []point{{1, 30}, {10, 60}, {100, 65}}},
		{"xsync", []point{{1, 40}, {10, 90}, {100, 5000}}},
	}
	svg := renderSVG("T & <t>", "waiters", "ns", ss)
	dec := xml.NewDecoder(bytes.NewReader(svg))
	lines, texts := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("not well-formed: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "polyline":
				lines++
			case "text":
				texts++
			}
		}
	}
	if lines != 2 || texts < 2+3+2 {
		t.Fatalf("%d polylines and %d texts, want 2 and at least 7 (title, 3 x ticks, legend)", lines, texts)
	}
	if !bytes.Contains(svg, []byte("log scale</text>")) {
		t.Fatal("values over a factor of 50 apart are not on a log y axis")
	}
}

const refSample = `BenchmarkCurveProductd/connections=1/impl=productd-2   	10	 150676147 ns/op	 0.30 p99-ms	 12000 req/s
BenchmarkCurveProductd/connections=1/impl=bare-2       	10	 140181899 ns/op	 0.25 p99-ms	 16000 req/s
BenchmarkCurveProductd/connections=8/impl=bare-2       	10	 140181899 ns/op	 4.00 p99-ms	 20000 req/s
BenchmarkCurveProductd/connections=8/impl=productd-2   	10	 150676147 ns/op	 5.00 p99-ms	 15000 req/s
`

// A suite with a reference (a floor or a ceiling where no peer exists)
// lists it last and states every other column's ratio to it.
func TestRatiosAreToTheReferenceSeries(t *testing.T) {
	res := parse(strings.NewReader(refSample))
	ss, err := curve(res, "BenchmarkCurveProductd", "connections", "req/s")
	if err != nil {
		t.Fatal(err)
	}
	if ss, err = refLast(ss, "bare"); err != nil {
		t.Fatal(err)
	}
	if len(ss) != 2 || ss[0].name != "productd" || ss[1].name != "bare" {
		t.Fatalf("series %+v, want productd then bare", ss)
	}
	var page bytes.Buffer
	writeCurveTable(&page, chart{file: "r.svg", title: "T", x: "connections", yLabel: "requests per second"}, ss, "bare", "the ceiling")
	for _, want := range []string{
		"| connections | productd | bare |",
		"| 1 | 12,000 (0.75×) | 16,000 |",
		"| 8 | 15,000 (0.75×) | 20,000 |",
		"ratio is its figure over bare's, the ceiling.",
	} {
		if !strings.Contains(page.String(), want) {
			t.Fatalf("table lacks %q:\n%s", want, page.String())
		}
	}
	if _, err := refLast(ss, "floor"); err == nil {
		t.Fatal("a reference series that did not run gave no error")
	}
}

// Fractions keep three significant digits: a wake-up of 0.0319 ms is not
// printed as 0.03.
func TestFormatNumKeepsThreeDigitsOfFractions(t *testing.T) {
	for v, want := range map[float64]string{0.03186: "0.0319", 0.2682: "0.268", 0: "0.00", 2.821: "2.82", 16.32: "16.3", 11981: "11,981"} {
		if got := formatNum(v); got != want {
			t.Errorf("formatNum(%v) = %s, want %s", v, got, want)
		}
	}
}

// Every chart and table names a benchmark that its suite's -bench selects
// and that its package defines: a renamed benchmark fails here rather
// than in the full report.
func TestSuitesNameBenchmarksThatExist(t *testing.T) {
	for _, s := range suites {
		re := regexp.MustCompile(s.bench)
		dir := filepath.Join("..", "..", filepath.FromSlash(s.pkg))
		files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no test files (%v)", s.pkg, err)
		}
		var src strings.Builder
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
		var names []string
		for _, c := range s.charts {
			names = append(names, c.bench)
		}
		for _, tb := range s.tables {
			names = append(names, tb.bench)
		}
		for _, name := range names {
			if !re.MatchString(name) {
				t.Errorf("%s: -bench %s does not select %s", s.pkg, s.bench, name)
			}
			if !strings.Contains(src.String(), "func "+name+"(b *testing.B)") {
				t.Errorf("%s defines no %s", s.pkg, name)
			}
		}
	}
}

func TestTickLabelsShareTheirDecimalsOnALinearAxis(t *testing.T) {
	for _, c := range []struct {
		ticks []float64
		logY  bool
		want  []string
	}{
		{[]float64{0, 4, 8, 12, 16, 20}, false, []string{"0", "4", "8", "12", "16", "20"}},
		{[]float64{0, 4000, 8000}, false, []string{"0", "4,000", "8,000"}},
		{[]float64{0, 0.5, 1, 1.5}, false, []string{"0.0", "0.5", "1.0", "1.5"}},
		{[]float64{0, 0.02, 0.04}, false, []string{"0.00", "0.02", "0.04"}},
		{[]float64{0.01, 0.1, 1, 10, 1000}, true, []string{"0.01", "0.1", "1", "10", "1,000"}},
	} {
		var got []string
		for _, v := range c.ticks {
			got = append(got, tickLabel(v, c.ticks, c.logY))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("ticks %v (log %v) = %q, want %q", c.ticks, c.logY, got, c.want)
		}
	}
}

// The page names the command that wrote it: a quick run is not the full
// report, and -count is stated when it is not the default.
func TestHeaderNamesTheCommandThatRan(t *testing.T) {
	for _, c := range []struct {
		count int
		quick bool
		only  string
		want  string
	}{
		{3, false, "", "Written by `go run ./bench/perfreport` (`make perf-report`)"},
		{5, false, "", "Written by `go run ./bench/perfreport -count 5` (`make perf-report`)"},
		{1, true, "", "Written by `go run ./bench/perfreport -quick` (`make perf-report-quick`)"},
		{3, false, "Autobatch", "Written by `go run ./bench/perfreport -only 'Autobatch'` on "},
	} {
		if got := header(c.count, c.quick, c.only); !strings.Contains(got, c.want) {
			t.Errorf("header(%d, %v, %q) = %q, want it to contain %q", c.count, c.quick, c.only, got, c.want)
		}
	}
}

// A quick run's temporary directory is removed: the last line does not
// name it; a kept report's line does.
func TestDoneLineNamesOnlyADirectoryThatStays(t *testing.T) {
	dir := "/tmp/perfreport-123"
	if got := doneLine(dir, true, time.Minute); strings.Contains(got, dir) {
		t.Errorf("doneLine(removed) = %q names the removed directory", got)
	}
	if got := doneLine(dir, false, time.Minute); !strings.Contains(got, dir) {
		t.Errorf("doneLine(kept) = %q does not say where the report is", got)
	}
}

// -only keeps the suites whose -bench matches, in their order, and a
// pattern that selects none is an error rather than an empty report.
func TestOnlySelectsSuitesByBenchmark(t *testing.T) {
	all, err := selectSuites(suites, "")
	if err != nil || len(all) != len(suites) {
		t.Fatalf("no -only: %d suites, %v; want all %d", len(all), err, len(suites))
	}
	got, err := selectSuites(suites, "Autobatch")
	if err != nil || len(got) != 1 || got[0].bench != "^BenchmarkAutobatch$" {
		t.Fatalf("-only Autobatch = %+v, %v; want the automatic batching suite alone", got, err)
	}
	if _, err := selectSuites(suites, "NoSuchBenchmark"); err == nil {
		t.Fatal("-only that selects no suite gave no error")
	}
	if _, err := selectSuites(suites, "("); err == nil {
		t.Fatal("a bad -only pattern gave no error")
	}
}

// A long legend entry widens the image instead of running off its edge;
// short ones keep the usual width.
func TestLongLegendWidensTheChart(t *testing.T) {
	short := renderSVG("T", "callers", "loads", []series{{"flightcache", []point{{1, 1}, {8, 2}}}})
	if !bytes.Contains(short, []byte(`width="720"`)) {
		t.Fatalf("short names: the chart is not 720 wide:\n%.200s", short)
	}
	long := renderSVG("T", "callers", "loads", []series{{"flightcache-Batcher-MaxKeys1024-InFlight1", []point{{1, 1}, {8, 2}}}})
	if bytes.Contains(long, []byte(`width="720"`)) {
		t.Fatalf("a 41-character legend entry left the chart 720 wide:\n%.200s", long)
	}
}
