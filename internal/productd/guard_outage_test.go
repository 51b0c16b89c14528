package productd

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
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
