package productd

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
)

// Cluster mode end to end: productd instances as real OS processes sharing
// one PostgreSQL database and one Redis, the property being about
// processes (one origin load per key across all of them).

// Metric samples the cluster tests read from /metrics.
const (
	fencedMetric    = `flightcache_cluster_fenced_writes_rejected_total{operation="product"}`
	takenOverMetric = `flightcache_cluster_leases_total{event="taken_over",operation="product"}`
	acquiredMetric  = `flightcache_cluster_leases_total{event="acquired",operation="product"}`
)

// startInstances starts n productd processes on one database and one Redis
// with args. The first one migrates and seeds the database alone, so the
// others find it ready.
func startInstances(t *testing.T, n int, args ...string) []*process {
	t.Helper()
	ps := make([]*process, n)
	for i := range ps {
		ps[i] = startProductd(t, args...)
	}
	if slices.Contains(args, "-redis") && !slices.Contains(args, "naive") {
		// The bus resynchronises each instance's memory tier when it
		// first comes up: a test starts from there, not in the middle.
		for _, p := range ps {
			waitBus(t, p.url, "up", 20*time.Second)
		}
	}
	return ps
}

// steadyBus keeps the invalidation bus of the coalescing tests up on a
// machine so busy that a heartbeat can come back late: going down and up
// again would empty the instances' memory tiers mid-test, which those
// tests are not about (the bus tests use their own values).
var steadyBus = []string{"-bus-down-after", "10s"}

// clusterArgs are the flags every instance of a cluster test gets: a
// fresh database, the shared Redis under a prefix of the test's own, a
// small catalog.
func clusterArgs(t *testing.T, redisURL string, extra ...string) []string {
	t.Helper()
	return append([]string{"-db", testenv.PostgresDB(t), "-redis", redisURL,
		"-redis-prefix", testenv.UniqueName("productd-cluster-") + ":", "-seed-products", "20",
		"-failure-throttle", "0", "-redis-timeout", redisTimeoutUnderLoad, steadyBus[0], steadyBus[1]}, extra...)
}

// sharedTimeoutUnderLoad is the -redis-timeout of the tests that are about
// what Redis shares (values, coalescing), not about timeouts: on a busy
// 2-core machine running every end-to-end test at once (twice, with a
// second test suite beside it) a Redis round trip can take longer than
// the 250ms default, and has taken over 2s. A Get whose shared read timed
// out rightly skips the coordinator (on the same Redis), and a load whose
// write-back timed out rightly leaves the other instances nothing to
// share, which would turn a herd test into a timeout test.
const sharedTimeoutUnderLoad = 5 * time.Second

// redisTimeoutUnderLoad is sharedTimeoutUnderLoad as the flag's value.
var redisTimeoutUnderLoad = sharedTimeoutUnderLoad.String()

func sharedRedisURL(t *testing.T) string {
	return "redis://" + testenv.RequireRedis(t) + "/0"
}

// sumMetric adds sample over every instance still running.
func sumMetric(t *testing.T, c *http.Client, ps []*process, sample string) float64 {
	t.Helper()
	var sum float64
	for _, p := range ps {
		sum += metric(t, c, p.url, sample)
	}
	return sum
}

// answer is one response of a herd.
type answer struct {
	status int
	body   string
	cache  string // Cache-Status
	err    error
	took   time.Duration
}

// spreadHerd fires n GETs of path, released together, spread round-robin
// over ps, and returns every answer.
func spreadHerd(t *testing.T, c *http.Client, ps []*process, n int, path string) []answer {
	t.Helper()
	for _, p := range ps {
		warmConnections(t, c, p.url, n/len(ps)+1)
	}
	out := make([]answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = get(c, ps[i%len(ps)].url+path)
		}()
	}
	close(start)
	wg.Wait()
	return out
}

