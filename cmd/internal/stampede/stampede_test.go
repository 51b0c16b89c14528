package stampede

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/cmd/internal/productd"
	"github.com/flightcache/flightcache/cmd/internal/testleak"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
)

func TestMain(m *testing.M) { testleak.Main(m, nil) }

// targetWriteToken is the write token of the productd targets the tests
// start themselves.
const targetWriteToken = "stampede-test-write-token-0123456789"

// smallCatalog seeds fast under -race and holds the default hot product
// (acme/p-00042) and the one TestStampedeTableAgainstARunningTarget uses.
var smallCatalog = product.Catalog{
	Tenants:           []string{"acme", "globex"},
	ProductsPerTenant: 100,
	Locales:           []string{"en-US", "fr-FR"},
	Currencies:        []string{"USD", "EUR"},
}

func decode(t *testing.T, out []byte) map[string]Result {
	t.Helper()
	var doc struct{ Results []Result }
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("stdout is not the JSON document: %v\n%s", err, out)
	}
	m := map[string]Result{}
	for _, r := range doc.Results {
		m[r.Mode] = r
	}
	return m
}

// The demo's claim, checked end to end through the command's own entry
// point: after the hot entry expires, flightcache sends one query to the
// origin where naive cache-aside sends many.
func TestStampedeJSONShowsOneOriginQueryForFlightcacheAndManyForNaive(t *testing.T) {
	// A 5s TTL (the demo uses 1s): under -race on a 2-core machine that
	// runs a second test suite, serving the herd has taken over 2s, and an
	// entry that expired again mid-herd would rightly cost a second origin
	// query. The continuous traffic outlasts the TTL so that early refresh
	// must happen.
	report := filepath.Join(t.TempDir(), "report.html")
	var stdout, stderr bytes.Buffer
	code := mainWith(context.Background(), Config{Catalog: &smallCatalog}, []string{"-json", "-n", "300", "-duration", "6s", "-ttl", "5s", "-report", report}, &stdout, &stderr, false)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	res := decode(t, stdout.Bytes())
	naive, fc, early := res[ModeNaive], res[ModeFlightcache], res[ModeEarlyRefresh]
	if fc.Requests != 300 || fc.OriginQueries != 1 || fc.Errors != 0 {
		t.Fatalf("flightcache: %d requests, %d origin queries, %d errors; want 300, 1, 0", fc.Requests, fc.OriginQueries, fc.Errors)
	}
	// On an overloaded machine the naive herd may arrive spread out and
	// not stampede; the demo must then say so rather than show a
	// misleading comparison.
	if naive.Requests != 300 || naive.Errors != 0 || (naive.OriginQueries < 10*fc.OriginQueries && len(naive.Warnings) == 0) {
		t.Fatalf("naive: %d requests, %d origin queries, %d errors, warnings %q; want 300, at least 10 queries or a warning, 0",
			naive.Requests, naive.OriginQueries, naive.Errors, naive.Warnings)
	}
	if early.Requests == 0 || early.Errors != 0 || early.OriginQueries < 1 {
		t.Fatalf("early-refresh: %d requests, %d origin queries, %d errors; want traffic that refreshed the entry without errors", early.Requests, early.OriginQueries, early.Errors)
	}
	if fc.Suppression < 0.99 || fc.RequestsPerLoader != 300 {
		t.Fatalf("flightcache suppression %v, requests/loader %v", fc.Suppression, fc.RequestsPerLoader)
	}
	if !strings.Contains(stderr.String(), "report: "+report) {
		t.Fatalf("the report path is not printed on stderr with -json: %q", stderr.String())
	}
	// The run says what it does at each phase (on stderr, stdout stays
	// JSON), so that a first run is never silent.
	for _, phase := range []string{
		"stampede: mode naive: starting productd in-process",
		"stampede: mode flightcache: loading the hot product and waiting for its entry to expire",
		"stampede: mode flightcache: firing a herd of 300 requests",
		"stampede: mode early-refresh: continuous traffic",
	} {
		if !strings.Contains(stderr.String(), phase) {
			t.Errorf("stderr does not say %q: %q", phase, stderr.String())
		}
	}
	html, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(html), "<svg") < 4 {
		t.Fatalf("the report has %d charts, want a timeline per mode and a latency chart", strings.Count(string(html), "<svg"))
	}
	// Self-contained: no script, no external reference (the only URL is the SVG namespace).
	if regexp.MustCompile(`(?i)<script|\ssrc=|\shref=|@import|url\(`).Match(html) {
		t.Fatal("the report references external assets or scripts")
	}
}

