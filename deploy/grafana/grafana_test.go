package grafana_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/deploy/grafana"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/promflight"
	"github.com/flightcache/flightcache/singleflight"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// panel is the part of Grafana's panel model the checks need.
type panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row nests its panels
}

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

func load(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(grafana.Dashboard)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("flightcache.json is not valid JSON: %v", err)
	}
	if !json.Valid(grafana.Dashboard) {
		t.Fatal("flightcache.json has trailing data")
	}
	if d.Title == "" || d.UID == "" {
		t.Fatalf("dashboard has no title or uid: %q, %q", d.Title, d.UID)
	}
	return d
}

func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// queries returns every PromQL expression of the dashboard, templating
// included, keyed by where it appears.
func queries(d dashboard) map[string]string {
	q := map[string]string{}
	for _, p := range allPanels(d.Panels) {
		for i, tg := range p.Targets {
			q[fmt.Sprintf("panel %q target %d", p.Title, i)] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			q["variable "+v.Name] = v.Definition
		}
	}
	return q
}

var (
	strLit     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	matchers   = regexp.MustCompile(`\{[^}]*\}`)
	ranges     = regexp.MustCompile(`\[[^\]]*\]`)
	grouping   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	labelVals  = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,[^)]*\)`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	keywords   = map[string]bool{"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true}
)

// metricNames returns the metric names a PromQL expression selects: what is
// left once strings, label matchers, ranges and grouping clauses are gone,
// minus function calls and keywords.
func metricNames(expr string) []string {
	var names []string
	for _, m := range labelVals.FindAllStringSubmatch(expr, -1) {
		names = append(names, m[1])
	}
	expr = labelVals.ReplaceAllString(expr, " ")
	expr = strLit.ReplaceAllString(expr, `""`)
	expr = matchers.ReplaceAllString(expr, " ")
	expr = ranges.ReplaceAllString(expr, " ")
	expr = grouping.ReplaceAllString(expr, " ")
	for _, m := range identifier.FindAllStringSubmatch(expr, -1) {
		if m[1] != "" || keywords[strings.ToLower(m[0])] { // a function or aggregation call
			continue
		}
		names = append(names, m[0])
	}
	return names
}

func TestMetricNamesExtractsSelectors(t *testing.T) {
	for _, c := range []struct {
		expr string
		want []string
	}{
		{`sum by (operation) (rate(single_flight_requests_total{operation=~"$operation"}[$__rate_interval]))`, []string{"single_flight_requests_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m]))) / ignoring(x) b`, []string{"a_bucket", "b"}},
		{`1 - (x_total / y_total) > bool 0.5`, []string{"x_total", "y_total"}},
		{`label_values(single_flight_requests_total, operation)`, []string{"single_flight_requests_total"}},
		{`rate(singleflight_typo_total{a="by (b)"}[1m])`, []string{"singleflight_typo_total"}},
	} {
		if got := metricNames(c.expr); !slices.Equal(got, c.want) {
			t.Errorf("metricNames(%q) = %v, want %v", c.expr, got, c.want)
		}
	}
}

// registered drives a promflight adapter through a real Cache and engine
// and returns every series name a Prometheus query may select, histogram
// suffixes included.
func registered(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := promflight.New(reg, promflight.WithOperation("product"))
	if err != nil {
		t.Fatal(err)
	}
	local, err := memstore.New(memstore.Options[int]{})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	attached := make(chan struct{})
	var joined atomic.Int32
	const callers = 20
	c, err := flightcache.New(flightcache.Options[int]{Name: "product", Local: local, TTL: time.Minute, Observer: barrier{m, func(e singleflight.Event) {
		if e.Kind == singleflight.EventShared && joined.Add(1) == callers-1 {
			close(attached)
		}
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			if _, err := c.Get(context.Background(), "k", func(context.Context) (int, error) { <-release; return 1, nil }); err != nil {
				t.Error(err)
			}
		})
	}
	<-attached
	close(release)
	wg.Wait()
	if _, err := c.Get(context.Background(), "k", nil); err != nil {
		t.Fatal(err)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[mf.GetName()+s] = true
			}
		}
	}
	return names
}

