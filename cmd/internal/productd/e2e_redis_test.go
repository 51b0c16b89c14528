package productd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
)

// timedDo sends one request and returns its status, body and duration.
func timedDo(t *testing.T, c *http.Client, method, url, body string) (int, string, time.Duration) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if method != "GET" {
		authorize(req)
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b), time.Since(start)
}

// A productd on PostgreSQL with a private Redis that the test freezes
// (SIGSTOP) and then kills. With Redis hung or gone, a cold GET answers
// from the origin within the shared-tier deadlines plus the origin's
// latency; a PUT returns within its invalidation bound once the database
// has committed, and its own later GETs see it; failed invalidations show
// in the metrics; /readyz stays 200 and says redis: down; and every log
// line stays JSON (go-redis' own logging included).
func TestEndToEndHungOrDeadRedisCostsARequestAlmostNothing(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDB(t)
	rds := startPrivateRedis(t)
	// The bounds tell "about one deadline" from "several", with room for
	// a loaded machine (two test suites with -race on two cores), and no
	// tighter: the measured figures are in docs/productd.md.
	const (
		// Long enough that one deadline and three are far apart in
		// absolute terms, also on a loaded machine (a second test suite
		// has delayed a 500ms-deadline GET by 0.9s, and make test's own
		// streams a 1s-deadline GET by 1.6s); productd raises go-redis'
		// backstop to it, so only the deadlines count.
		redisTimeout  = 2 * time.Second
		originLatency = 50 * time.Millisecond
		// A cold GET pays one -redis-timeout: once its read timed out, it
		// neither double-checks nor writes back to Redis (the root
		// package's TestHungSharedTierCostsAMissAtMostOneSharedTimeout pins
		// that exactly). Two and a half is about one, and not three.
		coldBound = redisTimeout*5/2 + originLatency
		// A PUT's deletes are bounded together by one second, then its
		// prefix invalidation's Redis calls each by -redis-timeout
		// (measured 2.0s in all, 6.85s beside a second make test). Four
		// times that still tells a bounded PUT from one hung on Redis,
		// which would wait until the test resumes it.
		putBound = 4 * (time.Second + 2*redisTimeout)
		// With the breaker open a cold GET waits for no Redis deadline:
		// it takes less than one.
		openBound = redisTimeout
	)
	p := startProductd(t, "-db", dsn, "-seed-products", "200", "-redis", rds.url(),
		"-redis-prefix", testenv.UniqueName("productd-e2e-")+":",
		"-redis-timeout", redisTimeout.String(), "-origin-latency", originLatency.String())
	c := herdClient(4)
	defer c.CloseIdleConnections()
	product := func(n int) string { return fmt.Sprintf("%s/v1/tenants/acme/products/p-%05d", p.url, n) }

	if code, body, _ := timedDo(t, c, "GET", product(1), ""); code != 200 {
		t.Fatalf("warm-up GET: %d %s", code, body)
	}

	rds.pause(t)
	code, body, took := timedDo(t, c, "GET", product(2), "")
	if code != 200 {
		t.Fatalf("cold GET with Redis hung: %d %s", code, body)
	}
	if took > coldBound {
		t.Fatalf("cold GET with Redis hung took %v, want at most %v", took, coldBound)
	}
	t.Logf("Redis hung: cold GET %v", took)

	code, body, took = timedDo(t, c, "PUT", product(1), `{"priceCents": 777}`)
	if code != 200 || !strings.Contains(body, `"priceCents":777`) {
		t.Fatalf("PUT with Redis hung: %d %s", code, body)
	}
	if took > putBound {
		t.Fatalf("PUT with Redis hung took %v, want at most %v", took, putBound)
	}
	t.Logf("Redis hung: PUT %v", took)
	code, body, _ = timedDo(t, c, "GET", product(1), "")
	if code != 200 || !strings.Contains(body, `"priceCents":777`) {
		t.Fatalf("GET after the PUT on the same instance, Redis hung: %d %s", code, body)
	}
	if f := metric(t, c, p.url, InvalidationFailuresMetric); f < 1 {
		t.Fatalf("%s = %v after invalidating with Redis hung, want at least 1", InvalidationFailuresMetric, f)
	}

	// More failed calls open the shared tier's breaker; from then on a
	// cold GET costs the origin's latency and no Redis deadline at all.
	// They come side by side, as a service's traffic does: one after
	// another, each would wait for its deadline in turn.
	breakerOpen := func() bool {
		_, body, _ := timedDo(t, c, "GET", p.url+"/readyz", "")
		var rd readyBody
		return json.Unmarshal([]byte(body), &rd) == nil && rd.Dependencies["redis_breaker"] == "open"
	}
	n := 10
	openBreaker := func() {
		for range 3 {
			if breakerOpen() {
				return
			}
			var wg sync.WaitGroup
			for range redisBreakerFailures {
				n++
				url := product(n)
				wg.Go(func() {
					if a := get(c, url); a.err != nil || a.status != 200 {
						t.Errorf("cold GET with Redis hung: %d %s %v", a.status, a.body, a.err)
					}
				})
			}
			wg.Wait()
			if t.Failed() {
				t.FailNow()
			}
		}
		if !breakerOpen() {
			t.Fatal("the breaker never opened while Redis hung")
		}
	}
	openBreaker()
	// The breaker lets a probe through once its cool-down (5s) has passed,
	// and a probe pays a deadline. On a machine slow enough that the
	// cool-down ends before the GET, the GET is not one with the breaker
	// open: the half-open count tells, and the GET is made again with the
	// breaker open afresh. A GET with the breaker open that a loaded host
	// delays past the bound is made again too: the fastest of a few tells
	// a GET that waits for no deadline from one that always waits for one
	// (1s, about 20 times the origin's latency).
	halfOpen := `flightcache_shared_breaker_transitions_total{operation="product",to="half_open"}`
	const slowTries = 4
	fastest, slow, cooled := time.Duration(1<<62), 0, 0
	for fastest > openBound {
		probes := metric(t, c, p.url, halfOpen)
		n++
		code, body, took = timedDo(t, c, "GET", product(n), "")
		if code != 200 {
			t.Fatalf("cold GET with the breaker open: %d %s", code, body)
		}
		if metric(t, c, p.url, halfOpen) == probes {
			if fastest = min(fastest, took); fastest > openBound {
				if slow++; slow == slowTries {
					t.Fatalf("cold GET with the breaker open took at least %v in %d GETs, want at most %v", fastest, slow, openBound)
				}
				t.Logf("a cold GET with the breaker open took %v; again", took)
			}
			continue
		}
		if cooled++; cooled == 3 {
			t.Fatalf("the breaker's cool-down passed during each of %d GETs; the machine is too slow for this test", cooled)
		}
		t.Logf("the breaker's cool-down passed during the GET (%v); again", took)
		openBreaker()
	}
	t.Logf("Redis hung, breaker open: cold GET %v", fastest)
	if st := metric(t, c, p.url, `flightcache_shared_breaker_state{operation="product"}`); st != 2 {
		t.Fatalf("flightcache_shared_breaker_state = %v with the breaker open, want 2", st)
	}

	rds.kill()
	code, body, took = timedDo(t, c, "GET", product(3), "")
	if code != 200 {
		t.Fatalf("cold GET with Redis dead: %d %s", code, body)
	}
	if took > coldBound {
		t.Fatalf("cold GET with Redis dead took %v, want at most %v", took, coldBound)
	}
	t.Logf("Redis dead: cold GET %v", took)
	code, body, _ = timedDo(t, c, "GET", p.url+"/readyz", "")
	var rd readyBody
	if err := json.Unmarshal([]byte(body), &rd); err != nil || code != 200 || rd.Dependencies["redis"] != "down" {
		t.Fatalf("/readyz with Redis dead: %d %s", code, body)
	}

	p.stop(t)
	all, notJSON := p.logLines()
	if len(notJSON) > 0 {
		t.Fatalf("%d of %d log lines are not JSON, first: %s", len(notJSON), len(all), notJSON[0])
	}
	// The operator sees the outage in the log: the failed invalidation.
	warned := false
	for _, l := range all {
		if strings.Contains(l, `"level":"WARN"`) && strings.Contains(l, "invalidating a superseded cache entry failed") {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("no WARN about the failed invalidation among %d log lines", len(all))
	}
}

// A productd whose private Redis is killed while the breaker is still
// closed: a cold GET costs at most one -redis-timeout plus the origin's
// latency (no dial retries with back-off), and go-redis' own line about
// the failed dial reaches stderr as JSON through slog ("redis client").
func TestEndToEndRedisKilledWithTheBreakerClosedCostsOneTimeoutAndLogsJSON(t *testing.T) {
	t.Parallel()
	rds := startPrivateRedis(t)
	const (
		redisTimeout  = 400 * time.Millisecond
		originLatency = 50 * time.Millisecond
		// About one -redis-timeout, not three (a retried dial), with room
		// for a loaded machine; a refused dial usually costs far less.
		coldBound = redisTimeout*5/2 + originLatency
	)
	p := startProductd(t, "-db", filepath.Join(t.TempDir(), "products.db"), "-seed-products", "50",
		"-redis", rds.url(), "-redis-prefix", testenv.UniqueName("productd-killed-")+":",
		"-redis-timeout", redisTimeout.String(), "-origin-latency", originLatency.String())
	c := herdClient(1)
	defer c.CloseIdleConnections()
	product := func(n int) string { return fmt.Sprintf("%s/v1/tenants/acme/products/p-%05d", p.url, n) }
	if code, body, _ := timedDo(t, c, "GET", product(1), ""); code != 200 {
		t.Fatalf("warm-up GET: %d %s", code, body)
	}
	if code, body, _ := timedDo(t, c, "GET", p.url+"/readyz", ""); code != 200 || !strings.Contains(body, `"redis_breaker":"closed"`) {
		t.Fatalf("/readyz before the kill: %d %s; want the breaker closed", code, body)
	}

	rds.kill()
	// The first GETs find the pooled connections broken, the next ones
	// dial; each is bounded, until the breaker opens.
	for n := 2; n < 6; n++ {
		code, body, took := timedDo(t, c, "GET", product(n), "")
		if code != 200 {
			t.Fatalf("cold GET with Redis killed: %d %s", code, body)
		}
		if took > coldBound {
			t.Fatalf("cold GET %d with Redis killed took %v, want at most %v", n-1, took, coldBound)
		}
		t.Logf("Redis killed: cold GET %v", took)
	}

	deadline := time.After(10 * time.Second)
	for {
		select {
		case l := <-p.logs:
			var rec map[string]any
			if err := json.Unmarshal([]byte(l), &rec); err != nil {
				t.Fatalf("log line is not JSON: %s", l)
			}
			detail, _ := rec["detail"].(string)
			if rec["msg"] == "redis client" && rec["level"] == "WARN" && strings.Contains(detail, "failed to dial") {
				p.stop(t)
				if _, notJSON := p.logLines(); len(notJSON) > 0 {
					t.Fatalf("%d log lines are not JSON, first: %s", len(notJSON), notJSON[0])
				}
				return
			}
		case <-deadline:
			all, _ := p.logLines()
			t.Fatalf("no JSON line from go-redis about the failed dial within 10s; logs:\n%s", strings.Join(all, "\n"))
		}
	}
}
