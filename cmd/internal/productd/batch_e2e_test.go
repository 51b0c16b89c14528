package productd

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/httpapi"
	"github.com/flightcache/flightcache/internal/testenv"
)

const (
	batchRequests = 50  // concurrent cold batch requests
	batchSize     = 100 // ids per request
	batchPool     = 200 // distinct ids they are drawn from
)

// batchHerd fires batchRequests concurrent GETs of batchSize ids each,
// drawn from a pool of batchPool ids, released together, and checks every
// answer. It returns the distinct ids asked for.
func batchHerd(t *testing.T, p *process) map[string]bool {
	t.Helper()
	c := herdClient(batchRequests)
	defer c.CloseIdleConnections()
	warmConnections(t, c, p.url, batchRequests)
	rng := rand.New(rand.NewPCG(1, 2))
	asked := map[string]bool{}
	targets := make([]string, batchRequests)
	for i := range targets {
		perm := rng.Perm(batchPool)[:batchSize]
		ids := make([]string, batchSize)
		for j, n := range perm {
			ids[j] = fmt.Sprintf("p-%05d", n+1)
			asked[ids[j]] = true
		}
		targets[i] = p.url + "/v1/tenants/acme/products?locale=de-DE&currency=EUR&ids=" + strings.Join(ids, ",")
	}
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		mu       sync.Mutex
		failures []string
	)
	for _, target := range targets {
		wg.Go(func() {
			<-start
			resp, err := c.Get(target)
			if err != nil {
				mu.Lock()
				failures = append(failures, err.Error())
				mu.Unlock()
				return
			}
			defer resp.Body.Close()
			var body httpapi.ListBody
			err = json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != http.StatusOK || err != nil || len(body.Products) != batchSize || len(body.Missing) != 0 {
				mu.Lock()
				failures = append(failures, fmt.Sprintf("status %d, %d products, %d missing, %v", resp.StatusCode, len(body.Products), len(body.Missing), err))
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d batch requests failed, first: %s", len(failures), failures[0])
	}
	return asked
}

// herdLoaderTimeout is the batch herd's -loader-timeout. The herd is
// about counting queries, not about timeouts: with two test suites beside
// each other on two cores, one chunk's PostgreSQL query has run past the
// 5s default, and every request of the herd shared its failure.
const herdLoaderTimeout = "30s"

func TestEndToEndBatchHerdLoadsEachIDOnceSQLite(t *testing.T) {
	t.Parallel()
	p := startProductd(t, "-db", filepath.Join(t.TempDir(), "products.db"), "-origin-latency", "100ms", "-loader-timeout", herdLoaderTimeout)
	asked := batchHerd(t, p)
	c := herdClient(1)
	defer c.CloseIdleConnections()
	queries := metric(t, c, p.url, OriginQueriesMetric)
	rows := metric(t, c, p.url, OriginRowsMetric)
	if rows != float64(len(asked)) || queries > batchRequests {
		t.Fatalf("%d cold batches over %d ids: %v origin queries for %v rows; want each id once and at most %d queries",
			batchRequests, len(asked), queries, rows, batchRequests)
	}
	t.Logf("%d batches of %d ids over %d distinct ids: %v origin queries, %v rows", batchRequests, batchSize, len(asked), queries, rows)
	p.stop(t)
}

// pgCounters are PostgreSQL's own statistics of one database: committed
// transactions and sessions (pg_stat_database), and the scans of the
// products table (pg_stat_user_tables).
type pgCounters struct {
	// commits and sessions before this reading's own session; next* after
	// it, the baseline of the next window.
	commits, sessions           int64
	nextCommits, nextSessions   int64
	idxScans, idxRows, seqScans int64
}

// readPGCounters waits until no session is connected to db (a backend
// writes its statistics when it exits), then reads the counters. The
// per-table ones need a session in db itself, whose own commit and
// session are kept out of the window that ends here (commits, sessions)
// and of the next one (nextCommits, nextSessions).
func readPGCounters(t *testing.T, db, dsn string) pgCounters {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := sql.Open("pgx", testenv.PostgresAdminDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	admin.SetMaxOpenConns(1)
	idle := func() {
		for {
			var n int
			if err := admin.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, db).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("sessions of %s still open: %v", db, ctx.Err())
			case <-time.After(20 * time.Millisecond): // polling the server's own bookkeeping
			}
		}
	}
	dbStats := func() (commits, sessions int64) {
		// A fresh snapshot: without it, a session reuses its first one.
		if _, err := admin.ExecContext(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
			t.Fatal(err)
		}
		if err := admin.QueryRowContext(ctx, `SELECT xact_commit, sessions FROM pg_stat_database WHERE datname = $1`, db).Scan(&commits, &sessions); err != nil {
			t.Fatal(err)
		}
		return commits, sessions
	}
	idle()
	var pc pgCounters
	pc.commits, pc.sessions = dbStats()
	own, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	err = own.QueryRowContext(ctx, `SELECT coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0), seq_scan FROM pg_stat_user_tables WHERE relname = 'products'`).
		Scan(&pc.idxScans, &pc.idxRows, &pc.seqScans)
	own.Close()
	if err != nil {
		t.Fatal(err)
	}
	idle()
	pc.nextCommits, pc.nextSessions = dbStats()
	return pc
}

// window is what PostgreSQL counted between two readings: statements (the
// transactions committed, less one per session for its start) and the
// index scans, rows fetched by them and sequential scans of products.
type window struct{ statements, idxScans, idxRows, seqScans, sessions int64 }

func between(a, b pgCounters) window {
	return window{
		statements: (b.commits - a.nextCommits) - (b.sessions - a.nextSessions),
		idxScans:   b.idxScans - a.idxScans,
		idxRows:    b.idxRows - a.idxRows,
		seqScans:   b.seqScans - a.seqScans,
		sessions:   b.sessions - a.nextSessions,
	}
}

// TestEndToEndBatchHerdLoadsEachIDOncePostgres counts with PostgreSQL's
// own statistics: the herd runs on a server started on a seeded database,
// and what a server costs by merely starting and stopping (measured on its
// own just before) is taken out.
func TestEndToEndBatchHerdLoadsEachIDOncePostgres(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDB(t)
	db := dsn[strings.LastIndexByte(dsn, '/')+1 : strings.IndexByte(dsn, '?')]
	args := []string{"-db", dsn, "-origin-latency", "100ms", "-loader-timeout", herdLoaderTimeout}
	startProductd(t, args...).stop(t) // migrate and seed
	c0 := readPGCounters(t, db, dsn)
	startProductd(t, args...).stop(t) // start and stop only
	c1 := readPGCounters(t, db, dsn)
	p := startProductd(t, args...)
	asked := batchHerd(t, p)
	c := herdClient(1)
	defer c.CloseIdleConnections()
	served := metric(t, c, p.url, OriginQueriesMetric)
	p.stop(t)
	c2 := readPGCounters(t, db, dsn)

	idle, herd := between(c0, c1), between(c1, c2)
	got := window{herd.statements - idle.statements, herd.idxScans - idle.idxScans, herd.idxRows - idle.idxRows, herd.seqScans - idle.seqScans, herd.sessions}
	t.Logf("PostgreSQL counted for %d cold batches of %d ids over %d distinct ids: %d statements, %d index scans fetching %d rows, %d sequential scans over %d sessions (a bare start and stop: %+v); the service counted %v origin queries",
		batchRequests, batchSize, len(asked), got.statements, got.idxScans, got.idxRows, got.seqScans, got.sessions, idle, served)
	// Rows: the index probes and the rows they fetched are the origin's
	// own count of what it read, and each id must be read exactly once.
	if got.idxRows != int64(len(asked)) || got.idxScans != int64(len(asked)) || got.seqScans != 0 {
		t.Errorf("the database probed its index %d times and fetched %d product rows (%d sequential scans) for %d distinct ids, want each id exactly once",
			got.idxScans, got.idxRows, got.seqScans, len(asked))
	}
	// Statements: PostgreSQL counts transactions, which include the
	// driver's own round trips (pgx prepares a statement once per
	// connection and pings a connection it reuses after a second), so its
	// count bounds the service's from above and the service's own counter,
	// incremented right before each statement, is the exact one.
	if served < 1 || served > batchRequests {
		t.Errorf("the service sent %v origin statements for %d batches, want between 1 and %d", served, batchRequests, batchRequests)
	}
	if float64(got.statements) < served {
		t.Errorf("the database saw %d transactions but the service counted %v statements", got.statements, served)
	}
}

// Three productd processes in cluster mode answer concurrent cold batch
// requests for the same 20 products: each product is read from the origin
// once in the whole cluster (the batches claim their keys' leases
// together and wait for the ones another process loads), and what they
// load fills Redis: a fourth process answers the same batch without an
// origin row.
func TestClusterBatchesOnThreeInstancesLoadEachProductOnceAndFillRedis(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDB(t)
	args := []string{"-db", dsn, "-redis", sharedRedisURL(t), "-redis-prefix", testenv.UniqueName("productd-cbatch-") + ":",
		"-seed-products", "20", "-failure-throttle", "0", "-redis-timeout", "10s", steadyBus[0], steadyBus[1], "-origin-latency", "100ms",
		"-lease-ttl", "15s", "-loader-timeout", herdLoaderTimeout}
	for _, p := range startInstances(t, 1, args...) { // migrate and seed
		p.stop(t)
	}
	ps := startInstances(t, 3, args...)
	c := herdClient(3 * 4)
	defer c.CloseIdleConnections()
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("p-%05d", i+1)
	}
	path := "/v1/tenants/acme/products?locale=de-DE&currency=EUR&ids=" + strings.Join(ids, ",")
	get := func(p *process) error {
		resp, err := c.Get(p.url + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var body httpapi.ListBody
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK || len(body.Products) != len(ids) || len(body.Missing) != 0 {
			return fmt.Errorf("status %d, %d products, %d missing", resp.StatusCode, len(body.Products), len(body.Missing))
		}
		return nil
	}
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make(chan error, 3*4)
	)
	for i := range 3 * 4 {
		wg.Go(func() {
			<-start
			if err := get(ps[i%3]); err != nil {
				errs <- err
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a batch request failed: %v", err)
	}
	if rows := sumMetric(t, c, ps, OriginRowsMetric); rows != float64(len(ids)) {
		t.Fatalf("3 instances batching the same %d products: %v origin rows, want each product once", len(ids), rows)
	}
	fourth := startInstances(t, 1, args...)
	if err := get(fourth[0]); err != nil {
		t.Fatal(err)
	}
	if rows := metric(t, c, fourth[0].url, OriginRowsMetric); rows != 0 {
		t.Fatalf("a fourth instance read %v origin rows for the batch, want 0: the first three filled Redis", rows)
	}
	for _, p := range append(ps, fourth...) {
		p.stop(t)
	}
}