type barrier struct {
	*promflight.Metrics
	hook func(singleflight.Event)
}

func (b barrier) ObserveFlight(e singleflight.Event) {
	b.Metrics.ObserveFlight(e)
	b.hook(e)
}

func TestEveryQueryNamesAnEmittedMetric(t *testing.T) {
	d := load(t)
	emitted := registered(t)
	used := map[string]bool{}
	qs := queries(d)
	where := make([]string, 0, len(qs))
	for w := range qs {
		where = append(where, w)
	}
	sort.Strings(where)
	for _, w := range where {
		names := metricNames(qs[w])
		if len(names) == 0 {
			t.Errorf("%s selects no metric: %s", w, qs[w])
		}
		for _, n := range names {
			used[n] = true
			if !emitted[n] {
				t.Errorf("%s uses %s, which promflight does not emit", w, n)
			}
		}
	}
	if len(used) < 10 {
		t.Errorf("the dashboard uses only %d metrics: %v", len(used), used)
	}
}

// Every signal an operator needs during a stampede or an outage has its
// panel, drawn from the metric that measures it.
func TestDashboardHasAPanelForEveryOperatorSignalOnItsMetric(t *testing.T) {
	d := load(t)
	titles := map[string]panel{}
	for _, p := range allPanels(d.Panels) {
		titles[p.Title] = p
	}
	for _, want := range []struct{ title, mustUse string }{
		{"Requests per origin call", "flightcache_origin_calls_total"},
		{"Requests per origin call", "single_flight_flights_started_total"},
		{"Origin suppression ratio", "single_flight_requests_total"},
		{"Requests, flights, origin calls", "single_flight_requests_total"},
		{"Requests, flights, origin calls", "single_flight_flights_started_total"},
		{"Requests, flights, origin calls", "flightcache_origin_calls_total"},
		{"Requests, flights, origin calls", "flightcache_throttled_total"},
		{"Requests, flights, origin calls", "flightcache_cluster_follower_wait_seconds_count"},
		{"In-flight keys", "single_flight_in_flight"},
		{"Waiter latency p50/p95/p99", "single_flight_waiter_duration_seconds_bucket"},
		{"Origin call latency p50/p95/p99", "flightcache_origin_call_duration_seconds_bucket"},
		{"Hit ratio per tier", "flightcache_hits_total"},
		{"Rejections", "single_flight_rejections_total"},
		{"Origin calls by result", "flightcache_origin_calls_total"},
		{"Flight failures", "single_flight_flights_failed_total"},
		{"Flight failures", "flightcache_throttled_total"},
		{"Get failure ratio", "flightcache_gets_total"},
		{"Stale served", "flightcache_stale_served_total"},
		{"Shared tier breaker state", "flightcache_shared_breaker_state"},
		{"Shared tier breaker transitions", "flightcache_shared_breaker_transitions_total"},
		{"Filtered Gets", "flightcache_filtered_total"},
		{"Cluster leases", "flightcache_cluster_leases_total"},
		{"Fenced writes rejected", "flightcache_cluster_fenced_writes_rejected_total"},
		{"Follower wait p50/p99", "flightcache_cluster_follower_wait_seconds_bucket"},
		{"Remote waits by result", "flightcache_cluster_follower_wait_seconds_count"},
		{"Coalescing scope", "flightcache_cluster_degraded"},
		{"Invalidations sent", "flightcache_invalidations_sent_total"},
		{"Invalidations received, applied, ignored", "flightcache_invalidations_received_total"},
		{"Invalidations received, applied, ignored", "flightcache_invalidations_applied_total"},
		{"Invalidations received, applied, ignored", "flightcache_invalidations_ignored_total"},
		{"Bus state", "flightcache_bus_state"},
		{"Bus disconnects", "flightcache_bus_disconnects_total"},
		{"Time since last invalidation received", "flightcache_invalidation_last_received_timestamp_seconds"},
	} {
		p, ok := titles[want.title]
		if !ok {
			t.Errorf("no panel %q", want.title)
			continue
		}
		found := false
		for _, tg := range p.Targets {
			found = found || slices.Contains(metricNames(tg.Expr), want.mustUse)
		}
		if !found {
			t.Errorf("panel %q does not query %s", want.title, want.mustUse)
		}
	}
	// A caller that left is no failure: the Get failure ratio leaves it
	// out of its denominator (and counts only load_failed above it).
	if gf := titles["Get failure ratio"].Targets; len(gf) != 1 || !strings.Contains(gf[0].Expr, `outcome="load_failed"`) || !strings.Contains(gf[0].Expr, `outcome!="caller_left"`) {
		t.Errorf("the Get failure ratio is not load_failed / Gets other than caller_left: %v", gf)
	}
	// The two ratios are the documented formulas, not their inverses.
	rpl := titles["Requests per origin call"].Targets[0].Expr
	if i, j := strings.Index(rpl, "single_flight_requests_total"), strings.Index(rpl, "flightcache_origin_calls_total"); i < 0 || j < i || !strings.Contains(rpl[i:j], "/") {
		t.Errorf("requests per origin call is not requests / origin calls: %s", rpl)
	}
	sup := titles["Origin suppression ratio"].Targets[0].Expr
	if !strings.HasPrefix(sup, "1 - (") || strings.Index(sup, "flightcache_origin_calls_total") > strings.Index(sup, "single_flight_requests_total") {
		t.Errorf("suppression ratio is not 1 - origin calls / requests: %s", sup)
	}
	// A ratio never shows NaN for an idle cache: its denominator is
	// filtered with > 0, so no traffic is no data, not 0/0
	// (deploy/prometheus/rules_test.yml shows the difference).
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			if strings.Contains(tg.Expr, " / ") && !strings.Contains(tg.Expr, " > 0)") {
				t.Errorf("panel %q divides by a denominator that can be 0 (NaN without traffic): %s", p.Title, tg.Expr)
			}
		}
	}
	// The silence is now minus the time of the last message, never the
	// gauge itself, and skips instances that never received one (0).
	for _, tg := range titles["Time since last invalidation received"].Targets {
		if !strings.Contains(tg.Expr, "time() - (flightcache_invalidation_last_received_timestamp_seconds") || !strings.Contains(tg.Expr, "> 0)") {
			t.Errorf("time since last invalidation is not time() - the timestamp of those that received one: %s", tg.Expr)
		}
	}
	for _, q := range []string{"Waiter latency p50/p95/p99", "Origin call latency p50/p95/p99"} {
		var got []string
		for _, tg := range titles[q].Targets {
			got = append(got, strings.SplitN(strings.TrimPrefix(tg.Expr, "histogram_quantile("), ",", 2)[0])
		}
		if !slices.Equal(got, []string{"0.5", "0.95", "0.99"}) {
			t.Errorf("%s quantiles = %v, want 0.5, 0.95, 0.99", q, got)
		}
	}
}