func get(c *http.Client, url string) answer {
	begin := time.Now()
	resp, err := c.Get(url)
	if err != nil {
		return answer{err: err, took: time.Since(begin)}
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return answer{status: resp.StatusCode, body: string(b), cache: resp.Header.Get("Cache-Status"), err: err, took: time.Since(begin)}
}

// cacheKinds counts answers by Cache-Status without the ttl.
func cacheKinds(as []answer) map[string]int {
	m := map[string]int{}
	for _, a := range as {
		k := a.cache
		if i := strings.Index(k, "; ttl="); i >= 0 {
			rest := k[i+len("; ttl="):]
			if j := strings.Index(rest, ";"); j >= 0 {
				k = k[:i] + rest[j:]
			} else {
				k = k[:i]
			}
		}
		m[k]++
	}
	return m
}

// requireOneBody fails unless every answer is a 200 with the same body.
func requireOneBody(t *testing.T, as []answer) string {
	t.Helper()
	bodies := map[string]int{}
	for _, a := range as {
		if a.err != nil {
			t.Fatalf("a request failed: %v", a.err)
		}
		bodies[fmt.Sprintf("%d %s", a.status, a.body)]++
	}
	if len(bodies) != 1 {
		t.Fatalf("%d different answers: %v", len(bodies), bodies)
	}
	for b := range bodies {
		if !strings.HasPrefix(b, "200 ") {
			t.Fatalf("answer %s", b)
		}
		return b
	}
	return ""
}

func readyz(t *testing.T, c *http.Client, p *process) string {
	t.Helper()
	a := get(c, p.url+"/readyz")
	if a.err != nil {
		t.Fatal(a.err)
	}
	var body struct {
		Coalescing string `json:"coalescing"`
	}
	if err := json.Unmarshal([]byte(a.body), &body); err != nil {
		t.Fatalf("/readyz: %v: %s", err, a.body)
	}
	return body.Coalescing
}

const herdPath = "/v1/tenants/globex/products/p-00007?locale=fr-FR&currency=GBP"

// herdSize is the eight-instance herds' request count: a thousand cold
// requests at once, as many as the headline promise names, and half what
// these tests once sent, which on a 2-core machine running a second test
// suite starved every instance's Redis calls past their timeout.
const herdSize = 1000

// The origin queries are counted twice: by the instances (summed over
// their /metrics) and by PostgreSQL itself (the product-row index lookups
// of pg_stat_user_tables, less what eight bare starts and stops cost).
func TestClusterHerdOnEightInstancesMakesOneOriginQuery(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDB(t)
	db := dsn[strings.LastIndexByte(dsn, '/')+1 : strings.IndexByte(dsn, '?')]
	args := []string{"-db", dsn, "-redis", sharedRedisURL(t), "-redis-prefix", testenv.UniqueName("productd-cluster-") + ":",
		// The longest -redis-timeout there is: eight race-built instances
		// answering a herd beside another test suite on 2 cores have seen
		// every Redis call of the herd time out at 5s at once, and an
		// instance whose shared read timed out rightly loads on its own
		// (that is the degraded mode, tested elsewhere).
		"-seed-products", "20", "-failure-throttle", "0", "-redis-timeout", "10s", steadyBus[0], steadyBus[1], "-origin-latency", "200ms",
		// A lease that outlives any heartbeat delay on a busy machine: a
		// takeover would be a second origin query, and this test is about
		// coalescing (the takeover tests have their own).
		"-lease-ttl", "15s"}
	c := herdClient(herdSize)
	defer c.CloseIdleConnections()
	stopAll := func(ps []*process) {
		for _, p := range ps {
			p.stop(t)
		}
	}
	stopAll(startInstances(t, 1, args...)) // migrate and seed
	c0 := readPGCounters(t, db, dsn)
	ps := startInstances(t, 8, args...)
	readyz(t, c, ps[0])
	stopAll(ps) // what eight instances cost by starting, one /readyz and stopping
	c1 := readPGCounters(t, db, dsn)

	ps = startInstances(t, 8, args...)
	if got := readyz(t, c, ps[0]); got != "cluster" {
		t.Fatalf("/readyz coalescing %q, want cluster", got)
	}
	as := spreadHerd(t, c, ps, herdSize, herdPath)
	requireOneBody(t, as)
	kinds := cacheKinds(as)
	if q := sumMetric(t, c, ps, OriginQueriesMetric); q != 1 {
		t.Fatalf("8 instances, %d concurrent requests in cluster mode: %v origin queries, want 1 (Cache-Status: %v)", herdSize, q, kinds)
	}
	if kinds["flightcache; fwd=miss; stored"] != 1 || kinds["flightcache; fwd=miss; collapsed; detail=coalesced-cluster"] == 0 {
		t.Fatalf("Cache-Status counts %v: want one stored miss and some coalesced-cluster answers", kinds)
	}
	stopAll(ps)
	c2 := readPGCounters(t, db, dsn)
	idle, herd := between(c0, c1), between(c1, c2)
	if scans, rows := herd.idxScans-idle.idxScans, herd.idxRows-idle.idxRows; scans != 1 || rows != 1 {
		t.Fatalf("PostgreSQL counted %d index lookups fetching %d product rows for the herd, want 1 and 1", scans, rows)
	}
	t.Logf("cluster mode: %d requests on 8 instances, 1 origin query (PostgreSQL agrees); Cache-Status: %v", herdSize, kinds)
}

func TestLocalHerdOnEightInstancesMakesAtMostOneOriginQueryPerInstance(t *testing.T) {
	t.Parallel()
	ps := startInstances(t, 8, clusterArgs(t, sharedRedisURL(t), "-origin-latency", "200ms", "-coalesce", "local")...)
	c := herdClient(herdSize)
	defer c.CloseIdleConnections()
	if got := readyz(t, c, ps[0]); got != "local" {
		t.Fatalf("/readyz coalescing %q, want local", got)
	}
	as := spreadHerd(t, c, ps, herdSize, herdPath)
	requireOneBody(t, as)
	kinds := cacheKinds(as)
	q := sumMetric(t, c, ps, OriginQueriesMetric)
	if q < 1 || q > 8 {
		t.Fatalf("8 instances, %d concurrent requests in local mode: %v origin queries, want 1 to 8 (Cache-Status: %v)", herdSize, q, kinds)
	}
	if kinds["flightcache; fwd=miss; collapsed; detail=coalesced-cluster"] != 0 {
		t.Fatalf("local mode answered coalesced-cluster: %v", kinds)
	}
	t.Logf("local mode: %d requests on 8 instances, %v origin queries; Cache-Status: %v", herdSize, q, kinds)
}

// waitForLeader returns the index of the instance whose origin query for
// the key has started (its counter moved), polling every instance.
func waitForLeader(t *testing.T, c *http.Client, ps []*process, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for i, p := range ps {
			if metric(t, c, p.url, OriginQueriesMetric) > 0 {
				return i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no instance reached the origin within %v", within)
		}
		time.Sleep(2 * time.Millisecond) // polling other processes' metrics
	}
}

// herdInBackground sends n GETs of path spread over ps, and delivers the
// answers when all are in.
func herdInBackground(c *http.Client, ps []*process, n int, path string) <-chan []answer {
	done := make(chan []answer, 1)
	go func() {
		out := make([]answer, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[i] = get(c, ps[i%len(ps)].url+path)
			}()
		}
		wg.Wait()
		done <- out
	}()
	return done
}

