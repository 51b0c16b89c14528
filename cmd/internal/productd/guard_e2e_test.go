package productd

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// productScans is PostgreSQL's own count of reads of the products table
// (sequential plus index scans; every origin lookup is one index scan), as
// the statistics system has it.
func productScans(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var n int64
	err := db.QueryRow(`SELECT COALESCE(seq_scan, 0) + COALESCE(idx_scan, 0) FROM pg_stat_user_tables WHERE relname = 'products'`).Scan(&n)
	if err != nil {
		t.Fatalf("read pg_stat_user_tables: %v", err)
	}
	return n
}

// settledProductScans waits until every other connection to the database
// has closed (a backend reports its statistics when it exits) and the count
// stops moving, then returns it.
func settledProductScans(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var others int
		if err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&others); err != nil {
			t.Fatal(err)
		}
		if others == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections to the test database still open", others)
		}
		time.Sleep(20 * time.Millisecond)
	}
	last := productScans(t, db)
	for {
		if _, err := db.Exec(`SELECT pg_stat_clear_snapshot()`); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		n := productScans(t, db)
		if n == last {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the scan count of products never settled (last %d, now %d)", last, n)
		}
		last = n
	}
}

// 5,000 random product ids that do not exist, for a tenant that does: the
// guard answers them without the origin. PostgreSQL counts the reads of
// the products table over the whole life of the instance that served them
// (startup and the filter's build included) and they must stay within 2 %
// of the requests; every request must answer 404.
func TestEndToEndRandomMissingIDsCostAtMostTwoPercentOriginQueries(t *testing.T) {
	t.Parallel()
	const requests = 5000
	dsn := testenv.PostgresDB(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })

	// The first run seeds the catalog; its reads are not counted.
	seeder := startProductd(t, "-db", dsn)
	seeder.stop(t)
	before := settledProductScans(t, db)

	p := startProductd(t, "-db", dsn, "-bloom-rebuild", "1h")
	c := herdClient(32)
	defer c.CloseIdleConnections()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13))
	ids := make(chan string, requests)
	for range requests {
		ids <- fmt.Sprintf("x-%016x", r.Uint64())
	}
	close(ids)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		status = map[int]int{}
		detail = map[string]int{}
	)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				resp, err := c.Get(p.url + "/v1/tenants/acme/products/" + id)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				cs := resp.Header.Get("Cache-Status")
				mu.Lock()
				status[resp.StatusCode]++
				detail[cs[strings.LastIndex(cs, "detail=")+len("detail="):]]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	appQueries := metric(t, c, p.url, OriginQueriesMetric)
	filtered := metric(t, c, p.url, `flightcache_filtered_total{operation="product"}`)
	p.stop(t)
	scans := settledProductScans(t, db) - before

	if status[http.StatusNotFound] != requests {
		t.Fatalf("statuses %v: want %d × 404", status, requests)
	}
	if limit := int64(requests * 2 / 100); scans > limit {
		t.Fatalf("PostgreSQL counted %d reads of products for %d missing ids (app counted %v origin queries, %v filtered); want at most %d",
			scans, requests, appQueries, filtered, limit)
	}
	t.Logf("%d random missing ids: %d reads of products counted by PostgreSQL (startup included), %v origin lookups, %v filtered; Cache-Status details %v",
		requests, scans, appQueries, filtered, detail)
}

// A product created on instance A is found on instance B as soon as A has
// acknowledged it, although B's filter was built before it existed: B
// finds the creation in the recent-creations set in Redis.
func TestEndToEndProductCreatedOnOneInstanceIsFoundOnAnotherAtOnce(t *testing.T) {
	t.Parallel()
	redisAddr := testenv.RequireRedis(t)
	dsn := testenv.PostgresDB(t)
	prefix := testenv.UniqueName("productd-bloom-test-") + ":"
	// A recent-creations lookup that times out answers "maybe" (never a
	// false 404): on a machine running every end-to-end test at once, the
	// default -redis-timeout would turn "filtered" into "loaded" now and
	// then, which is not what this test is about.
	args := []string{"-db", dsn, "-redis", "redis://" + redisAddr + "/0", "-redis-prefix", prefix, "-bloom-rebuild", "1h",
		"-redis-timeout", redisTimeoutUnderLoad}
	t.Cleanup(func() {
		cleanRedisPrefix(t, redisAddr, prefix)
	})
	a := startProductd(t, args...)
	b := startProductd(t, args...)
	c := herdClient(2)
	defer c.CloseIdleConnections()

	get := func(base, id string) (int, string) {
		resp, err := c.Get(base + "/v1/tenants/acme/products/" + id)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Cache-Status")
	}
	for i := range 20 {
		id := fmt.Sprintf("fresh-%d-%d", time.Now().UnixNano(), i)
		if code, cs := get(b.url, id); code != http.StatusNotFound || !strings.Contains(cs, "detail=filtered") {
			t.Fatalf("before the create, B answered %d (%s); want a filtered 404", code, cs)
		}
		body := fmt.Sprintf(`{"productId":%q,"displayName":"Fresh","priceCents":100}`, id)
		resp, err := postJSON(c, a.url+"/v1/tenants/acme/products", body)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST on A: %d", resp.StatusCode)
		}
		if code, cs := get(b.url, id); code != http.StatusOK {
			t.Fatalf("right after A acknowledged the create, B answered %d (%s); want 200", code, cs)
		}
		if code, _ := get(a.url, id); code != http.StatusOK {
			t.Fatalf("A answered %d for the product it created", code)
		}
	}
	if code, cs := get(b.url, "never-created"); code != http.StatusNotFound || !strings.Contains(cs, "detail=filtered") {
		t.Fatalf("B answered %d (%s) for a product nobody created; want a filtered 404", code, cs)
	}
	a.stop(t)
	b.stop(t)
}

