package productd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// restartEmpty kills r and starts a new redis-server on its port, without
// data: a Redis restarted empty, or a failover to a replica that has
// nothing of the guard's keys.
func (r *privateRedis) restartEmpty(t *testing.T) *privateRedis {
	t.Helper()
	r.srv.Kill()
	r.srv.Start() // on the same port, without persistence: empty
	return r
}

// waitRedis waits until rdb answers a PING (its pool may hold connections
// to a server that is gone).
func waitRedis(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("redis did not answer within 10s")
		}
		time.Sleep(10 * time.Millisecond) // polling an external process
	}
}

// waitRebuilds waits until s's Bloom filter has been rebuilt n times.
func waitRebuilds(t *testing.T, s *Server, n uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s.guard.filter.Stats().Rebuilds < n {
		if time.Now().After(deadline) {
			t.Fatalf("the filter was rebuilt %d times within 30s, want %d", s.guard.filter.Stats().Rebuilds, n)
		}
		time.Sleep(10 * time.Millisecond) // the rebuild runs in the guard's goroutine
	}
}

// evictLocal drops everything s holds in memory, so that the next GET of
// any product goes through the guard.
func evictLocal(s *Server) {
	for k := range s.local.All() {
		s.local.Delete(k)
	}
}

// guardPair starts two instances on one PostgreSQL database and the
// private Redis rds; the filters are rebuilt on schedule once an hour only.
func guardPair(t *testing.T, rds *privateRedis, prefix string) (a, b string, sa, sb *Server) {
	t.Helper()
	dsn := testenv.PostgresDB(t)
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = dsn
	cfg.Catalog = &testCatalog
	cfg.Redis = rds.url()
	cfg.RedisPrefix = prefix
	cfg.RedisTimeout = sharedTimeoutUnderLoad
	cfg.BloomRebuild = time.Hour
	a, sa = startInProcess(t, cfg)
	b, sb = startInProcess(t, cfg)
	return a, b, sa, sb
}

func getProduct(t *testing.T, c *http.Client, base, id string) (int, string) {
	t.Helper()
	resp, err := c.Get(base + "/v1/tenants/acme/products/" + id)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Cache-Status")
}

func createProduct(t *testing.T, c *http.Client, base, id string) {
	t.Helper()
	body := fmt.Sprintf(`{"productId":%q,"displayName":"New","priceCents":100}`, id)
	resp, err := postJSON(c, base+"/v1/tenants/acme/products", body)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST %s: %d, want 201", id, resp.StatusCode)
	}
}

