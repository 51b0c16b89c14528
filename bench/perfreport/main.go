// Command perfreport runs the scaling benchmarks side by side with the
// peers on the machine it runs on, and writes what they measured: an SVG
// chart per curve and a Markdown page of tables (absolute figures and
// ratios to flightcache), with the machine and the command stated.
//
//	go run ./bench/perfreport                      # docs/perf, about 7 minutes on 2 cores
//	go run ./bench/perfreport -quick               # every benchmark once, into a temporary directory: checks that it runs
//	go run ./bench/perfreport -count 5 -out /tmp/perf
//	go run ./bench/perfreport -only Autobatch -out /tmp/perf  # the suites whose -bench matches, alone
//
// The curves (bench/singleflight's BenchmarkCurve*, the hit paths and
// instances of package bench, redislease's BenchmarkCurveFollower*,
// cmd/internal/productd's BenchmarkCurveProductd, httpflight's
// BenchmarkCurveHit and BenchmarkCurveHerd, and grpcflight's BenchmarkUnary):
//   - engine ns and allocations per caller against waiters per key (1 to
//     100,000), against golang.org/x/sync/singleflight and
//     resenje.org/singleflight;
//   - ns per call and memory per key against distinct keys in flight (1 to
//     1,000,000), against the same;
//   - origin queries per expiry against instances (1 to 16) sharing one
//     Redis, local against cluster mode (package bench, needs Redis);
//   - hit-path ns/op and allocations per tier, against otter, sturdyc and
//     go-redis/cache (needs Redis at 127.0.0.1:6379 for the Redis tier);
//   - follower wake-up p50 and p99 in cluster mode, from the leader's
//     complete script returning to each waiting Get returning, against
//     follower instances (1 to 16, a caller each) and against waiters per
//     instance (1 to 1,000, 2 instances), with the ratio to the loopback
//     floor (a PUBLISH heard, one GET, the same goroutines woken; needs
//     Redis): no peer library coalesces across instances;
//   - productd's warm-hit requests per second and p99 against keep-alive
//     connections (1, 8, 50), with the ratio to the ceiling, a bare
//     net/http handler writing the same bytes;
//   - httpflight's hit requests per second and p99 against keep-alive
//     connections (1, 8, 50), with the ratio to a bare net/http handler
//     writing the same bytes (httpflight's BenchmarkCurveHit);
//   - httpflight's upstream requests per herd and p99 against herd size
//     (10 to 10,000 concurrent requests for a cold URL, in process;
//     BenchmarkCurveHerd);
//   - automatic batching: loads per second, origin calls per second and a
//     load's p99 against concurrent callers (1 to 1,024), flightcache's
//     Batcher against graph-gophers/dataloader v7, vikstrous/dataloadgen
//     and sturdyc (package bench's BenchmarkAutobatch);
//   - grpcflight's hit through the server interceptor against a bare unary
//     call over loopback (grpcflight's BenchmarkUnary, a table).
//
// Each point is the median of -count runs. PERFREPORT_QUICK, set by
// -quick, makes the benchmarks skip their largest points.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A suite is one go test invocation and what is made of its results.
type suite struct {
	pkg   string // relative to the repository's root
	bench string // -bench
	// benchtime of the full run; the quick run uses 1x.
	benchtime string
	charts    []chart
	tables    []table
	// ref, when set, names the series of the suite's charts that the
	// ratios are to, instead of flightcache's: the floor or the ceiling of
	// a curve no peer library has. It is drawn and listed last; refNote
	// says what it is.
	ref, refNote string
}

// A chart plots one metric of one benchmark's sub-benchmarks named
// "<x name>=<x>/impl=<series>", against x on a log scale.
type chart struct {
	file, title, bench, x, metric, yLabel string
}

// A table lists metrics of one benchmark's sub-benchmarks named
// "impl=<row>", by row.
type table struct {
	title, bench string
	metrics      []string
}

