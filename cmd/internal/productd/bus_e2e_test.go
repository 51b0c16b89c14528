package productd

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
)

// Cross-instance invalidation end to end: two productd processes share a
// fresh PostgreSQL database and a private redis-server, whose pub/sub is
// their invalidation bus. A PUT on A must show on B, whose copy is hot in
// its memory tier, within the bus's bound (up, killed, frozen), and B
// must never serve a revision older than one it served before. The cache
// TTL is long (5m), so no expiry can explain what B serves.

// variant is one row of the catalog: a product in a locale and currency.
type variant struct{ tenant, id, locale, currency string }

func (v variant) path() string {
	return fmt.Sprintf("/v1/tenants/%s/products/%s?locale=%s&currency=%s", v.tenant, v.id, v.locale, v.currency)
}

var (
	// busVariant is the product variant the rounds update; busOther is
	// another locale and currency of the same product, which the PUT's
	// prefix invalidation covers too.
	busVariant = variant{"globex", "p-00007", "de-DE", "EUR"}
	busOther   = variant{"globex", "p-00007", "fr-FR", "USD"}
)

const (
	busRounds = 20
	// busUpBound is what a round may take with the bus up, from the PUT's
	// response to B's first answer with the new row: a pub/sub delivery
	// and a reload, measured in milliseconds (docs/productd.md), with
	// room for a machine loaded enough to stall a process for a second.
	// Only the bus can make B drop its copy that soon: its TTL is 5m and
	// its bus stays up throughout (the test checks both).
	busUpBound = 2 * time.Second
	// busDisconnectsMetric counts an instance's bus going down.
	busDisconnectsMetric = `flightcache_bus_disconnects_total{operation="product"}`
)

// busArgs are the flags of both instances: the database dsn, the private
// Redis, a TTL no round comes near.
func busArgs(dsn, redisAddr string, extra ...string) []string {
	return append([]string{"-db", dsn, "-redis", "redis://" + redisAddr + "/0",
		"-redis-prefix", testenv.UniqueName("productd-bus-") + ":", "-seed-products", "20",
		"-cache-ttl", "5m", "-failure-throttle", "0"}, extra...)
}

// servedRow is one answer of B.
type servedRow struct {
	price, revision int64
	cache           string // Cache-Status
}

// memoryHit reports whether Cache-Status says the memory tier answered: a
// fresh hit without detail (a shared hit says detail=shared).
func (r servedRow) memoryHit() bool {
	return strings.HasPrefix(r.cache, "flightcache; hit; ttl=") && !strings.Contains(r.cache, "detail=")
}

func getRow(t *testing.T, c *http.Client, url string) servedRow {
	t.Helper()
	a := get(c, url)
	if a.err != nil || a.status != http.StatusOK {
		t.Fatalf("GET: %v %d %s", a.err, a.status, a.body)
	}
	var p struct {
		PriceCents int64
		Revision   int64
	}
	if err := json.Unmarshal([]byte(a.body), &p); err != nil {
		t.Fatalf("GET: %v: %s", err, a.body)
	}
	return servedRow{price: p.PriceCents, revision: p.Revision, cache: a.cache}
}

// put sets the price of path on p and returns the committed revision.
func put(c *http.Client, p *process, v variant, price int64) (revision int64, err error) {
	req, _ := http.NewRequest("PUT", p.url+v.path(), strings.NewReader(fmt.Sprintf(`{"priceCents":%d}`, price)))
	authorize(req)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var row struct {
		PriceCents int64
		Revision   int64
	}
	if err := json.NewDecoder(resp.Body).Decode(&row); err != nil || resp.StatusCode != 200 || row.PriceCents != price {
		return 0, fmt.Errorf("PUT: %d %+v %v", resp.StatusCode, row, err)
	}
	return row.Revision, nil
}

