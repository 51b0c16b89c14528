package productd

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/internal/testenv"
)

// env is a getenv over m that also holds the tests' write token
// (PRODUCTD_WRITE_TOKEN), unless m sets that variable itself: a productd
// configuration without a write token is refused.
func env(m map[string]string) func(string) string {
	return func(k string) string {
		if v, ok := m[k]; ok || k != "PRODUCTD_WRITE_TOKEN" {
			return v
		}
		return testWriteToken
	}
}

func TestFlagsWinOverEnvironmentWhichWinsOverDefaults(t *testing.T) {
	c, err := ParseFlags([]string{"-cache-ttl", "2m"}, env(map[string]string{
		"PRODUCTD_CACHE_TTL":      "1m",
		"PRODUCTD_ORIGIN_LATENCY": "200ms",
		"PRODUCTD_MODE":           "naive",
		"PRODUCTD_EARLY_REFRESH":  "true",
	}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.TTL != 2*time.Minute || c.OriginLatency != 200*time.Millisecond || c.Mode != product.ModeNaive || !c.EarlyRefresh {
		t.Fatalf("got %+v", c)
	}
	if c.Addr != Default().Addr || c.DB != Default().DB {
		t.Fatalf("defaults lost: %+v", c)
	}
}

func TestHelpDocumentsEveryFlagWithItsVariable(t *testing.T) {
	var out bytes.Buffer
	_, err := ParseFlags([]string{"-h"}, env(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, name := range []string{"addr", "db", "db-max-conns", "seed", "redis", "redis-prefix", "origin-latency", "mode",
		"cache-ttl", "negative-ttl", "cache-jitter", "stale-for", "early-refresh", "loader-timeout", "max-in-flight",
		"max-waiters", "local-max-entries", "shutdown-timeout", "log-level", "log-format", "coalesce", "lease-ttl", "coalesce-wait",
		"bus-down-ttl", "bus-heartbeat", "bus-down-after"} {
		v := "PRODUCTD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if !strings.Contains(out.String(), "-"+name) || !strings.Contains(out.String(), v) {
			t.Errorf("-h does not document -%s with %s", name, v)
		}
	}
}

func TestInvalidSettingsAreRejected(t *testing.T) {
	tests := []struct {
		args []string
		env  map[string]string
	}{
		{args: []string{"-cache-ttl", "10ms"}},
		{args: []string{"-negative-ttl", "10m"}},
		{args: []string{"-mode", "fast"}},
		{args: []string{"-cache-jitter", "0.9"}},
		{args: []string{"-origin-latency", "-1s"}},
		{args: []string{"-log-format", "xml"}},
		{args: []string{"-log-level", "loud"}},
		{args: []string{"-db", ""}},
		{args: []string{"stray"}},
		{args: []string{"-coalesce", "global"}},
		{args: []string{"-coalesce", "cluster"}}, // without -redis
		{env: map[string]string{"PRODUCTD_COALESCE": "cluster"}},
		{args: []string{"-coalesce", "cluster", "-redis", "redis://127.0.0.1:6379", "-mode", "naive"}},
		{args: []string{"-redis", "redis://127.0.0.1:6379", "-lease-ttl", "10ms"}},
		{args: []string{"-coalesce-wait", "1h"}},
		{args: []string{"-bus-down-ttl", "0"}},
		{args: []string{"-bus-down-ttl", "10m"}}, // longer than -cache-ttl
		{args: []string{"-bus-down-ttl", "2s", "-cache-ttl", "1s", "-negative-ttl", "1s"}},
		{args: []string{"-bus-heartbeat", "5ms"}},
		{args: []string{"-bus-heartbeat", "11s"}},
		{args: []string{"-bus-down-after", "150ms", "-bus-heartbeat", "100ms"}}, // under twice the heartbeat
		{args: []string{"-bus-down-after", "2m"}},
		{args: []string{"-bus-down-after", "-1s"}},
		{env: map[string]string{"PRODUCTD_BUS_HEARTBEAT": "often"}},
		{env: map[string]string{"PRODUCTD_CACHE_TTL": "soon"}},
		{env: map[string]string{"PRODUCTD_SEED": "maybe"}},
	}
	for _, tc := range tests {
		if _, err := ParseFlags(tc.args, env(tc.env), &bytes.Buffer{}); err == nil {
			t.Errorf("ParseFlags(%q, %v) accepted an invalid setting", tc.args, tc.env)
		}
	}
}

// The bus flags default to the library's defaults; -bus-down-after 0
// stands for the longest of redislease's 1s, four heartbeats and two
// -redis-timeouts.
func TestBusFlagsDefaultsAndTheDownAfterTheyImply(t *testing.T) {
	c, err := ParseFlags(nil, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.BusDownTTL != flightcache.DefaultBusDownTTL || c.BusHeartbeat != 250*time.Millisecond || c.BusDownAfter != 0 || c.EffectiveBusDownAfter() != 2*time.Second {
		t.Fatalf("defaults: down TTL %v, heartbeat %v, down after %v (effective %v)", c.BusDownTTL, c.BusHeartbeat, c.BusDownAfter, c.EffectiveBusDownAfter())
	}
	c, err = ParseFlags([]string{"-bus-heartbeat", "400ms", "-redis-timeout", "250ms"}, env(map[string]string{"PRODUCTD_BUS_DOWN_TTL": "500ms"}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.BusDownTTL != 500*time.Millisecond || c.EffectiveBusDownAfter() != 1600*time.Millisecond {
		t.Fatalf("down TTL %v, effective down after %v; want 500ms and 4 x 400ms", c.BusDownTTL, c.EffectiveBusDownAfter())
	}
	c, err = ParseFlags([]string{"-redis-timeout", "3s"}, env(nil), &bytes.Buffer{})
	if err != nil || c.EffectiveBusDownAfter() != 6*time.Second {
		t.Fatalf("-redis-timeout 3s: effective down after %v, %v; want 2 x 3s", c.EffectiveBusDownAfter(), err)
	}
	c, err = ParseFlags([]string{"-bus-heartbeat", "100ms", "-bus-down-after", "200ms"}, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.EffectiveBusDownAfter() != 200*time.Millisecond {
		t.Fatalf("effective down after %v, want the 200ms asked for", c.EffectiveBusDownAfter())
	}
}

// A request waiting on another instance's load must outlast a crashed
// leader's lease, or it gives up before anyone can take the load over and
// queries the origin itself (uncached). The default wait covers the lease
// and, as far as flightcache allows, the new leader's load; an explicit
// wait shorter than the lease is refused with a message naming both flags.
func TestCoalesceWaitOutlastsTheLeaseByDefaultAndAContradictoryPairIsRefused(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"-lease-ttl", "2s"},
		{"-lease-ttl", "2s", "-loader-timeout", "30s"},
		{"-lease-ttl", "10s", "-loader-timeout", "10s"},
	} {
		c, err := ParseFlags(args, env(nil), &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		w := c.EffectiveCoalesceWait()
		if w < c.LeaseTTL || w > c.LeaseTTL+c.LoaderTimeout {
			t.Errorf("%q: default -coalesce-wait %v, want between -lease-ttl %v and -lease-ttl + -loader-timeout %v",
				args, w, c.LeaseTTL, c.LeaseTTL+c.LoaderTimeout)
		}
	}
	c, err := ParseFlags([]string{"-lease-ttl", "2s", "-coalesce-wait", "2s"}, env(nil), &bytes.Buffer{})
	if err != nil || c.EffectiveCoalesceWait() != 2*time.Second {
		t.Fatalf("-coalesce-wait equal to -lease-ttl: %v, wait %v", err, c.EffectiveCoalesceWait())
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
	}{
		{args: []string{"-coalesce-wait", "2500ms"}}, // under the default 3s lease
		{args: []string{"-lease-ttl", "4s", "-coalesce-wait", "3s"}},
		{args: []string{"-lease-ttl", "4s"}, env: map[string]string{"PRODUCTD_COALESCE_WAIT": "1s"}},
	} {
		_, err := ParseFlags(tc.args, env(tc.env), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "-coalesce-wait") || !strings.Contains(err.Error(), "shorter than -lease-ttl") {
			t.Errorf("ParseFlags(%q, %v): %v, want a refusal naming -coalesce-wait and -lease-ttl", tc.args, tc.env, err)
		}
	}
}

// -redis alone means cluster coalescing; process-local coalescing with
// Redis must be asked for, by flag or variable.
func TestRedisImpliesClusterCoalescingUnlessLocalIsAskedFor(t *testing.T) {
	tests := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: nil, want: CoalesceLocal},
		{args: []string{"-redis", "redis://127.0.0.1:6379"}, want: CoalesceCluster},
		{args: []string{"-redis", "redis://127.0.0.1:6379", "-coalesce", "local"}, want: CoalesceLocal},
		{args: []string{"-redis", "redis://127.0.0.1:6379"}, env: map[string]string{"PRODUCTD_COALESCE": "local"}, want: CoalesceLocal},
		{args: []string{"-coalesce", "local"}, want: CoalesceLocal},
		{args: []string{"-redis", "redis://127.0.0.1:6379", "-mode", "naive"}, want: "none"},
	}
	for _, tc := range tests {
		c, err := ParseFlags(tc.args, env(tc.env), &bytes.Buffer{})
		if err != nil {
			t.Fatalf("ParseFlags(%q, %v): %v", tc.args, tc.env, err)
		}
		if got := c.Coalescing(); got != tc.want {
			t.Errorf("ParseFlags(%q, %v).Coalescing() = %q, want %q", tc.args, tc.env, got, tc.want)
		}
	}
}

// Neither -h nor a mistyped flag prints a credential that came from the
// environment: the usage text shows -db and -redis redacted.
func TestUsageAndFlagErrorsNeverPrintCredentials(t *testing.T) {
	vars := env(map[string]string{
		"PRODUCTD_DB":    "postgres://app:hunter2@db.internal:5432/products?sslmode=disable",
		"PRODUCTD_REDIS": "redis://default:s3cret@cache.internal:6379/0",
	})
	for _, args := range [][]string{{"-h"}, {"-no-such-flag"}, {"-db-max-conns", "many"}} {
		var out bytes.Buffer
		_, err := ParseFlags(args, vars, &out)
		if err == nil {
			t.Fatalf("ParseFlags(%q) succeeded", args)
		}
		text := out.String() + err.Error()
		if strings.Contains(text, "hunter2") || strings.Contains(text, "s3cret") {
			t.Fatalf("ParseFlags(%q) printed a credential:\n%s", args, text)
		}
		if args[0] == "-h" && !strings.Contains(text, "postgres://app:xxxxx@db.internal:5432/products") {
			t.Fatalf("-h does not show the redacted -db default:\n%s", text)
		}
	}
}

// A flag's value cut off by a space (-db= 'postgres://…') becomes a stray
// argument; the error names it without its password.
func TestStrayArgumentIsReportedRedacted(t *testing.T) {
	var out bytes.Buffer
	_, err := ParseFlags([]string{"-db=", "postgres://app:hunter2@db.internal/products"}, env(nil), &out)
	if err == nil {
		t.Fatal("a stray argument was accepted")
	}
	text := out.String() + err.Error()
	if strings.Contains(text, "hunter2") {
		t.Fatalf("the error printed the password:\n%s", text)
	}
	if !strings.Contains(err.Error(), "unexpected argument") || !strings.Contains(err.Error(), "db.internal") {
		t.Fatalf("unclear error: %v", err)
	}
}

// A -db that is none of the accepted forms is refused before anything is
// opened or created, with an error that lists the forms and hides the
// password.
func TestAmbiguousDatabaseNameIsRefused(t *testing.T) {
	for _, db := range []string{
		"host=db.internal user=app password=hunter2 dbname=products",
		"mysql://app:hunter2@db.internal/products",
		"products",
		"file:password=hunter2d",
	} {
		_, err := ParseFlags([]string{"-db", db}, env(nil), &bytes.Buffer{})
		if !errors.Is(err, product.ErrUnsupportedDSN) {
			t.Fatalf("-db %q: %v, want ErrUnsupportedDSN", db, err)
		}
		if strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "postgres://") {
			t.Fatalf("-db %q: error %q leaks the password or lacks the accepted forms", db, err)
		}
	}
}

// An SQLite file that cannot be opened is named in the error, so the
// operator knows which path to fix.
func TestSQLiteErrorNamesThePath(t *testing.T) {
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = filepath.Join(t.TempDir(), "missing-dir", "products.db")
	cfg.Catalog = &testCatalog
	srv, err := New(t.Context(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		srv.Close()
		t.Fatal("New opened a SQLite file in a missing directory")
	}
	if !strings.Contains(err.Error(), cfg.DB) {
		t.Fatalf("error does not name %s: %v", cfg.DB, err)
	}
}

// JSON logs carry durations as readable strings, not nanoseconds.
func TestJSONLogsWriteDurationsAsStrings(t *testing.T) {
	c := Default()
	c.LogFormat = "json"
	var buf bytes.Buffer
	c.NewLogger(&buf).Info("x", "took", 1500*time.Millisecond)
	if !strings.Contains(buf.String(), `"took":"1.5s"`) {
		t.Fatalf("log line %s: want \"took\":\"1.5s\"", buf.String())
	}
}

// At debug level every request gets an access log line that names the
// route pattern and status, never the path (it holds IDs).
func TestAccessLogAtDebugNamesTheRouteNotThePath(t *testing.T) {
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = filepath.Join(t.TempDir(), "products.db")
	cfg.Catalog = &testCatalog
	cfg.LogLevel, cfg.LogFormat = "debug", "json"
	var buf syncBuffer
	s, err := New(t.Context(), cfg, cfg.NewLogger(&buf))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req := httptest.NewRequest("GET", "/v1/tenants/acme/products/p-00042", nil)
	s.Handler().ServeHTTP(httptest.NewRecorder(), req)
	var found bool
	for _, line := range strings.Split(buf.String(), "\n") {
		if !strings.Contains(line, `"msg":"request"`) {
			continue
		}
		found = true
		if strings.Contains(line, "p-00042") || !strings.Contains(line, `"route":"GET /v1/tenants/{tenant}/products/{id}"`) || !strings.Contains(line, `"status":200`) {
			t.Fatalf("access log line %s", line)
		}
	}
	if !found {
		t.Fatalf("no access log line at debug:\n%s", buf.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The failure throttle is on by default, with a window short enough that
// the origin is probed again within seconds of recovering.
func TestFailureThrottleIsOnByDefault(t *testing.T) {
	c, err := ParseFlags(nil, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.FailureThrottle < time.Second || c.FailureThrottle > 5*time.Second {
		t.Fatalf("default -failure-throttle %v, want between 1s and 5s", c.FailureThrottle)
	}
	if c, err = ParseFlags([]string{"-failure-throttle", "0"}, env(nil), &bytes.Buffer{}); err != nil || c.FailureThrottle != 0 {
		t.Fatalf("-failure-throttle 0: %v, %v", c.FailureThrottle, err)
	}
}

// An origin failure hidden by a stale value is logged as a warning, at
// most once per second; the failure throttle's repeats are not.
func TestHiddenOriginFailuresAreWarnedRateLimited(t *testing.T) {
	var buf syncBuffer
	warn := staleWarner(slog.New(slog.NewJSONHandler(&buf, nil)))
	for range 10 {
		warn(t.Context(), errors.New("connection refused"))
		warn(t.Context(), &flightcache.ThrottledError{Err: errors.New("connection refused")})
	}
	out := buf.String()
	if n := strings.Count(out, "served a stale value"); n != 1 || !strings.Contains(out, `"level":"WARN"`) || !strings.Contains(out, "connection refused") {
		t.Fatalf("%d warnings for 10 hidden failures within a second, want 1 WARN with the error:\n%s", n, out)
	}
}

// The "productd listening" line names the database without its secrets: a
// password in the URL's user info or query is redacted.
func TestListeningLineRedactsTheDatabasePassword(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDB(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// PostgreSQL trusts loopback here: the password is carried, not checked.
	u.User = url.UserPassword(u.User.Username(), "hunter2")
	q := u.Query()
	q.Set("password", "hunter2")
	u.RawQuery = q.Encode()
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = u.String()
	cfg.Catalog = &testCatalog
	cfg.LogFormat = "json"
	var logs syncBuffer
	s, err := New(t.Context(), cfg, cfg.NewLogger(&logs))
	if err != nil {
		t.Fatal(err)
	}
	base := serveInProcess(t, s)
	resp, err := http.Get(base + "/healthz") // answered: Serve has logged its line
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var listening map[string]any
	for l := range strings.Lines(logs.String()) {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) == nil && rec["msg"] == "productd listening" {
			listening = rec
		}
	}
	if listening == nil {
		t.Fatalf("no productd listening line in:\n%s", logs.String())
	}
	db, _ := listening["db"].(string)
	if strings.Contains(logs.String(), "hunter2") || !strings.Contains(db, "xxxxx") || !strings.Contains(db, u.Host) {
		t.Fatalf("listening line db=%q (all logs:\n%s); want the URL with its password redacted", db, logs.String())
	}
}

// A value that does not parse is refused with an error that names the
// flag or the variable and what was expected, never the value.
func TestRefusedValuesAreNamedNotQuoted(t *testing.T) {
	const value = "notanumberxyz"
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want []string
	}{
		{[]string{"-db-max-conns", value}, nil, []string{"-db-max-conns", "whole number"}},
		{[]string{"-cache-ttl=" + value}, nil, []string{"-cache-ttl", "duration"}},
		{[]string{"-seed=" + value}, nil, []string{"-seed", "true or false"}},
		{[]string{"-cache-jitter", value}, nil, []string{"-cache-jitter", "number"}},
		{nil, map[string]string{"PRODUCTD_DB_MAX_CONNS": value}, []string{"PRODUCTD_DB_MAX_CONNS", "whole number"}},
		{nil, map[string]string{"PRODUCTD_LOADER_TIMEOUT": value}, []string{"PRODUCTD_LOADER_TIMEOUT", "duration"}},
		{[]string{"-dbmaxconns", "5"}, nil, []string{"unknown flag -dbmaxconns", "-h"}},
		{[]string{"-" + value + "=X"}, nil, []string{"unknown flag -" + value}},
		{[]string{"-Postgres://u:" + value + "@h"}, nil, []string{"no flag productd has"}},
		{[]string{"-db"}, nil, []string{"-db needs a value"}},
		{[]string{"-mode", value}, nil, []string{"-mode must be flightcache or naive"}},
		{[]string{"-addr", value}, nil, []string{"-addr must be host:port"}},
		{[]string{"--", value}, nil, []string{"unexpected argument 2"}},
	} {
		var out bytes.Buffer
		_, err := ParseFlags(tc.args, env(tc.env), &out)
		if err == nil {
			t.Errorf("ParseFlags(%q, %v) accepted it", tc.args, tc.env)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ParseFlags(%q, %v): %v; want it to say %q", tc.args, tc.env, err, w)
			}
		}
		// The unknown-flag case names the flag, which is the value here.
		if !strings.HasPrefix(strings.Join(tc.args, " "), "-"+value) && strings.Contains(err.Error()+out.String(), value) {
			t.Errorf("ParseFlags(%q, %v) quoted the value: %v\n%s", tc.args, tc.env, err, out.String())
		}
	}
}

// Writes hold at most a share of the pool: a quarter by default, and an
// explicit share must leave the reads a connection; -write-timeout is a
// bounded duration. Each bad value is refused with a message naming the
// flag.
func TestWriteConnsAndWriteTimeout(t *testing.T) {
	c, err := ParseFlags(nil, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.EffectiveDBWriteConns() != 4 || c.WriteTimeout != 5*time.Second {
		t.Fatalf("defaults: %d write connections of %d, write timeout %v; want 4 and 5s", c.EffectiveDBWriteConns(), c.DBMaxConns, c.WriteTimeout)
	}
	c, err = ParseFlags([]string{"-db-max-conns", "2"}, env(nil), &bytes.Buffer{})
	if err != nil || c.EffectiveDBWriteConns() != 1 {
		t.Fatalf("-db-max-conns 2: %d write connections, %v; want 1", c.EffectiveDBWriteConns(), err)
	}
	c, err = ParseFlags([]string{"-db-max-conns", "1"}, env(map[string]string{"PRODUCTD_WRITE_TIMEOUT": "250ms"}), &bytes.Buffer{})
	if err != nil || c.EffectiveDBWriteConns() != 1 || c.WriteTimeout != 250*time.Millisecond {
		t.Fatalf("one connection: %d write connections, timeout %v, %v; want the one shared, 250ms", c.EffectiveDBWriteConns(), c.WriteTimeout, err)
	}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"-db-write-conns", "16"}, "-db-write-conns"}, // reads would keep none
		{[]string{"-db-write-conns", "-1"}, "-db-write-conns"},
		{[]string{"-db-max-conns", "1", "-db-write-conns", "2"}, "-db-write-conns"},
		{[]string{"-write-timeout", "0"}, "-write-timeout"},
		{[]string{"-write-timeout", "2m"}, "-write-timeout"},
	} {
		_, err := ParseFlags(tc.args, env(nil), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("ParseFlags(%q) = %v, want an error naming %s", tc.args, err, tc.flag)
		}
	}
}

// productd's defaults hold together on a busy host (make load-test runs
// cluster herds with them at load 10): a Redis call has 1s, four times
// the library's default; the bus goes down only after two of those
// without a heartbeat back (a heartbeat Redis answers in time is never
// counted lost); a load's lease outlives three of them, so a lease
// extension that Redis answers in time never lets another instance take
// the load over; and a request waits for another instance's load longer
// than the lease.
func TestDefaultsHoldTogetherOnABusyHost(t *testing.T) {
	c := Default()
	c.WriteToken = testWriteToken
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.RedisTimeout < time.Second {
		t.Errorf("-redis-timeout defaults to %v; a busy host delays a Redis round trip past 250ms", c.RedisTimeout)
	}
	if d := c.EffectiveBusDownAfter(); d < 2*c.RedisTimeout || d < 4*c.BusHeartbeat {
		t.Errorf("-bus-down-after defaults to %v with -redis-timeout %v and -bus-heartbeat %v: want at least 2 timeouts and 4 heartbeats", d, c.RedisTimeout, c.BusHeartbeat)
	}
	if c.LeaseTTL < 3*c.RedisTimeout {
		t.Errorf("-lease-ttl %v is under 3 x -redis-timeout %v: an extension Redis answers in time could come after the lease ran out", c.LeaseTTL, c.RedisTimeout)
	}
	if redisBreakerFailures < 20 {
		t.Errorf("the Redis breaker opens after %d failures in a row; a herd on a busy host has that many slow calls in a row", redisBreakerFailures)
	}
	if w := c.EffectiveCoalesceWait(); w <= c.LeaseTTL {
		t.Errorf("-coalesce-wait defaults to %v, not beyond -lease-ttl %v", w, c.LeaseTTL)
	}
}