func TestStampedeTableAgainstARunningTarget(t *testing.T) {
	cfg := productd.Default()
	cfg.DB = filepath.Join(t.TempDir(), "p.db")
	cfg.Catalog = &smallCatalog
	cfg.OriginLatency = 100e6 // 100ms
	cfg.WriteToken = targetWriteToken
	t.Setenv(WriteTokenEnv, targetWriteToken) // Main sends it with its PUTs
	srv, err := productd.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()

	// The TTL (5m) is longer than stampede waits, so it invalidates the
	// entry with a PUT of the same values to another variant of the
	// product: still exactly one origin query.
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"-target", "http://" + ln.Addr().String() + "/", "-mode", "flightcache",
		"-n", "200", "-key", "globex/p-00099?locale=fr-FR&currency=EUR", "-report", ""}, &stdout, &stderr, false)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	table, legend, _ := strings.Cut(stdout.String(), "\n\n")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "origin queries") || !strings.Contains(legend, "requests/loader:") {
		t.Fatalf("table:\n%s", stdout.String())
	}
	f := strings.Fields(lines[1])
	if f[0] != "flightcache" || f[2] != "200" || f[3] != "1" || f[len(f)-1] != "0" {
		t.Fatalf("row %q: want flightcache, 200 requests, 1 origin query, 0 errors", lines[1])
	}
	// The warm-up load, the read of the variant whose values the
	// invalidation writes back, and the herd's one.
	if srv.OriginQueries() != 3 {
		t.Fatalf("the server counted %d origin queries, want 3", srv.OriginQueries())
	}
}

func TestInvalidFlagsExitWith2OrExplain(t *testing.T) {
	for _, args := range [][]string{{"-n", "x"}, {"-bogus"}} {
		if code := Main(context.Background(), args, io.Discard, io.Discard, false); code != 2 {
			t.Errorf("Main(%q) = %d, want 2", args, code)
		}
	}
	for _, args := range [][]string{{"-mode", "fast"}, {"-key", "no-slash"}, {"-target", "ftp://x"}, {"-n", "0"}} {
		var stderr bytes.Buffer
		if code := Main(context.Background(), args, io.Discard, &stderr, false); code != 1 || stderr.Len() == 0 {
			t.Errorf("Main(%q) = %d (%q), want 1 with a message", args, code, stderr.String())
		}
	}
}