// monotonic checks that B never serves a revision of a product variant
// older than one it served before, across every poll of every round.
type monotonic struct {
	t    *testing.T
	high map[variant]int64
	n    int
}

func newMonotonic(t *testing.T) *monotonic { return &monotonic{t: t, high: map[variant]int64{}} }

func (m *monotonic) see(round int, v variant, r servedRow) {
	m.t.Helper()
	m.n++
	if high, ok := m.high[v]; ok && r.revision < high {
		m.t.Fatalf("round %d: B served revision %d (price %d, %s) after it had served revision %d", round, r.revision, r.price, r.cache, high)
	}
	m.high[v] = r.revision
}

// makeHot reads path on p until its memory tier answers, so that the old
// value sits in memory before the PUT.
func makeHot(t *testing.T, c *http.Client, p *process, v variant, m *monotonic, round int) servedRow {
	t.Helper()
	for range 100 {
		r := getRow(t, c, p.url+v.path())
		m.see(round, v, r)
		if r.memoryHit() {
			return r
		}
	}
	t.Fatalf("round %d: B's memory tier never answered %s in 100 GETs", round, v.path())
	return servedRow{}
}

// awaitBus waits until /readyz on every process says the bus is up.
func awaitBus(t *testing.T, ps ...*process) {
	t.Helper()
	for _, p := range ps {
		waitBus(t, p.url, "up", 20*time.Second)
	}
}

// logsOnFailure logs A's and B's log lines if the test fails: what the
// bus did (down, up, failed publishes) explains a slow round.
func logsOnFailure(t *testing.T, a, b *process) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for name, p := range map[string]*process{"A": a, "B": b} {
			all, _ := p.logLines()
			for _, l := range all {
				t.Logf("%s: %s", name, l)
			}
		}
	})
}

// quantiles returns p50, p99 and the max of ds (nearest rank).
func quantiles(ds []time.Duration) (p50, p99, maxd time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[max(0, int(math.Ceil(q*float64(len(s))))-1)] }
	return at(0.50), at(0.99), s[len(s)-1]
}