func without(ps []*process, i int) []*process {
	return append(append([]*process(nil), ps[:i]...), ps[i+1:]...)
}

// killLeaderMidLoad sends n GETs of herdPath spread over ps, and SIGKILLs
// the instance whose origin query starts first while it loads. It returns
// that instance's index, when it was killed, and the herd's answers on the
// other instances once all are in.
//
// "While it loads" is made certain, not left to timing: the products
// table of dsn (the instances' database) is locked from before the herd
// until the leader is dead, so the leader's query cannot finish first. On
// a machine busy with another test suite, finding the leader (polling
// every instance's /metrics) has taken longer than the origin latency, and
// a leader killed after its load had completed left nothing to take over.
// The lock is released as soon as the leader is gone; a takeover's query
// that starts before that (it is counted when it starts) waits for it.
func killLeaderMidLoad(t *testing.T, c *http.Client, ps []*process, n int, dsn string) (leader int, killed time.Time, survivors <-chan []answer) {
	t.Helper()
	for _, p := range ps {
		warmConnections(t, c, p.url, n/len(ps))
	}
	unlock := lockProducts(t, dsn)
	done := herdInBackground(c, ps, n, herdPath)
	leader = waitForLeader(t, c, ps, 30*time.Second)
	if err := ps[leader].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed = time.Now()
	<-ps[leader].done // its stderr ends when it is gone
	ps[leader].cmd.Wait()
	unlock()
	out := make(chan []answer, 1)
	go func() {
		var rest []answer
		for i, a := range <-done {
			if i%len(ps) != leader {
				rest = append(rest, a)
			}
		}
		out <- rest
	}()
	return leader, killed, out
}