var suites = []suite{
	{
		pkg: "./bench/singleflight", bench: "^BenchmarkCurve", benchtime: "1s",
		charts: []chart{
			{"waiters-ns.svg", "Engine: ns per caller against waiters on one key", "BenchmarkCurveWaiters", "waiters", "ns/caller", "ns per caller"},
			{"waiters-allocs.svg", "Engine: allocations per caller against waiters on one key", "BenchmarkCurveWaiters", "waiters", "allocs/caller", "allocations per caller"},
			{"keys-ns.svg", "Engine: ns per call against distinct keys in flight", "BenchmarkCurveKeysInFlight", "keys", "ns/caller", "ns per call"},
			{"keys-bytes.svg", "Engine: bytes allocated per key in flight", "BenchmarkCurveKeysInFlight", "keys", "B/key", "bytes per key"},
		},
	},
	{
		pkg: "./bench", bench: "^(BenchmarkHitLocal|BenchmarkHitRedis|BenchmarkCurveInstances)$", benchtime: "1s",
		charts: []chart{
			{"instances-origin.svg", "Origin queries per expiry against instances", "BenchmarkCurveInstances", "instances", "origin-calls/op", "origin queries per expiry"},
		},
		tables: []table{
			{"Hit path, in-process tier", "BenchmarkHitLocal", []string{"ns/op", "allocs/op"}},
			{"Hit path, Redis tier (loopback)", "BenchmarkHitRedis", []string{"ns/op", "allocs/op"}},
		},
	},
	{
		// 100 keys per point: at one waiting caller, p99 is the second
		// slowest of 100.
		pkg: "./redislease", bench: "^BenchmarkCurveFollower(Instances|Waiters)$", benchtime: "100x",
		charts: []chart{
			{"follower-instances-p50.svg", "Follower wake-up p50 against follower instances", "BenchmarkCurveFollowerInstances", "instances", "p50-ms", "p50 ms, complete returned to Get returned"},
			{"follower-instances-p99.svg", "Follower wake-up p99 against follower instances", "BenchmarkCurveFollowerInstances", "instances", "p99-ms", "p99 ms, complete returned to Get returned"},
			{"follower-waiters-p50.svg", "Follower wake-up p50 against waiters per instance (2 follower instances)", "BenchmarkCurveFollowerWaiters", "waiters", "p50-ms", "p50 ms, complete returned to Get returned"},
			{"follower-waiters-p99.svg", "Follower wake-up p99 against waiters per instance (2 follower instances)", "BenchmarkCurveFollowerWaiters", "waiters", "p99-ms", "p99 ms, complete returned to Get returned"},
		},
		ref:     "floor",
		refNote: "the loopback floor on the same Redis: a PUBLISH heard by one subscription connection per instance, one GET, the same number of goroutines woken",
	},
	{
		pkg: "./cmd/internal/productd", bench: "^BenchmarkCurveProductd$", benchtime: "10x",
		charts: []chart{
			{"productd-rps.svg", "productd: warm-hit requests per second against connections", "BenchmarkCurveProductd", "connections", "req/s", "requests per second"},
			{"productd-p99.svg", "productd: warm-hit p99 latency against connections", "BenchmarkCurveProductd", "connections", "p99-ms", "p99 ms"},
		},
		ref:     "bare",
		refNote: "the ceiling: a bare net/http handler writing the same headers and body bytes, driven by the same load generator",
	},
	{
		pkg: "./httpflight", bench: "^BenchmarkCurveHit$", benchtime: "10x",
		charts: []chart{
			{"httpflight-hit-rps.svg", "httpflight: hit requests per second against connections", "BenchmarkCurveHit", "connections", "req/s", "requests per second"},
			{"httpflight-hit-p99.svg", "httpflight: hit p99 latency against connections", "BenchmarkCurveHit", "connections", "p99-ms", "p99 ms"},
		},
		ref:     "bare",
		refNote: "the ceiling: a bare net/http handler writing the bytes of the middleware's hit (its headers, Age and Cache-Status included, and body), driven by the same load generator",
	},
	{
		pkg: "./httpflight", bench: "^BenchmarkCurveHerd$", benchtime: "5x",
		charts: []chart{
			{"httpflight-herd-upstream.svg", "httpflight: upstream requests per herd against herd size", "BenchmarkCurveHerd", "herd", "upstream-req/herd", "upstream requests per herd"},
			{"httpflight-herd-p99.svg", "httpflight: a herd's p99 latency against herd size (upstream 5 ms)", "BenchmarkCurveHerd", "herd", "p99-ms", "p99 ms"},
		},
	},
	{
		// One curve per implementation, flightcache's Batcher beside the
		// dataloaders and sturdyc; an origin of 1 ms + 20 µs per key.
		pkg: "./bench", bench: "^BenchmarkAutobatch$", benchtime: "1s",
		charts: []chart{
			{"autobatch-loads.svg", "Automatic batching: loads per second against concurrent callers", "BenchmarkAutobatch", "callers", "loads/s", "loads per second"},
			{"autobatch-calls.svg", "Automatic batching: origin calls per second against concurrent callers", "BenchmarkAutobatch", "callers", "calls/s", "origin calls per second"},
			{"autobatch-p99.svg", "Automatic batching: a load's p99 latency against concurrent callers", "BenchmarkAutobatch", "callers", "p99-µs", "p99 µs"},
		},
	},
	{
		pkg: "./grpcflight", bench: "^BenchmarkUnary$", benchtime: "2s",
		tables: []table{
			{"grpcflight: a unary call over loopback, bare and a hit through the server interceptor", "BenchmarkUnary", []string{"ns/op", "allocs/op"}},
		},
	},
}

