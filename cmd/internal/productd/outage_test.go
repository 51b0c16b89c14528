package productd

import (
	"database/sql"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Samples of promflight's series that the outage tests read.
const (
	originFailedMetric  = `flightcache_origin_calls_total{operation="product",result="error"}`
	throttledMetric     = `flightcache_throttled_total{operation="product"}`
	flightsFailedMetric = `single_flight_flights_failed_total{operation="product"}`
)

// With the database gone and -stale-for set, a product past its TTL is
// served stale at once: the first request of a throttle window asks the
// origin (Cache-Status fwd=stale, RFC 9211 §2.2) and the rest do not (hit,
// §2.1); the origin is asked at most once per window; the failure the
// stale value hid is logged as one WARN; /readyz says the database is
// down but stays 200, since the instance serves stale values. The
// metrics count one failed origin call, 30 throttled answers and 31
// failed flights.
func TestDatabaseOutageServesStaleAndThrottlesTheOrigin(t *testing.T) {
	t.Parallel()
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = filepath.Join(t.TempDir(), "products.db")
	cfg.Catalog = &testCatalog
	cfg.TTL, cfg.NegativeTTL, cfg.Jitter = time.Second, time.Second, 0
	cfg.StaleFor = time.Hour
	cfg.FailureThrottle = time.Minute // one window for the whole test
	cfg.LogFormat = "json"
	var logs syncBuffer
	s, err := New(t.Context(), cfg, cfg.NewLogger(&logs))
	if err != nil {
		t.Fatal(err)
	}
	base := serveInProcess(t, s)
	url := base + "/v1/tenants/acme/products/p-00011"
	c := herdClient(1)
	defer c.CloseIdleConnections()
	cacheStatus := func() (int, string) {
		t.Helper()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Cache-Status")
	}
	if code, _ := cacheStatus(); code != 200 {
		t.Fatalf("warm-up GET: %d", code)
	}
	db, err := sql.Open("sqlite", cfg.DB)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DROP TABLE products`); err != nil {
		t.Fatal(err)
	}
	before := s.OriginQueries()
	// The series an outage dashboard reads, before the outage: origin
	// calls that failed, throttled answers and failed flights are three
	// different things.
	metrics := func() (originFailed, throttled, flightsFailed float64) {
		t.Helper()
		return metric(t, c, base, originFailedMetric), metric(t, c, base, throttledMetric), metric(t, c, base, flightsFailedMetric)
	}
	originFailed0, throttled0, flightsFailed0 := metrics()
	// Poll until the entry's TTL has passed (the first answer that is not a
	// fresh hit); each poll before that is a hit and costs no origin query.
	// The header's ttl is computed on the wall clock, the Cache's hit check
	// on the memory tier's coarse clock, which a loaded machine can hold
	// back for a moment: a hit with ttl=-1 is still a hit.
	deadline := time.Now().Add(10 * time.Second)
	code, cs := cacheStatus()
	for strings.Contains(cs, "; hit") {
		if time.Now().After(deadline) {
			t.Fatal("the entry never expired")
		}
		time.Sleep(20 * time.Millisecond) // waiting for the clock to pass the TTL, not for a goroutine
		code, cs = cacheStatus()
	}
	if code != 200 || !strings.Contains(cs, "fwd=stale") || !strings.Contains(cs, "detail=origin-error") {
		t.Fatalf("first GET past the TTL with the database gone: %d %q; want 200 fwd=stale detail=origin-error", code, cs)
	}
	for range 30 {
		if code, cs := cacheStatus(); code != 200 || !strings.HasPrefix(cs, "flightcache; hit; ttl=-") || !strings.Contains(cs, "detail=origin-throttled") {
			t.Fatalf("GET within the throttle window: %d %q; want a stale hit, origin-throttled", code, cs)
		}
	}
	if n := s.OriginQueries() - before; n != 1 {
		t.Fatalf("%d origin queries for 31 requests within one throttle window, want 1", n)
	}
	// The metrics say the same: one failed origin call, 30 throttled
	// answers, 31 failed flights. A dashboard that plotted failed flights
	// as "loader failures" showed 31 where the database was asked once.
	originFailed, throttled, flightsFailed := metrics()
	if d := originFailed - originFailed0; d != 1 {
		t.Errorf("%s grew by %v during the outage, want 1 (the one origin query)", originFailedMetric, d)
	}
	if d := throttled - throttled0; d != 30 {
		t.Errorf("%s grew by %v, want 30 (the requests within the throttle window)", throttledMetric, d)
	}
	if d := flightsFailed - flightsFailed0; d != 31 {
		t.Errorf("%s grew by %v, want 31 (every flight of the outage failed)", flightsFailedMetric, d)
	}
	if n := strings.Count(logs.String(), "origin failed; served a stale value"); n != 1 {
		t.Fatalf("%d warnings about the hidden failure, want 1:\n%s", n, logs.String())
	}
	if code, b := getReadyz(t, base); code != http.StatusOK || b.Dependencies["db"] != "down" {
		t.Fatalf("/readyz with the products table gone and -stale-for: %d %+v, want 200 with db down", code, b)
	}
}