// TestDashboardQueriesParse has promtool parse every query of the
// dashboard: each becomes a recording rule (Grafana's $__rate_interval
// replaced by 5m, the $operation variable by .*) of a rules file that
// `promtool check rules` must accept. Without promtool the test is
// skipped, except under CI=true (apt-get install prometheus).
func TestDashboardQueriesParse(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not on PATH; under CI=true it must be (apt-get install prometheus): %v", err)
		}
		t.Skipf("promtool not on PATH (apt-get install prometheus): %v", err)
	}
	d := load(t)
	qs := queries(d)
	where := make([]string, 0, len(qs))
	for w := range qs {
		if !strings.HasPrefix(w, "variable ") { // label_values() is Grafana's, not PromQL
			where = append(where, w)
		}
	}
	sort.Strings(where)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	expand := strings.NewReplacer("$__rate_interval", "5m", "$operation", ".*")
	for i, w := range where {
		expr, err := json.Marshal(expand.Replace(qs[w])) // a JSON string is a YAML double-quoted scalar
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&rules, "      - record: dashboard:query_%d\n        expr: %s\n", i, expr)
	}
	file := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		for i, w := range where {
			t.Logf("query_%d: %s", i, w)
		}
		t.Fatalf("promtool check rules refused the dashboard's queries:\n%s", out)
	} else if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d rules found", len(where)); !strings.Contains(string(out), want) {
		t.Fatalf("promtool output does not say %q:\n%s", want, out)
	}
}