// With the bus up, in both coalescing modes: every round's PUT on A shows
// on B at once, through the bus (within busUpBound of the PUT's response,
// while B's copy would live 5m in memory and B's bus never goes down), B's
// memory loses every other variant of the product too, and B never goes
// back.
func TestEndToEndBusPutOnOneInstanceShowsOnAnotherThroughTheBus(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{CoalesceCluster, CoalesceLocal} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t)
			// A generous -redis-timeout: on a busy machine a publish that
			// timed out would leave B serving the old value for the TTL,
			// which is not what this test measures.
			// A steady bus: one that went down and up would empty B's
			// memory, and B would then show the update without the bus.
			ps := startInstances(t, 2, busArgs(testenv.PostgresDB(t), srv.Addr, "-coalesce", mode, "-redis-timeout", redisTimeoutUnderLoad,
				steadyBus[0], steadyBus[1])...)
			a, b := ps[0], ps[1]
			logsOnFailure(t, a, b)
			awaitBus(t, a, b)
			c := herdClient(4)
			defer c.CloseIdleConnections()
			m := newMonotonic(t)
			var took, otherTook, putTook []time.Duration
			slow := 0
			for round := 1; round <= busRounds; round++ {
				old := makeHot(t, c, b, busVariant, m, round)
				makeHot(t, c, b, busOther, m, round)
				price := int64(100_000 + round)
				sent := time.Now()
				rev, err := put(c, a, busVariant, price)
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				done := time.Now()
				putTook = append(putTook, done.Sub(sent))
				if rev <= old.revision {
					t.Fatalf("round %d: PUT committed revision %d, B held %d", round, rev, old.revision)
				}
				var r servedRow
				for {
					r = getRow(t, c, b.url+busVariant.path())
					m.see(round, busVariant, r)
					if r.price == price {
						break
					}
					if time.Since(done) > 10*time.Second {
						t.Fatalf("round %d: B still serves price %d revision %d (%s) 10s after the PUT of revision %d returned",
							round, r.price, r.revision, r.cache, rev)
					}
				}
				d := time.Since(done)
				took = append(took, d)
				if r.revision < rev {
					t.Fatalf("round %d: B serves the new price at revision %d, want %d", round, r.revision, rev)
				}
				if d > busUpBound {
					slow++
					t.Errorf("round %d: B served the update %v after the PUT returned, want at most %v", round, d, busUpBound)
				}
				// The other variant left B's memory too (the prefix
				// invalidation may land a moment after the key's).
				for {
					if o := getRow(t, c, b.url+busOther.path()); !o.memoryHit() {
						break
					}
					if time.Since(done) > busUpBound {
						t.Fatalf("round %d: B still answers the product's other variant from memory %v after the PUT", round, busUpBound)
					}
				}
				otherTook = append(otherTook, time.Since(done))
			}
			p50, p99, mx := quantiles(took)
			o50, _, omx := quantiles(otherTook)
			u50, _, umx := quantiles(putTook)
			t.Logf("%s, bus up, %d rounds, %d GETs on B: B served the PUT p50 %v p99 %v max %v after it returned (other variant out of memory: p50 %v max %v; PUT p50 %v max %v)",
				mode, busRounds, m.n, p50, p99, mx, o50, omx, u50, umx)
			if slow > 0 {
				t.Fatalf("%d of %d rounds over %v", slow, busRounds, busUpBound)
			}
			for _, p := range ps {
				if code, rb := getReadyBus(t, p.url); code != 200 || rb.Bus != "up" {
					t.Fatalf("/readyz after the rounds: %d %+v, want bus up", code, rb)
				}
			}
			if n := metric(t, c, b.url, busDisconnectsMetric); n != 0 {
				t.Fatalf("B's bus went down %v times during the rounds: the updates may have shown by a resynchronisation, not the bus", n)
			}
		})
	}
}

// The bus flags of the fault tests: small, so that a round is short.
const (
	// redoBound bounds how long after both buses are up again B may still
	// serve an entry Redis kept from before a PUT whose invalidation could
	// not be published: until the writer, its bus up, redoes the write.
	redoBound         = 5 * time.Second
	faultHeartbeat    = 100 * time.Millisecond
	faultDownAfter    = 400 * time.Millisecond
	faultBusDownTTL   = 500 * time.Millisecond
	faultRedisTimeout = 200 * time.Millisecond
	// faultSlack absorbs a loaded machine (two test suites with -race on
	// two shared cores: timers fire late, a process can stall for a
	// second) and the GET that first sees the new row. Without the
	// bus-down bound B would serve its copy for the 5m TTL.
	faultSlack = 2500 * time.Millisecond
)

// busDownBound is docs/productd.md's bound on how long after a PUT
// committed while the bus was down (or going down) another instance may
// serve the older row it holds in memory: the bus is known down within
// -bus-heartbeat + -bus-down-after of the outage, and from then on a
// value in memory is served only while younger than -bus-down-ttl; then
// one GET, which may wait a -redis-timeout for a hung Redis before it
// reads the origin.
func busDownBound() time.Duration {
	return max(faultHeartbeat+faultDownAfter, faultBusDownTTL) + faultRedisTimeout
}

// faultArgs are the instances' flags in the Redis-fault tests. The loader
// timeout is generous: these tests are about what B serves, and on a
// machine busy with another test suite a reload from PostgreSQL has taken
// longer than the default 5s, which answered a GET 504.
func faultArgs(dsn, redisAddr string) []string {
	return busArgs(dsn, redisAddr, "-bus-heartbeat", faultHeartbeat.String(), "-bus-down-after", faultDownAfter.String(),
		"-bus-down-ttl", faultBusDownTTL.String(), "-redis-timeout", faultRedisTimeout.String(), "-loader-timeout", "20s")
}