// lockProducts takes an ACCESS EXCLUSIVE lock on the products table of
// dsn, which holds every query of it until the returned function (or the
// test's end) releases the lock.
func lockProducts(t *testing.T, dsn string) (unlock func()) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	// The transaction's context must outlive this function: database/sql
	// rolls a transaction back when its context ends.
	tx, err := db.BeginTx(context.Background(), nil)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = tx.ExecContext(ctx, `LOCK TABLE products IN ACCESS EXCLUSIVE MODE`)
	}
	if err != nil {
		db.Close()
		t.Fatalf("lock the products table: %v", err)
	}
	var once sync.Once
	unlock = func() {
		once.Do(func() {
			if err := tx.Rollback(); err != nil {
				t.Errorf("unlock the products table: %v", err)
			}
			db.Close()
		})
	}
	t.Cleanup(unlock)
	return unlock
}

// flagValue is the value after name in args, "" if absent.
func flagValue(args []string, name string) string {
	if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

func TestClusterLeaderKilledMidLoadIsReplacedWithinTheLeaseTTL(t *testing.T) {
	t.Parallel()
	// Long enough that the instance that took over keeps its lease while
	// starved of CPU under -race on a busy machine (a second takeover would
	// rightly cost a third origin query; with two suites side by side a
	// 2s lease was lost so once).
	const leaseTTL = 3 * time.Second
	args := clusterArgs(t, sharedRedisURL(t), "-origin-latency", "1s",
		"-lease-ttl", leaseTTL.String(), "-coalesce-wait", "20s", "-loader-timeout", "30s")
	ps := startInstances(t, 4, args...)
	c := herdClient(400)
	defer c.CloseIdleConnections()
	leader, killed, done := killLeaderMidLoad(t, c, ps, 400, flagValue(args, "-db"))
	rest := without(ps, leader)
	// The takeover: a surviving instance starts the second origin query,
	// within about the lease TTL (measured figures: docs/RELIABILITY.md).
	// The bound leaves a machine loaded enough to starve a process for
	// seconds 10s more (6s was once too little with two test suites on
	// two cores), and stays under the -coalesce-wait (20s) at which the
	// followers would give up and query the origin themselves; the
	// taken_over count below tells the two apart too.
	const takeoverBound = leaseTTL + 10*time.Second
	deadline := killed.Add(takeoverBound)
	for sumMetric(t, c, rest, OriginQueriesMetric) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no instance took over within %v of the kill (lease TTL %v)", takeoverBound, leaseTTL)
		}
		time.Sleep(2 * time.Millisecond) // polling other processes' metrics
	}
	takeover := time.Since(killed)
	survivors := <-done
	requireOneBody(t, survivors)
	if q := 1 + sumMetric(t, c, rest, OriginQueriesMetric); q != 2 {
		t.Fatalf("origin queries %v, want 2 (the killed leader's and the takeover's)", q)
	}
	if n := sumMetric(t, c, rest, takenOverMetric); n != 1 {
		t.Fatalf("leases taken over: %v, want 1", n)
	}
	t.Logf("leader killed; takeover after %v (lease TTL %v); %d requests on the survivors all 200", takeover, leaseTTL, len(survivors))
}

