package productd

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/httpapi"
	"github.com/flightcache/flightcache/driver"
	"github.com/redis/go-redis/v9"
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
		// Far shorter than go-redis' and productd's own backstop
		// (redisIOTimeout, 500ms), so that a call the -redis-timeout does
		// not bound shows.
		redisTimeout = 50 * time.Millisecond
		// The guard's ZSCORE, then the Cache's shared read, each bounded
		// by -redis-timeout: 100ms. A call left to the backstop makes it
		// 550ms or more; the rest is room for a loaded machine.
		closedBound = redisIOTimeout + redisTimeout
	)
	cfg := Default()
	cfg.WriteToken = testWriteToken
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
	zscores := &commandCounter{name: "zscore"}
	s.rdb.AddHook(zscores)
	rds.pause(t)
	i := 1
	for ; s.breaker.State() != driver.BreakerOpen; i++ {
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
	// With the breaker open nothing waits for Redis: the guard does not
	// even send its lookup (counted on the real client as it is sent; a
	// time bound could not tell one -redis-timeout from a loaded
	// machine's stall).
	if zscores.n.Load() == 0 {
		t.Fatal("no ZSCORE was sent while the breaker was closed: the count below would prove nothing")
	}
	zscores.n.Store(0)
	var slowest time.Duration
	for j := range 20 {
		code, body, took := timedDo(t, c, "GET", madeUp(i+j), "")
		slowest = max(slowest, took)
		if code != http.StatusNotFound {
			t.Fatalf("made-up id with the breaker open: %d %s, want 404", code, body)
		}
	}
	if n := zscores.n.Load(); n != 0 || s.breaker.State() != driver.BreakerOpen {
		t.Fatalf("with the breaker open (now %v), 20 made-up ids sent %d recent-creations lookups to Redis, want 0", s.breaker.State(), n)
	}
	t.Logf("Redis hung, breaker open: 20 made-up ids, no lookup sent, slowest %v", slowest)
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
		// One ZADD bounded by -redis-timeout (nothing while the breaker
		// is open); a call left to go-redis' backstop (redisIOTimeout,
		// 500ms) would take at least that. The median refusal must stay
		// under it; a single one may take longer on a loaded machine,
		// but none hangs.
		typical = redisIOTimeout
		bound   = 4 * redisIOTimeout
	)
	var took []time.Duration
	cfg := Default()
	cfg.WriteToken = testWriteToken
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
	fails := redisBreakerFailures + 3
	for i := range fails { // past the breaker's failures: refused at once
		id := fmt.Sprintf("new-%d", i)
		req, err := http.NewRequest("POST", base+"/v1/tenants/acme/products",
			strings.NewReader(fmt.Sprintf(`{"productId":%q,"displayName":"New","priceCents":100}`, id)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		authorize(req)
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		took = append(took, d)
		var body httpapi.ErrorBody
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || body.Error.Code != "cache_unavailable" || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("POST with Redis hung: %d %q Retry-After %q; want 503 cache_unavailable with Retry-After",
				resp.StatusCode, body.Error.Code, resp.Header.Get("Retry-After"))
		}
		if d > bound {
			t.Fatalf("POST with Redis hung (breaker %v) took %v; want at most %v", s.breaker.State(), d, bound)
		}
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM products WHERE tenant_id = 'acme' AND product_id = ?`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("a create refused with 503 inserted %d rows", n)
		}
		t.Logf("Redis hung, breaker %v: POST refused in %v", s.breaker.State(), d)
	}
	if st := s.breaker.State(); st != driver.BreakerOpen {
		t.Fatalf("breaker %v after %d failed creates, want open", st, fails)
	}
	slices.Sort(took)
	if median := took[len(took)/2]; median >= typical {
		t.Fatalf("the median POST with Redis hung took %v (all: %v); want under %v, the backstop a call without -redis-timeout would wait for", median, took, typical)
	}
	rds.resume(t)
}

// commandCounter counts the commands named name that a go-redis client
// sends (a hook on the real client, which still sends them).
type commandCounter struct {
	name string
	n    atomic.Int64
}

func (h *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == h.name {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if cmd.Name() == h.name {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}