func main() {
	fs := flag.NewFlagSet("perfreport", flag.ExitOnError)
	out := fs.String("out", "docs/perf", "the directory the charts and README.md are written to (-quick: a temporary one unless set)")
	count := fs.Int("count", 3, "runs of each benchmark; each point is their median")
	quick := fs.Bool("quick", false, "run every benchmark once (-benchtime 1x -count 1) and the curves' smaller points only, to check that the report runs")
	only := fs.String("only", "", "run only the suites whose -bench matches this regular expression; the page then holds their sections alone")
	_ = fs.Parse(os.Args[1:])
	outSet := false
	fs.Visit(func(f *flag.Flag) { outSet = outSet || f.Name == "out" })

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	temporary := false
	if *quick {
		*count = 1
		if !outSet {
			dir, err := os.MkdirTemp("", "perfreport-")
			if err != nil {
				fail(err)
			}
			*out, temporary = dir, true
		}
	}
	selected, err := selectSuites(suites, *only)
	if err != nil {
		fail(err)
	}
	start := time.Now()
	err = run(ctx, selected, *out, *count, *quick, *only, os.Stderr)
	if temporary {
		os.RemoveAll(*out)
	}
	if err != nil {
		fail(err)
	}
	fmt.Fprintln(os.Stderr, doneLine(*out, temporary, time.Since(start)))
}

// doneLine is the last line of a successful run: where the report is, or,
// when it went to a temporary directory that is now removed (-quick
// without -out), that the report ran, without naming a directory that no
// longer exists.
func doneLine(out string, removed bool, took time.Duration) string {
	took = took.Round(time.Second)
	if removed {
		return fmt.Sprintf("perfreport: the report ran in %v (a check: its output was not kept; set -out to keep it)", took)
	}
	return fmt.Sprintf("perfreport: wrote %s in %v", out, took)
}

// header is the report page's first lines up to the machine: the command
// that wrote it, as it was run (with -only, a part of the report that no
// make target writes alone).
func header(count int, quick bool, only string) string {
	cmdline, target := "go run ./bench/perfreport", "make perf-report"
	switch {
	case quick:
		cmdline, target = cmdline+" -quick", "make perf-report-quick"
	case count != 3:
		cmdline += " -count " + strconv.Itoa(count)
	}
	if only != "" {
		cmdline += " -only '" + only + "'"
		return fmt.Sprintf("# Scaling curves\n\nWritten by `%s` on %s, from real runs on that machine",
			cmdline, time.Now().UTC().Format("2006-01-02"))
	}
	return fmt.Sprintf("# Scaling curves\n\nWritten by `%s` (`%s`) on %s, from real runs on that machine",
		cmdline, target, time.Now().UTC().Format("2006-01-02"))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "perfreport:", err)
	os.Exit(1)
}

// selectSuites returns the suites of all whose -bench matches the regular
// expression only; every suite when only is empty.
func selectSuites(all []suite, only string) ([]suite, error) {
	if only == "" {
		return all, nil
	}
	re, err := regexp.Compile(only)
	if err != nil {
		return nil, fmt.Errorf("-only: %w", err)
	}
	var out []suite
	for _, s := range all {
		if re.MatchString(s.bench) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-only %s selects no suite", only)
	}
	return out, nil
}