// Under the default -coalesce-wait, a leader killed mid-load costs one
// origin query more (the takeover's) and no more: the requests waiting on
// the other instances outlast its lease and the new leader's load, and
// get that load's value. A wait that ends before the takeover's load does
// makes every surviving instance query the origin itself, uncached (4
// queries here).
func TestClusterLeaderKilledMidLoadUnderTheDefaultWaitCostsOneTakeoverQuery(t *testing.T) {
	t.Parallel()
	// The lease plus the origin's latency (4.5s) is well inside the default
	// wait (-lease-ttl + -loader-timeout = 13s here), which leaves room
	// for a machine busy with another test suite, where the takeover's
	// load has been seen to finish more than 6.5s after the kill. The
	// lease lets a takeover leader starved of CPU for over two seconds
	// keep it (heartbeats every second): with two suites beside each
	// other, a 1.5s lease was lost by two takeover leaders in turn, each
	// refused when it completed, and every survivor queried the origin.
	const leaseTTL, originLatency = 3 * time.Second, 1500 * time.Millisecond
	args := clusterArgs(t, sharedRedisURL(t), "-origin-latency", originLatency.String(),
		"-lease-ttl", leaseTTL.String(), "-loader-timeout", "10s")
	ps := startInstances(t, 4, args...)
	c := herdClient(200)
	defer c.CloseIdleConnections()
	leader, _, done := killLeaderMidLoad(t, c, ps, 200, flagValue(args, "-db"))
	rest := without(ps, leader)
	survivors := <-done
	body := requireOneBody(t, survivors)
	q := 1 + sumMetric(t, c, rest, OriginQueriesMetric)
	kinds := cacheKinds(survivors)
	if q != 2 {
		t.Fatalf("origin queries %v, want 2 (the killed leader's and the takeover's); Cache-Status on the survivors: %v", q, kinds)
	}
	if n := sumMetric(t, c, rest, takenOverMetric); n != 1 {
		t.Fatalf("leases taken over: %v, want 1", n)
	}
	// Every survivor now serves the takeover's value from a tier.
	for _, p := range rest {
		if a := get(c, p.url+herdPath); fmt.Sprintf("%d %s", a.status, a.body) != body || !strings.Contains(a.cache, "hit") {
			t.Fatalf("after the takeover %s answers %d %q (%s), want a hit of %s", p.url, a.status, a.body, a.cache, body)
		}
	}
	t.Logf("leader killed under the default wait: %v origin queries; Cache-Status on the survivors: %v", q, kinds)
}

// A leader frozen (SIGSTOP) past its lease, holding the row as it was
// before an update, loses the lease to another instance, which loads the
// updated row; when the old leader thaws, its write of the older row is
// refused by the fencing token, and no reader sees the older row.
func TestClusterPausedLeaderWriteIsFenced(t *testing.T) {
	t.Parallel()
	// Long enough that A's heartbeats keep its lease until the SIGSTOP
	// on a machine loaded by another test run (a lease lost before it
	// would let B lead afresh, not take over); short enough that B's wait
	// for the takeover stays a small part of the test.
	const leaseTTL = 2 * time.Second
	dsn := testenv.PostgresDB(t)
	args := []string{"-db", dsn, "-redis", sharedRedisURL(t), "-redis-prefix", testenv.UniqueName("productd-cluster-") + ":",
		"-seed-products", "20", "-failure-throttle", "0", "-redis-timeout", redisTimeoutUnderLoad, steadyBus[0], steadyBus[1],
		// A's SIGSTOP must land after its query and before its write: a
		// window this long even on a machine loaded enough to make the
		// polling below slow.
		"-origin-latency", "3s",
		"-lease-ttl", leaseTTL.String(), "-coalesce-wait", "20s", "-loader-timeout", "60s"}
	ps := startInstances(t, 2, args...)
	a, b := ps[0], ps[1]
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := herdClient(4)
	defer c.CloseIdleConnections()
	fromA := herdInBackground(c, []*process{a}, 1, herdPath)
	// A's query has run (its connection is idle with the product lookup as
	// its last statement; the origin latency is slept after the query):
	// A now holds the row at its first revision.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND state = 'idle' AND query LIKE '%WHERE tenant_id%product_id%'`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A's origin query did not run within 10s")
		}
		time.Sleep(2 * time.Millisecond) // polling another process's state in PostgreSQL
	}
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			a.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	defer thaw()
	// The row changes behind the caches' back (no PUT, so no invalidation:
	// only the fence can keep A's older row out).
	if _, err := db.Exec(`UPDATE products SET display_name = 'Renamed while A slept', revision = revision + 1
		WHERE tenant_id = 'globex' AND product_id = 'p-00007' AND locale = 'fr-FR' AND currency = 'GBP'`); err != nil {
		t.Fatal(err)
	}
	// B waits out A's lease, takes it over, loads the new row and writes.
	ansB := get(c, b.url+herdPath)
	if ansB.err != nil || ansB.status != 200 || !strings.Contains(ansB.body, "Renamed while A slept") {
		t.Fatalf("request on B during A's pause: %v %d %s", ansB.err, ansB.status, ansB.body)
	}
	if n := metric(t, c, b.url, takenOverMetric); n != 1 {
		t.Fatalf("B's leases taken over: %v, want 1", n)
	}
	thaw()
	ansA := <-fromA
	if ansA[0].err != nil || ansA[0].status != 200 {
		t.Fatalf("A's request after the thaw: %v %d", ansA[0].err, ansA[0].status)
	}
	if n := metric(t, c, a.url, fencedMetric); n != 1 {
		t.Fatalf("A's fenced writes rejected: %v, want 1", n)
	}
	// A's own request and every reader afterwards, on both instances, get
	// the takeover's (newer) row, never A's.
	if ansA[0].body != ansB.body {
		t.Fatalf("A's own request got %s (Cache-Status %q), want the stored value %s; A's shared-tier metrics:\n%s",
			ansA[0].body, ansA[0].cache, ansB.body, metricLines(t, c, a.url, "shared", "breaker", "error", "fenced"))
	}
	for _, p := range ps {
		if got := get(c, p.url+herdPath); got.status != 200 || got.body != ansB.body {
			t.Fatalf("after the thaw %s answers %d %s, want B's %s", p.url, got.status, got.body, ansB.body)
		}
	}
	if q := metric(t, c, a.url, OriginQueriesMetric) + metric(t, c, b.url, OriginQueriesMetric); q != 2 {
		t.Fatalf("origin queries %v, want 2", q)
	}
}