// cleanRedisPrefix deletes the keys a test wrote under its own prefix,
// within a bound that a loaded host and a busy shared Redis still meet.
func cleanRedisPrefix(t *testing.T, addr, prefix string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
			t.Errorf("clean up %d-byte key: %v", len(iter.Val()), err)
		}
	}
	if err := iter.Err(); err != nil {
		t.Errorf("clean up: %v", err)
	}
}

// A product created on instance A is found on instance B at once even when
// B had cached a "not found" for it before the create (B's filter said
// "maybe": here it is saturated, as with a false positive): B checks its
// cached "not found" against the recent-creations set, drops it and loads
// the product. A "not found" of an id nobody created stays cached.
func TestEndToEndNotFoundCachedBeforeACreateElsewhereIsDroppedAtOnce(t *testing.T) {
	t.Parallel()
	redisAddr := testenv.RequireRedis(t)
	dsn := testenv.PostgresDB(t)
	prefix := testenv.UniqueName("productd-created-elsewhere-") + ":"
	t.Cleanup(func() {
		cleanRedisPrefix(t, redisAddr, prefix)
	})
	args := []string{"-db", dsn, "-seed-products", "50", "-redis", "redis://" + redisAddr + "/0", "-redis-prefix", prefix,
		"-bloom-rebuild", "1h", "-negative-ttl", "5m", "-redis-timeout", redisTimeoutUnderLoad}
	a := startProductd(t, args...)
	// A filter sized for one id at 50 %, filled with the catalog: every
	// id is "maybe", so B caches the "not found" it loads.
	b := startProductd(t, append(args, "-bloom-expected", "1", "-bloom-fp-rate", "0.5")...)
	c := herdClient(2)
	defer c.CloseIdleConnections()
	get := func(base, id string) (int, string, time.Duration) {
		start := time.Now()
		resp, err := c.Get(base + "/v1/tenants/acme/products/" + id)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Cache-Status"), time.Since(start)
	}
	for i := range 5 {
		id := fmt.Sprintf("later-%d-%d", time.Now().UnixNano(), i)
		if code, cs, _ := get(b.url, id); code != http.StatusNotFound || !strings.Contains(cs, "stored") || !strings.Contains(cs, "detail=not-found") {
			t.Fatalf("before the create, B answered %d (%s); want a 404 it stored", code, cs)
		}
		if code, cs, _ := get(b.url, id); code != http.StatusNotFound || !strings.Contains(cs, "hit") {
			t.Fatalf("before the create, B's second answer %d (%s); want a cached 404", code, cs)
		}
		body := fmt.Sprintf(`{"productId":%q,"displayName":"Later","priceCents":100}`, id)
		resp, err := postJSON(c, a.url+"/v1/tenants/acme/products", body)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST on A: %d", resp.StatusCode)
		}
		if code, cs, _ := get(b.url, id); code != http.StatusOK {
			t.Fatalf("right after A acknowledged the create, B answered %d (%s); want 200", code, cs)
		}
	}
	id := fmt.Sprintf("never-%d", time.Now().UnixNano())
	get(b.url, id)
	var slowest time.Duration
	for range 20 {
		code, cs, took := get(b.url, id)
		if code != http.StatusNotFound || !strings.Contains(cs, "hit") {
			t.Fatalf("B answered %d (%s) for a product nobody created; want a cached 404", code, cs)
		}
		slowest = max(slowest, took)
	}
	t.Logf("cached 404 on B, checked against Redis: slowest of 20 %v", slowest)
	a.stop(t)
	b.stop(t)
}