// run runs the suites ss and writes the report into out.
func run(ctx context.Context, ss []suite, out string, count int, quick bool, only string, progress io.Writer) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	start := time.Now()
	var page bytes.Buffer
	fmt.Fprintf(&page, "%s: %s.\n"+
		"Each point is the median of %d runs; every implementation ran in the same run as the others.\n\n",
		header(count, quick, only), machine(), count)
	for _, s := range ss {
		benchtime := s.benchtime
		if quick {
			benchtime = "1x"
		}
		args := []string{"test", "-vet=off", "-run", "^$", "-bench", s.bench, "-benchmem", "-benchtime", benchtime, "-count", strconv.Itoa(count), s.pkg}
		fmt.Fprintf(progress, "go %s\n", strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, "go", args...)
		if quick {
			cmd.Env = append(os.Environ(), "PERFREPORT_QUICK=1")
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go %s: %w\n%s%s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
		}
		results := parse(&stdout)
		for _, c := range s.charts {
			series, err := curve(results, c.bench, c.x, c.metric)
			if err == nil && s.ref != "" {
				series, err = refLast(series, s.ref)
			}
			if err != nil {
				return err
			}
			svg := renderSVG(c.title, c.x, c.yLabel, series)
			if err := os.WriteFile(filepath.Join(out, c.file), svg, 0o644); err != nil {
				return err
			}
			writeCurveTable(&page, c, series, s.ref, s.refNote)
		}
		for _, t := range s.tables {
			rows, err := impls(results, t.bench, t.metrics)
			if err != nil {
				return err
			}
			writeTable(&page, t, rows)
		}
	}
	fmt.Fprintf(&page, "The whole report took %v.\n", time.Since(start).Round(time.Second))
	if err := os.WriteFile(filepath.Join(out, "README.md"), page.Bytes(), 0o644); err != nil {
		return err
	}
	return nil
}

// machine describes the machine: CPU model, cores, OS, Go.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores (GOMAXPROCS %d), %s/%s, %s", model, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// results maps a benchmark's full name (without the -N suffix) to each
// metric's values over the runs.
type results map[string]map[string][]float64

// parse reads go test -bench output.
func parse(r io.Reader) results {
	res := results{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			if res[name] == nil {
				res[name] = map[string][]float64{}
			}
			res[name][f[i+1]] = append(res[name][f[i+1]], v)
		}
	}
	return res
}

func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// point is one x and its median.
type point struct{ x, y float64 }

// series is one implementation's curve.
type series struct {
	name   string
	points []point
}

// curve collects metric of bench's sub-benchmarks "<xName>=<x>/impl=<name>"
// into one series per implementation, flightcache first, by x.
func curve(res results, bench, xName, metric string) ([]series, error) {
	by := map[string][]point{}
	for name, metrics := range res {
		rest, ok := strings.CutPrefix(name, bench+"/"+xName+"=")
		if !ok {
			continue
		}
		xs, impl, ok := strings.Cut(rest, "/impl=")
		x, err := strconv.ParseFloat(xs, 64)
		if !ok || err != nil {
			continue
		}
		vs, ok := metrics[metric]
		if !ok {
			return nil, fmt.Errorf("%s reports no %s", name, metric)
		}
		by[impl] = append(by[impl], point{x, median(vs)})
	}
	if len(by) == 0 {
		return nil, fmt.Errorf("no results of %s", bench)
	}
	var out []series
	for impl, ps := range by {
		slices.SortFunc(ps, func(a, b point) int { return cmpFloat(a.x, b.x) })
		out = append(out, series{impl, ps})
	}
	sortImpls(out, func(s series) string { return s.name })
	for _, s := range out[1:] {
		if len(s.points) != len(out[0].points) {
			return nil, fmt.Errorf("%s: %s has %d points, %s %d", bench, s.name, len(s.points), out[0].name, len(out[0].points))
		}
	}
	return out, nil
}