// An origin error on the leading instance reaches the followers on every
// instance at once, not after the lease TTL; the next request after the
// failure window loads again.
func TestClusterLeaderFailureReachesEveryInstanceBeforeTheLeaseTTL(t *testing.T) {
	t.Parallel()
	// A lease far longer than a failure takes to spread (measured 0.35s,
	// docs/RELIABILITY.md), so that half of it is room for a loaded
	// machine and still tells a broadcast failure from an expired lease.
	const leaseTTL = 20 * time.Second
	dsn := testenv.PostgresDB(t)
	args := []string{"-db", dsn, "-redis", sharedRedisURL(t), "-redis-prefix", testenv.UniqueName("productd-cluster-") + ":",
		"-seed-products", "20", "-failure-throttle", "0", "-redis-timeout", redisTimeoutUnderLoad, steadyBus[0], steadyBus[1], "-origin-latency", "300ms",
		"-lease-ttl", leaseTTL.String(), "-coalesce-wait", "25s", "-loader-timeout", "30s"}
	ps := startInstances(t, 4, args...)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	// The origin fails: its table is gone for a moment.
	if _, err := db.ExecContext(ctx, `ALTER TABLE products RENAME TO products_away`); err != nil {
		t.Fatal(err)
	}
	c := herdClient(200)
	defer c.CloseIdleConnections()
	as := spreadHerd(t, c, ps, 200, herdPath)
	var slowest time.Duration
	for _, a := range as {
		if a.err != nil || a.status < 500 {
			t.Fatalf("with the origin failing, a request got %v %d %s", a.err, a.status, a.body)
		}
		slowest = max(slowest, a.took)
	}
	if kinds := cacheKinds(as); kinds["flightcache; detail=leader-failed"] == 0 {
		t.Fatalf("no request reported the failure of another instance's load: %v", kinds)
	}
	if slowest > leaseTTL/2 {
		t.Fatalf("the slowest failed request took %v, want well under the lease TTL %v", slowest, leaseTTL)
	}
	if q := sumMetric(t, c, ps, OriginQueriesMetric); q > 4 {
		t.Fatalf("%v origin queries for one failing key, want at most one per instance", q)
	}
	if _, err := db.ExecContext(ctx, `ALTER TABLE products_away RENAME TO products`); err != nil {
		t.Fatal(err)
	}
	// After the failure window (1s), a request loads again and succeeds.
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := get(c, ps[1].url+herdPath)
		if a.status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no request succeeded within 10s after the origin came back: %d %s", a.status, a.body)
		}
		time.Sleep(50 * time.Millisecond) // polling for the failure window to pass
	}
	t.Logf("200 requests on 4 instances failed within %v (lease TTL %v)", slowest, leaseTTL)
}