// A run whose herd arrived spread out, or whose naive mode did not
// stampede, is flagged as not a valid comparison, with a remedy, on the
// terminal and in the report; a tight herd is not.
func TestInvalidComparisonsAreFlaggedWithARemedy(t *testing.T) {
	results := []Result{
		{Mode: ModeNaive, Traffic: "herd", Requests: 1000, OriginQueries: 76, SpreadMillis: 180},
		{Mode: ModeFlightcache, Traffic: "herd", Requests: 1000, OriginQueries: 1, SpreadMillis: 20},
		{Mode: ModeEarlyRefresh, Traffic: "continuous", Requests: 5000, OriginQueries: 3},
	}
	warnings := Validate(results, 100*time.Millisecond)
	if len(warnings) != 2 || len(results[0].Warnings) != 2 || len(results[1].Warnings) != 0 || len(results[2].Warnings) != 0 {
		t.Fatalf("warnings %q: want two, both on the naive herd (spread 180ms > 100ms, 76 < 500 queries)", warnings)
	}
	for _, w := range warnings {
		if !strings.Contains(w, "not a valid comparison") || !strings.Contains(w, "-n") || !strings.Contains(w, "-origin-latency") {
			t.Fatalf("warning %q lacks the verdict or the remedy", w)
		}
	}
	var table bytes.Buffer
	if err := WriteTable(&table, results); err != nil {
		t.Fatal(err)
	}
	if strings.Count(table.String(), "WARNING:") != 2 || !strings.Contains(table.String(), "suppression: ") {
		t.Fatalf("table lacks the warnings or the legend:\n%s", table.String())
	}
	for i := range results {
		results[i].latencies = []time.Duration{time.Millisecond, 120 * time.Millisecond}
	}
	var report bytes.Buffer
	if err := WriteHTML(&report, results, ReportInfo{OriginLatency: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if strings.Count(report.String(), "Not a valid comparison.") != 2 || !strings.Contains(report.String(), "origin latency 100 ms") ||
		!strings.Contains(report.String(), "requests/loader: ") {
		t.Fatal("report lacks the warnings, the origin-latency marker or the legend")
	}
	if w := Validate([]Result{{Mode: ModeNaive, Traffic: "herd", Requests: 1000, OriginQueries: 990, SpreadMillis: 15}}, 100*time.Millisecond); len(w) != 0 {
		t.Fatalf("a tight herd that stampeded was flagged: %q", w)
	}
}

// The batch demo's claim: cold batch requests with overlapping ids cost
// flightcache one origin row per distinct id and at most one query per
// request, where naive per-id loading costs a query per id, and more
// whenever two requests miss the same id together.
func TestBatchStampedeLoadsEachDistinctIDOnceWithFlightcache(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"-batch", "-json", "-batches", "12", "-batch-size", "20", "-batch-pool", "40", "-origin-latency", "2ms"}
	if code := mainWith(context.Background(), Config{Catalog: &smallCatalog}, args, &stdout, &stderr, false); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var doc struct{ Results []BatchResult }
	if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil || len(doc.Results) != 2 {
		t.Fatalf("stdout %s: %v", stdout.Bytes(), err)
	}
	naive, fc := doc.Results[0], doc.Results[1]
	if naive.Mode != ModeBatchNaive || fc.Mode != ModeBatchFlightcache || naive.Errors+fc.Errors != 0 {
		t.Fatalf("results = %+v", doc.Results)
	}
	if fc.OriginRows != int64(fc.DistinctIDs) || fc.OriginQueries > int64(fc.Batches) || fc.OriginQueries < 1 {
		t.Fatalf("flightcache: %d queries for %d rows over %d distinct ids and %d batches; want each id once, at most one query per batch",
			fc.OriginQueries, fc.OriginRows, fc.DistinctIDs, fc.Batches)
	}
	// Naive: one query per id, and an id two requests miss together is
	// read twice.
	if naive.OriginQueries != naive.OriginRows || naive.OriginRows < int64(naive.DistinctIDs) || naive.OriginQueries <= fc.OriginQueries {
		t.Fatalf("naive: %d queries for %d rows over %d distinct ids; want one query per row, every id at least once, more queries than flightcache's %d",
			naive.OriginQueries, naive.OriginRows, naive.DistinctIDs, fc.OriginQueries)
	}
	t.Logf("naive %+v; flightcache %+v", naive, fc)
}

// -instances: the same herd spread over productd processes that share one
// Redis and one SQLite file, coalesced per process (up to one origin query
// per instance) against across all of them (exactly one). With the default
// TTL (InstancesTTL, which no herd outlasts) the herd comes right after the
// demo's invalidation, which must leave every instance reading the hot
// product under one cache key: else cluster coalescing makes one query per
// key.
func TestInstancesShowClusterCoalescingMakesOneOriginQueryWhereLocalMakesOnePerInstance(t *testing.T) {
	redisURL := "redis://" + testenv.RequireRedis(t) + "/0"
	var stdout, stderr bytes.Buffer
	code := mainWith(context.Background(), Config{Catalog: &smallCatalog},
		[]string{"-instances", "3", "-redis", redisURL, "-json", "-n", "300", "-report", ""}, &stdout, &stderr, false)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	res := decode(t, stdout.Bytes())
	local, cluster := res["local x3"], res["cluster x3"]
	if local.Requests != 300 || cluster.Requests != 300 || local.Errors+cluster.Errors != 0 {
		t.Fatalf("results %+v", res)
	}
	if cluster.OriginQueries != 1 {
		t.Fatalf("cluster x3: %d origin queries, want 1 (Cache-Status %v)", cluster.OriginQueries, cluster.CacheStatus)
	}
	if local.OriginQueries < 1 || local.OriginQueries > 3 {
		t.Fatalf("local x3: %d origin queries, want 1 to 3 (Cache-Status %v)", local.OriginQueries, local.CacheStatus)
	}
	if fromAnotherInstance(cluster.CacheStatus) == 0 {
		t.Fatalf("cluster x3 answered no request from another instance's load: %v", cluster.CacheStatus)
	}
}

// -target A,B against two running instances in cluster mode (one Redis,
// one database): the entry outlives what stampede waits for, so it
// invalidates it, and both instances must then read the hot product under
// one cache key: one origin query for the herd across both. Updating the
// hot row through each target instead gave each its own revision floor,
// hence its own key, and cost one query per instance.
func TestStampedeAgainstTwoClusterTargetsMakesOneOriginQuery(t *testing.T) {
	redisURL := "redis://" + testenv.RequireRedis(t) + "/0"
	cfg := productd.Default()
	cfg.DB = filepath.Join(t.TempDir(), "p.db")
	cfg.Catalog = &smallCatalog
	cfg.Redis = redisURL
	cfg.RedisPrefix = testenv.UniqueName("stampede-targets-") + ":"
	cfg.WriteToken = targetWriteToken
	t.Setenv(WriteTokenEnv, targetWriteToken) // Main sends it with its PUTs
	cfg.Coalesce = productd.CoalesceCluster
	cfg.OriginLatency = 250 * time.Millisecond
	cfg.TTL = 5 * time.Minute
	cfg.Jitter = 0
	cfg.LoaderTimeout = 30 * time.Second
	cfg.MaxWaiters = 0
	// What these instances share through Redis is the subject; on a
	// machine busy with another test suite a Redis round trip has
	// outlasted the 250ms default, and a heartbeat the 1s DownAfter.
	cfg.RedisTimeout = 5 * time.Second
	cfg.BusDownAfter = 10 * time.Second
	// Two more delays of a busy host end in a second origin query by
	// design, not by a coalescing miss: a leader whose lease heartbeats
	// come later than the lease TTL is taken over, and the outbox relay
	// redoes the invalidation of the demo's PUT when the writer's own
	// record of it lands later than the grace, mid-herd. Neither is what
	// this test is about.
	cfg.LeaseTTL = 15 * time.Second
	cfg.OutboxGrace = time.Minute
	var bases []string
	var srvs []*productd.Server
	for range 2 { // one after the other: the first seeds the database
		srv, base := serveProductd(t, cfg)
		srvs, bases = append(srvs, srv), append(bases, base)
	}
	for _, srv := range srvs {
		waitServerBus(t, srv)
	}

	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), []string{"-target", strings.Join(bases, ","), "-mode", "flightcache",
		"-n", "300", "-key", "acme/p-00042?locale=en-US&currency=USD", "-json", "-report", ""}, &stdout, &stderr, false)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	fc := decode(t, stdout.Bytes())[ModeFlightcache]
	if fc.Requests != 300 || fc.Errors != 0 || fc.OriginQueries != 1 {
		t.Fatalf("flightcache over 2 cluster-mode targets: %d requests, %d errors, %d origin queries; want 300, 0, 1 (Cache-Status %v)",
			fc.Requests, fc.Errors, fc.OriginQueries, fc.CacheStatus)
	}
	if fromAnotherInstance(fc.CacheStatus) == 0 {
		t.Fatalf("Cache-Status %v: no answer came from the other instance's load", fc.CacheStatus)
	}
	for _, w := range fc.Warnings {
		if strings.Contains(w, "revision of its own") {
			t.Fatalf("the demo fell back to updating the hot row: %s", w)
		}
	}
}