// watchCommit reports when PostgreSQL first shows v at price: the PUT's
// commit, give or take a millisecond of polling (a PUT is answered only
// after its invalidations, which a hung Redis makes slow; the bound is
// from the commit).
func watchCommit(t *testing.T, db *sql.DB, v variant, price int64) <-chan time.Time {
	seen := make(chan time.Time, 1)
	ctx := t.Context()
	go func() {
		for ctx.Err() == nil {
			var got int64
			err := db.QueryRowContext(ctx, `SELECT price_cents FROM products WHERE tenant_id = $1 AND product_id = $2 AND locale = $3 AND currency = $4`,
				v.tenant, v.id, v.locale, v.currency).Scan(&got)
			if err == nil && got == price {
				seen <- time.Now()
				return
			}
			time.Sleep(time.Millisecond) // polling another process's commit
		}
	}()
	return seen
}

// faultRounds runs the rounds of a bus outage: Redis up and the bus up on
// both instances, B's copy hot in memory, then outage (kill or freeze),
// then a PUT on A while B is polled as fast as it answers; recover
// restores Redis before the next round. Every round must show on B within
// busDownBound plus faultSlack of the commit, and B never goes back while
// Redis is out. pick gives each round's product variant.
//
// It returns, for each round but the last, what B served of that round's
// variant once Redis was back and the bus up again, and the revision the
// round's PUT committed.
func faultRounds(t *testing.T, what, dsn string, a, b *process, pick func(round int) variant, outage, recover func()) (after []servedRow, committed []int64) {
	var redo []time.Duration
	defer func() {
		if len(redo) > 0 {
			r50, _, rmx := quantiles(redo)
			t.Logf("%s: once Redis and the bus were back, B served each PUT's revision (or newer) within p50 %v max %v", what, r50, rmx)
		}
	}()
	c := herdClient(4)
	defer c.CloseIdleConnections()
	logsOnFailure(t, a, b)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := newMonotonic(t)
	bound := busDownBound() + faultSlack
	var fromCommit, fromSent, putTook []time.Duration
	slow := 0
	for round := 1; round <= busRounds; round++ {
		if round > 1 {
			recover()
		}
		awaitBus(t, a, b)
		if round > 1 {
			after = append(after, getRow(t, c, b.url+pick(round-1).path()))
			// Then B converges, whatever it served first: the writer
			// redoes the invalidations it could not publish once its own
			// bus is up again.
			prev, since := pick(round-1), time.Now()
			for getRow(t, c, b.url+prev.path()).revision < committed[len(committed)-1] {
				if time.Since(since) > redoBound {
					t.Fatalf("round %d: once Redis and the bus were back, B still served a revision older than the PUT's after %v", round-1, redoBound)
				}
			}
			redo = append(redo, time.Since(since))
		}
		v := pick(round)
		old := makeHot(t, c, b, v, m, round)
		outage()
		price := int64(200_000 + round)
		type putResult struct {
			rev  int64
			took time.Duration
			err  error
		}
		res := make(chan putResult, 1)
		commit := watchCommit(t, db, v, price)
		sent := time.Now()
		go func() {
			rev, err := put(c, a, v, price)
			res <- putResult{rev, time.Since(sent), err}
		}()
		// The bound is on when a read starts: no GET that starts later
		// than the bound after the commit may return the older row. A GET
		// that a loaded machine stalls after it started says nothing more,
		// so the round is measured by the start of the last stale GET.
		var r servedRow
		lastStale := sent
		for {
			started := time.Now()
			r = getRow(t, c, b.url+v.path())
			m.see(round, v, r)
			if r.price == price {
				break
			}
			lastStale = started
			if time.Since(sent) > 20*time.Second {
				t.Fatalf("round %d: B still serves price %d revision %d (%s) 20s after the PUT", round, r.price, r.revision, r.cache)
			}
		}
		converged := lastStale
		committedAt := <-commit
		d := max(converged.Sub(committedAt), 0)
		fromCommit = append(fromCommit, d)
		fromSent = append(fromSent, converged.Sub(sent))
		pr := <-res
		if pr.err != nil {
			t.Fatalf("round %d: %v", round, pr.err)
		}
		putTook = append(putTook, pr.took)
		committed = append(committed, pr.rev)
		if pr.rev <= old.revision || r.revision < pr.rev {
			t.Fatalf("round %d: B held revision %d, the PUT committed %d, B now serves %d", round, old.revision, pr.rev, r.revision)
		}
		if d > bound {
			slow++
			t.Errorf("round %d: B's last GET that returned the older row started %v after the commit (%v after the PUT was sent, committed after %v, PUT answered after %v), want at most %v",
				round, d, converged.Sub(sent), committedAt.Sub(sent), pr.took, bound)
		}
	}
	recover()
	awaitBus(t, a, b)
	p50, p99, mx := quantiles(fromCommit)
	s50, _, smx := quantiles(fromSent)
	u50, _, umx := quantiles(putTook)
	t.Logf("%s, %d rounds, %d GETs on B: B's last stale GET started p50 %v p99 %v max %v after the commit (bound %v + slack %v; after the PUT was sent: p50 %v max %v; PUT answered p50 %v max %v)",
		what, busRounds, m.n, p50, p99, mx, busDownBound(), faultSlack, s50, smx, u50, umx)
	if slow > 0 {
		t.Fatalf("%d of %d rounds over %v", slow, busRounds, bound)
	}
	return after, committed[:len(committed)-1]
}