// Redis killed and restarted on the same port while requests run: under
// the default degrade policy every request is served, none hangs, /readyz
// shows the degraded scope, and cluster scope comes back with Redis.
func TestClusterRedisRestartMidFlightServesEveryRequest(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	ps := startInstances(t, 3, clusterArgs(t, "redis://"+srv.Addr+"/0", "-origin-latency", "50ms",
		"-lease-ttl", "500ms", "-redis-timeout", "100ms")...)
	c := herdClient(60)
	defer c.CloseIdleConnections()
	c.Timeout = 10 * time.Second
	// round sends one request per product per instance, for products not
	// asked for before, so that each makes a load (and asks the coordinator).
	next := 0
	round := func() []answer {
		var paths []string
		for range 5 {
			// Every product of the catalog in every locale and currency:
			// 3 tenants x 20 products x 3 x 3, none asked for twice.
			tenants, locales, currencies := []string{"acme", "globex", "initech"}, []string{"en-US", "de-DE", "fr-FR"}, []string{"USD", "EUR", "GBP"}
			n := next
			next++
			paths = append(paths, fmt.Sprintf("/v1/tenants/%s/products/p-%05d?locale=%s&currency=%s",
				tenants[n%3], n/3%20+1, locales[n/60%3], currencies[n/180%3]))
		}
		out := make([]answer, len(paths)*len(ps))
		var wg sync.WaitGroup
		for i := range out {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out[i] = get(c, ps[i%len(ps)].url+paths[i/len(ps)])
			}()
		}
		wg.Wait()
		return out
	}
	check := func(phase string, as []answer) {
		t.Helper()
		for _, a := range as {
			if a.err != nil || a.status != 200 {
				t.Fatalf("%s: a request got %v %d %s", phase, a.err, a.status, a.body)
			}
		}
	}
	check("before the restart", round())
	inflight := herdInBackground(c, ps, 30, "/v1/tenants/acme/products/p-00019")
	srv.Kill()
	check("while Redis is down", round())
	check("in flight across the kill", <-inflight)
	if got := readyz(t, c, ps[0]); got != "local (degraded)" {
		t.Fatalf("/readyz coalescing %q while Redis is down, want local (degraded)", got)
	}
	srv.Start()
	// Cluster scope comes back by itself on the next loads.
	deadline := time.Now().Add(10 * time.Second)
	for readyz(t, c, ps[0]) != "cluster" {
		check("after the restart", round())
		if time.Now().After(deadline) {
			t.Fatal("cluster scope did not come back within 10s of Redis")
		}
	}
	check("after the restart", round())
}

// Cluster mode against a Redis that is not there is refused at startup,
// with a message that says what was asked for and how to get the other.
func TestClusterModeWithUnreachableRedisFailsAtStartup(t *testing.T) {
	t.Parallel()
	port := testenv.FreePort(t)
	bin := productdBinary(t) // built before the deadlines start: a cold build is slow
	for _, args := range [][]string{
		{"-redis", fmt.Sprintf("redis://127.0.0.1:%d/0", port)},
		{"-redis", fmt.Sprintf("redis://127.0.0.1:%d/0", port), "-coalesce", "cluster"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, bin, append([]string{"-addr", "127.0.0.1:0", "-db", t.TempDir() + "/p.db", "-seed-products", "5"}, args...)...)
		cmd.Env = append(os.Environ(), "PRODUCTD_WRITE_TOKEN="+testWriteToken)
		out, err := cmd.CombinedOutput()
		cancel()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("productd %q: %v, want exit status 1\n%s", args, err, out)
		}
		if !strings.Contains(string(out), "does not answer at startup") || !strings.Contains(string(out), strconv.Itoa(port)) {
			t.Fatalf("productd %q: unclear message:\n%s", args, out)
		}
	}
	out, err := exec.Command(productdBinary(t), "-coalesce", "cluster").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "-coalesce cluster needs -redis") {
		t.Fatalf("productd -coalesce cluster without -redis: %v\n%s", err, out)
	}
}