// refLast moves the series named ref to the end of ss: the ratios are
// then to it.
func refLast(ss []series, ref string) ([]series, error) {
	i := slices.IndexFunc(ss, func(s series) bool { return s.name == ref })
	if i < 0 {
		return nil, fmt.Errorf("no series %s, the ratios' reference", ref)
	}
	r := ss[i]
	return append(slices.Delete(slices.Clone(ss), i, i+1), r), nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sortImpls orders by name, flightcache's implementations first.
func sortImpls[T any](s []T, name func(T) string) {
	slices.SortFunc(s, func(a, b T) int {
		fa, fb := strings.HasPrefix(name(a), "flightcache"), strings.HasPrefix(name(b), "flightcache")
		if fa != fb {
			if fa {
				return -1
			}
			return 1
		}
		return strings.Compare(name(a), name(b))
	})
}

// row is one implementation's medians, in a table's metric order.
type row struct {
	name   string
	values []float64
}

// impls collects bench's sub-benchmarks "impl=<name>".
func impls(res results, bench string, metrics []string) ([]row, error) {
	var rows []row
	for name, ms := range res {
		impl, ok := strings.CutPrefix(name, bench+"/impl=")
		if !ok {
			continue
		}
		r := row{name: impl}
		for _, m := range metrics {
			vs, ok := ms[m]
			if !ok {
				return nil, fmt.Errorf("%s reports no %s", name, m)
			}
			r.values = append(r.values, median(vs))
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return nil, errors.New("no results of " + bench)
	}
	sortImpls(rows, func(r row) string { return r.name })
	return rows, nil
}

// writeCurveTable writes a chart's figures: one row per x, a column per
// implementation, the peers with their ratio to flightcache's; with ref
// set (the last series, see refLast), every other column with its ratio
// to ref's, which refNote describes.
func writeCurveTable(w io.Writer, c chart, ss []series, ref, refNote string) {
	base := 0
	if ref != "" {
		base = len(ss) - 1
	}
	fmt.Fprintf(w, "## %s\n\n![%s](%s)\n\n| %s |", c.title, c.title, c.file, c.x)
	for _, s := range ss {
		fmt.Fprintf(w, " %s |", s.name)
	}
	fmt.Fprint(w, "\n|---:|")
	for range ss {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for i, p := range ss[base].points {
		fmt.Fprintf(w, "| %s |", formatCount(p.x))
		for j, s := range ss {
			v := s.points[i].y
			if j == base || p.y == 0 {
				fmt.Fprintf(w, " %s |", formatNum(v))
				continue
			}
			fmt.Fprintf(w, " %s (%.2f×) |", formatNum(v), v/p.y)
		}
		fmt.Fprintln(w)
	}
	if ref != "" {
		fmt.Fprintf(w, "\n%s; each other column's ratio is its figure over %s's, %s.\n\n", c.yLabel, ref, refNote)
		return
	}
	verdict := "above 1: " + ss[0].name + " costs less"
	if strings.HasSuffix(c.metric, "/s") { // a rate: more is better
		verdict = "below 1: " + ss[0].name + " does more"
	}
	fmt.Fprintf(w, "\n%s; each other column's ratio is its figure over %s's (%s).\n\n", c.yLabel, ss[0].name, verdict)
}

// writeTable writes a table's rows with each peer's ratio to the first
// flightcache row's.
func writeTable(w io.Writer, t table, rows []row) {
	fmt.Fprintf(w, "## %s\n\n| implementation |", t.title)
	for _, m := range t.metrics {
		fmt.Fprintf(w, " %s |", m)
	}
	fmt.Fprint(w, "\n|---|")
	for range t.metrics {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		fmt.Fprintf(w, "| %s |", r.name)
		for i, v := range r.values {
			if base := rows[0].values[i]; r.name != rows[0].name && base != 0 {
				fmt.Fprintf(w, " %s (%.2f×) |", formatNum(v), v/base)
			} else {
				fmt.Fprintf(w, " %s |", formatNum(v))
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\n`%s`; ratios are to %s's.\n\n", t.bench, rows[0].name)
}

// formatCount prints a whole number with thousands separators.
func formatCount(v float64) string {
	if v == math.Trunc(v) && v >= 1 {
		return groupDigits(strconv.FormatFloat(v, 'f', 0, 64))
	}
	return formatNum(v)
}

// groupDigits puts a comma between groups of three digits.
func groupDigits(s string) string {
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// formatNum prints v with three significant digits (whole numbers from
// 100 up) and thousands separators for large values; 0 is 0.00.
func formatNum(v float64) string {
	switch {
	case v >= 1000:
		return groupDigits(strconv.FormatFloat(v, 'f', 0, 64))
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v > 0 && v < 1:
		// 0.0319, not 0.03: a fraction of a millisecond keeps its digits.
		return strconv.FormatFloat(v, 'f', 2-int(math.Floor(math.Log10(v))), 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