// fromAnotherInstance counts the answers that came from another
// instance's load: waiting for it (coalesced-cluster), or, once it was
// stored, reading it from the shared tier (the herd arrives spread out on
// a busy machine). An instance that read the product under a key of its
// own would have neither.
func fromAnotherInstance(cacheStatus map[string]int) int {
	return cacheStatus["fwd=miss; collapsed; detail=coalesced-cluster"] + cacheStatus["hit; detail=shared"]
}

// serveProductd starts productd with cfg on a loopback port until the test
// ends.
func serveProductd(t *testing.T, cfg productd.Config) (*productd.Server, string) {
	t.Helper()
	srv, err := productd.New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	return srv, "http://" + ln.Addr().String()
}

// waitServerBus waits until srv's invalidation bus is up: when it first comes
// up it empties the memory tier, which must not happen mid-herd.
func waitServerBus(t *testing.T, srv *productd.Server) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for srv.BusState() != driver.BusUp {
		if time.Now().After(deadline) {
			t.Fatalf("the invalidation bus is %v after a minute, want up", srv.BusState())
		}
		time.Sleep(10 * time.Millisecond) // polling state that the bus's own heartbeats set
	}
}

func TestInstancesNeedRedis(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"-instances", "2"}, &stdout, &stderr, false); code != 1 || !strings.Contains(stderr.String(), "-instances needs -redis") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

// -instance-flags reach the productd processes after the run's own flags,
// so that they win (Go's flag package keeps the last value).
func TestInstanceFlagsComeAfterTheRunsOwn(t *testing.T) {
	cfg := Config{Redis: "redis://127.0.0.1:6379/0", TTL: time.Minute, OriginLatency: time.Millisecond,
		InstanceFlags: []string{"-redis-timeout", "250ms", "-bus-down-after", "0"}}
	args := instanceArgs(cfg, ModeCluster, ModeCluster, "products.db")
	last := func(name string) string {
		v := ""
		for i := 0; i+1 < len(args); i++ {
			if args[i] == name {
				v = args[i+1]
			}
		}
		return v
	}
	if got := last("-redis-timeout"); got != "250ms" {
		t.Fatalf("-redis-timeout as productd parses it: %q, want the -instance-flags value 250ms (args %q)", got, args)
	}
	if got := last("-bus-down-after"); got != "0" {
		t.Fatalf("-bus-down-after as productd parses it: %q, want 0 (args %q)", got, args)
	}
}