// Redis killed (SIGKILL) just before each PUT: A cannot publish, B's bus
// goes down (a heartbeat fails at once), and B stops serving its copy
// within the bus-down bound. Redis restarts empty for the next round, so
// the same variant is updated every round and B never goes back across
// all of them.
func TestEndToEndBusRedisKilledPutShowsOnAnotherWithinTheBound(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	dsn := testenv.PostgresDB(t)
	ps := startInstances(t, 2, faultArgs(dsn, srv.Addr)...)
	after, committed := faultRounds(t, "Redis killed", dsn, ps[0], ps[1], func(int) variant { return busVariant }, srv.Kill, srv.Start)
	for i, r := range after {
		if r.revision < committed[i] {
			t.Fatalf("round %d: after Redis restarted, B served revision %d, older than the PUT's %d", i+1, r.revision, committed[i])
		}
	}
}

// Redis frozen (SIGSTOP) just before each PUT: every Redis call hangs
// until -redis-timeout, heartbeats stop coming back, and B stops serving
// its copy within the same bound.
//
// Redis comes back with its data, and the PUT's DEL of the old entry
// never reached it (with every call timing out, it is not even sent on a
// new connection): once its bus is back, B may read that entry from Redis
// for a moment, until A, its own bus up again, redoes the DELs and the
// invalidation it could not make (faultRounds checks B converges within
// redoBound). Each round updates a product of its own, and the test
// reports how many rounds B first served the older entry in.
func TestEndToEndBusRedisFrozenPutShowsOnAnotherWithinTheBound(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	dsn := testenv.PostgresDB(t)
	ps := startInstances(t, 2, faultArgs(dsn, srv.Addr)...)
	pick := func(round int) variant { return variant{"acme", fmt.Sprintf("p-%05d", round), "en-US", "USD"} }
	after, committed := faultRounds(t, "Redis frozen", dsn, ps[0], ps[1], pick, srv.Pause, srv.Resume)
	back := 0
	for i, r := range after {
		if r.revision < committed[i] {
			back++
		}
	}
	t.Logf("Redis frozen: once Redis and the bus were back, B first served the revision before the round's PUT in %d of %d rounds (an old entry left in Redis, until A redid its invalidations)", back, len(after))
}
