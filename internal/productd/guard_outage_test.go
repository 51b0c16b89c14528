package productd

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/internal/httpapi"
)

// With Redis hung (SIGSTOP), an id the Bloom filter rules out costs its
// recent-creations lookup at most one -redis-timeout (then the cache's own
// shared read at most another), and once the shared breaker is open the
// lookup is not made at all: the guard answers "maybe" at once and the
// request costs the origin alone.
func TestMadeUpIDsWithRedisHungCostAtMostTheRedisTimeoutUntilTheBreakerOpens(t *testing.T) {
	t.Parallel()
	rds := startPrivateRedis(t)
	const (
		// Shorter than go-redis' and productd's own backstops (500ms),
		// so that only -redis-timeout can keep within the bounds.
		redisTimeout = 50 * time.Millisecond
		slack        = 150 * time.Millisecond
		// The guard's ZSCORE, then the Cache's shared read: each bounded
		// by -redis-timeout.
		closedBound = 2*redisTimeout + slack
		// With the breaker open nothing waits for Redis: what is left is
		// the origin's lookup (no -origin-latency) and the loopback.
		openBound = slack
	)
	cfg := Default()
	cfg.DB = filepath.Join(t.TempDir(), "products.db")
	cfg.Catalog = &testCatalog
	cfg.Redis = rds.url()
	cfg.RedisPrefix = "guard-hung:"
	cfg.RedisTimeout = redisTimeout
	base, s := startInProcess(t, cfg)
	c := herdClient(1)
	defer c.CloseIdleConnections()
	madeUp := func(i int) string { return fmt.Sprintf("%s/v1/tenants/acme/products/made-up-%d", base, i) }

	if code, _, _ := timedDo(t, c, "GET", madeUp(0), ""); code != http.StatusNotFound {
		t.Fatalf("made-up id with Redis up: %d, want 404", code)
	}
	rds.pause(t)
	i := 1
	for ; s.breaker.State() != flightcache.BreakerOpen; i++ {
		if i > 20 {
			t.Fatal("the shared breaker never opened while Redis hung")
		}
		code, body, took := timedDo(t, c, "GET", madeUp(i), "")
		if code != http.StatusNotFound {
			t.Fatalf("made-up id with Redis hung: %d %s, want 404", code, body)
		}
		if took > closedBound {
			t.Fatalf("made-up id with Redis hung, breaker closed, took %v; want at most %v", took, closedBound)
		}
		t.Logf("Redis hung, breaker %v: made-up id %v", s.breaker.State(), took)
	}
	var slowest time.Duration
	for j := range 20 {
		code, body, took := timedDo(t, c, "GET", madeUp(i+j), "")
		slowest = max(slowest, took)
		if code != http.StatusNotFound {
			t.Fatalf("made-up id with the breaker open: %d %s, want 404", code, body)
		}
		if took > openBound {
			t.Fatalf("made-up id with the breaker open took %v; want at most %v (no Redis call)", took, openBound)
		}
	}
	t.Logf("Redis hung, breaker open: slowest of 20 made-up ids %v", slowest)
	rds.resume(t)
}

// With Redis hung, a create cannot record the product in the
// recent-creations set: it is refused with 503 cache_unavailable and a
// Retry-After within one -redis-timeout (at once while the breaker is
// open), and its row is not inserted.
func TestCreateWithRedisHungIsRefusedWith503BeforeTheRowIsInserted(t *testing.T) {
	t.Parallel()
	rds := startPrivateRedis(t)
	const (
		redisTimeout = 50 * time.Millisecond
		slack        = 150 * time.Millisecond
		bound        = redisTimeout + slack
	)
	cfg := Default()
	cfg.DB = filepath.Join(t.TempDir(), "products.db")
	cfg.Catalog = &testCatalog
	cfg.Redis = rds.url()
	cfg.RedisPrefix = "create-hung:"
	cfg.RedisTimeout = redisTimeout
	base, s := startInProcess(t, cfg)
	c := herdClient(1)
	defer c.CloseIdleConnections()
	db, err := sql.Open("sqlite", cfg.DB)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	rds.pause(t)
	for i := range 8 { // past the breaker's five failures: refused at once
		id := fmt.Sprintf("new-%d", i)
		req, err := http.NewRequest("POST", base+"/v1/tenants/acme/products",
			strings.NewReader(fmt.Sprintf(`{"productId":%q,"displayName":"New","priceCents":100}`, id)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		var body httpapi.ErrorBody
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || body.Error.Code != "cache_unavailable" || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("POST with Redis hung: %d %q Retry-After %q; want 503 cache_unavailable with Retry-After",
				resp.StatusCode, body.Error.Code, resp.Header.Get("Retry-After"))
		}
		if took > bound {
			t.Fatalf("POST with Redis hung (breaker %v) took %v; want at most %v", s.breaker.State(), took, bound)
		}
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM products WHERE tenant_id = 'acme' AND product_id = ?`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("a create refused with 503 inserted %d rows", n)
		}
		t.Logf("Redis hung, breaker %v: POST refused in %v", s.breaker.State(), took)
	}
	if st := s.breaker.State(); st != flightcache.BreakerOpen {
		t.Fatalf("breaker %v after eight failed creates, want open", st)
	}
	rds.resume(t)
}