// Redis restarted empty loses the recent-creations set: B, whose filter
// predates products created on A, must not answer "filtered" for them.
// It sees the guard's epoch gone, lets what its filter rules out through
// to the origin, rebuilds its filter and then filters again.
func TestRecentSetLostWithRedisRestartedEmptyLetsNewProductsThrough(t *testing.T) {
	t.Parallel()
	rds := startPrivateRedis(t)
	a, b, _, sb := guardPair(t, rds, "guard-loss:")
	sb.guard.settle.Store(0) // the test creates nothing while B recovers
	c := herdClient(2)
	defer c.CloseIdleConnections()
	id := func(s string) string { return fmt.Sprintf("%s-%d", s, time.Now().UnixNano()) }

	served, other := id("served"), id("other")
	createProduct(t, c, a, served)
	createProduct(t, c, a, other)
	if code, cs := getProduct(t, c, b, served); code != http.StatusOK {
		t.Fatalf("B before the restart: %d (%s), want 200", code, cs)
	}
	rebuilds := sb.guard.filter.Stats().Rebuilds

	rds = rds.restartEmpty(t)
	waitRedis(t, sb.rdb)
	evictLocal(sb)
	if code, cs := getProduct(t, c, b, other); code != http.StatusOK {
		t.Fatalf("after Redis restarted empty, B answered %d (%s) for a product A created; want 200", code, cs)
	}
	if code, cs := getProduct(t, c, b, served); code != http.StatusOK {
		t.Fatalf("after Redis restarted empty, B answered %d (%s) for a product it had served; want 200", code, cs)
	}
	// The loss triggers a rebuild well before -bloom-rebuild (1h); the
	// rebuilt filter has both products from the database and rules made-up
	// ids out again.
	waitRebuilds(t, sb, rebuilds+1)
	// The periodic identity check, running after the rebuild, sees the
	// restarted server's identity; it must not take the same restart for a
	// new loss (a second rebuild, made-up ids let through meanwhile).
	checks := sb.guard.identityChecks.Load()
	for deadline := time.Now().Add(30 * time.Second); sb.guard.identityChecks.Load() < checks+2; {
		if time.Now().After(deadline) {
			t.Fatal("no identity check ran within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := sb.guard.filter.Stats().Rebuilds; n != rebuilds+1 {
		t.Fatalf("the filter was rebuilt %d times after one restart, want %d: the identity check took the restart for a second loss", n-rebuilds, 1)
	}
	evictLocal(sb)
	for _, p := range []string{other, served} {
		if code, cs := getProduct(t, c, b, p); code != http.StatusOK {
			t.Fatalf("after B's rebuild: %d (%s) for %s; want 200", code, cs, p)
		}
	}
	if code, cs := getProduct(t, c, b, id("made-up")); code != http.StatusNotFound || !strings.Contains(cs, "detail=filtered") {
		t.Fatalf("after B's rebuild, a made-up id answered %d (%s); want a filtered 404", code, cs)
	}
	// Creations after the loss are in the new set, which B trusts again.
	after := id("after")
	createProduct(t, c, a, after)
	if code, cs := getProduct(t, c, b, after); code != http.StatusOK {
		t.Fatalf("a product created on A after the recovery: B answered %d (%s); want 200", code, cs)
	}
}

// A failover to a replica that missed the ZADD leaves the epoch in place:
// undetectable by the epoch, so an id B has loaded from the origin is in
// B's filter for good and never filtered afterwards.
func TestProductServedBeforeIsNeverFilteredWhenItsCreationRecordIsLost(t *testing.T) {
	t.Parallel()
	rds := startPrivateRedis(t)
	a, b, _, sb := guardPair(t, rds, "guard-served:")
	c := herdClient(2)
	defer c.CloseIdleConnections()
	p := fmt.Sprintf("served-%d", time.Now().UnixNano())
	createProduct(t, c, a, p)
	if code, cs := getProduct(t, c, b, p); code != http.StatusOK {
		t.Fatalf("B: %d (%s), want 200", code, cs)
	}
	// What a replica that missed the ZADD answers: the set without it.
	if err := sb.rdb.ZRem(context.Background(), "guard-served:bloom:created:acme", p).Err(); err != nil {
		t.Fatal(err)
	}
	evictLocal(sb)
	if code, cs := getProduct(t, c, b, p); code != http.StatusOK {
		t.Fatalf("B answered %d (%s) for a product it had served before; want 200", code, cs)
	}
}

// With Redis paused or gone, the filter, built from the database, still
// rules out made-up ids: 2,000 of them cost at most 2 % origin queries
// (the filter's 1 % false positives), where a guard that gave up during
// Redis trouble cost one each. The trouble triggers an early rebuild, after
// which a product created on another instance before the trouble is found.
//
// The ids are asked by clients side by side, as a service's traffic
// comes: with Redis paused, each call costs -redis-timeout until
// redisBreakerFailures of them in a row have failed and the breaker
// opens, which one client alone would reach only after that many
// timeouts in turn.
func TestMadeUpIDsDuringRedisTroubleAreStillFiltered(t *testing.T) {
	t.Parallel()
	const ids, clients = 2000, 2 * redisBreakerFailures
	for _, fault := range []string{"paused", "killed"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			rds := startPrivateRedis(t)
			a, b, _, sb := guardPair(t, rds, "guard-trouble:")
			c := herdClient(clients)
			defer c.CloseIdleConnections()
			madeUp := func(i int) string { return fmt.Sprintf("made-up-%s-%d", fault, i) }
			count := func(from int) (int64, time.Duration) {
				q0, start := sb.OriginQueries(), time.Now()
				var wg sync.WaitGroup
				for w := range clients {
					wg.Go(func() {
						for i := w; i < ids; i += clients {
							if a := get(c, b+"/v1/tenants/acme/products/"+madeUp(from+i)); a.err != nil || a.status != http.StatusNotFound {
								t.Errorf("made-up id: %d (%s) %v, want 404", a.status, a.cache, a.err)
								return
							}
						}
					})
				}
				wg.Wait()
				if t.Failed() {
					t.FailNow()
				}
				return sb.OriginQueries() - q0, time.Since(start)
			}
			up, upTook := count(0)
			before := fmt.Sprintf("before-%d", time.Now().UnixNano())
			createProduct(t, c, a, before)
			rebuilds := sb.guard.filter.Stats().Rebuilds

			if fault == "paused" {
				rds.pause(t)
				t.Cleanup(func() { rds.resume(t) })
			} else {
				rds.kill()
			}
			down, downTook := count(ids)
			t.Logf("%d made-up ids: %d origin queries in %v with Redis up, %d in %v with Redis %s (breaker %v)",
				ids, up, upTook, down, downTook, fault, sb.breaker.State())
			if down > ids*2/100 {
				t.Fatalf("with Redis %s, %d made-up ids cost %d origin queries; want at most %d", fault, ids, down, ids*2/100)
			}
			waitRebuilds(t, sb, rebuilds+1)
			if code, cs := getProduct(t, c, b, before); code != http.StatusOK {
				t.Fatalf("after the early rebuild, B answered %d (%s) for a product A created before the trouble; want 200", code, cs)
			}
		})
	}
}

// Redis restarted from a snapshot older than a creation keeps the epoch
// but not the creation's record. B, whose filter predates the product,
// must notice the restart (the server's identity changed) and let the
// product through within a few seconds, not at its next -bloom-rebuild
// (an hour here).
func TestRecentSetLostWithRedisRestartedFromOlderSnapshotLetsNewProductsThrough(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t, "--dir", t.TempDir(), "--dbfilename", "dump.rdb")
	rds := &privateRedis{srv: srv, addr: srv.Addr}
	a, b, sa, sb := guardPair(t, rds, "guard-snapshot:")
	c := herdClient(2)
	defer c.CloseIdleConnections()
	id := func(s string) string { return fmt.Sprintf("%s-%d", s, time.Now().UnixNano()) }

	// The snapshot holds the epoch and an older creation.
	createProduct(t, c, a, id("older"))
	if err := sa.rdb.Save(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	p := id("after-snapshot")
	createProduct(t, c, a, p)
	rds.srv.Kill()
	rds.srv.Start() // loads dump.rdb: the epoch survives, p's record does not
	waitRedis(t, sb.rdb)
	if n, err := sb.rdb.ZScore(context.Background(), "guard-snapshot:bloom:created:acme", p).Result(); err != redis.Nil {
		t.Fatalf("the restarted Redis still has p's record (%v, %v): the test injects nothing", n, err)
	}

	start := time.Now()
	deadline := start.Add(15 * time.Second)
	for {
		evictLocal(sb)
		code, cs := getProduct(t, c, b, p)
		if code == http.StatusOK {
			t.Logf("B served the product %v after the restart", time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after Redis restarted from an older snapshot, B still answered %d (%s) for a product A created; want 200", code, cs)
		}
		time.Sleep(50 * time.Millisecond) // polling the server under test from outside
	}
}
