package productd

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// waitForMetric polls base's /metrics until sample is exposed and reads
// want, failing t after within: the way to wait for state the server's
// goroutines change, without guessing a sleep.
func waitForMetric(t *testing.T, c *http.Client, base, sample string, want float64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		text := metricsText(t, c, base)
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(line, sample+" "); ok && strings.TrimSpace(v) == strconv.FormatFloat(want, 'g', -1, 64) {
				return
			}
		}
		if time.Now().After(deadline) {
			name, _, _ := strings.Cut(sample, "{")
			t.Fatalf("%s is not %v after %v:\n%s", sample, want, within, metricLines(t, c, base, name))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A client that disconnects while its product is being loaded (wrk's
// requests at the end of a run, a client timeout, a user who closes the
// page) is no server failure: productd records 499 for it, not a 5xx, the
// cache counts its Get as caller_left, not load_failed, and the load it
// started goes on, so that the next request for the product hits.
func TestClientThatDisconnectsMidLoadLeavesNoServerError(t *testing.T) {
	t.Parallel()
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = filepath.Join(t.TempDir(), "products.db")
	cfg.Catalog = &testCatalog
	// Long enough to see the load in flight on a busy machine; the test
	// waits for it to end rather than for this long.
	cfg.OriginLatency = 2 * time.Second
	base, _ := startInProcess(t, cfg)
	c := herdClient(2)
	defer c.CloseIdleConnections()
	target := base + "/v1/tenants/acme/products/p-00042"
	const inFlight = `single_flight_in_flight{operation="product"}`

	ctx, disconnect := context.WithCancel(context.Background())
	defer disconnect()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	waitForMetric(t, c, base, inFlight, 1, 30*time.Second) // the load runs
	disconnect()                                           // the client closes its connection
	if err := <-answered; !errors.Is(err, context.Canceled) {
		t.Fatalf("the departing client's request ended with %v, want its own cancellation", err)
	}
	// The handler answered (whatever it answered), and the load went on
	// and ended.
	waitForMetric(t, c, base, `productd_http_request_duration_seconds_count{route="GET /v1/tenants/{tenant}/products/{id}"}`, 1, 30*time.Second)
	waitForMetric(t, c, base, inFlight, 0, 30*time.Second)

	resp, err := c.Get(target)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if cs := resp.Header.Get("Cache-Status"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(cs, "flightcache; hit") {
		t.Errorf("the next request: %d, Cache-Status %q; want 200 and a hit of the departed client's load", resp.StatusCode, cs)
	}
	if q := metric(t, c, base, OriginQueriesMetric); q != 1 {
		t.Errorf("%v origin queries, want 1", q)
	}
	for _, line := range strings.Split(metricsText(t, c, base), "\n") {
		if strings.HasPrefix(line, "productd_http_requests_total{") && strings.Contains(line, `code="5`) {
			t.Errorf("a server error was counted: %s", line)
		}
	}
	if v := metric(t, c, base, `flightcache_gets_total{operation="product",outcome="load_failed"}`); v != 0 {
		t.Errorf("flightcache_gets_total{outcome=load_failed} = %v, want 0:\n%s", v, metricLines(t, c, base, "flightcache_gets_total"))
	}
	if v := metric(t, c, base, `productd_http_requests_total{code="499",route="GET /v1/tenants/{tenant}/products/{id}"}`); v != 1 {
		t.Errorf("productd_http_requests_total{code=499} = %v, want 1", v)
	}
	if v := metric(t, c, base, `flightcache_gets_total{operation="product",outcome="caller_left"}`); v != 1 {
		t.Errorf("flightcache_gets_total{outcome=caller_left} = %v, want 1", v)
	}
}
