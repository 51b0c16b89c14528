package chaos

import (
	"io"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/cmd/internal/productd"
)

// The flags the productd mode starts each process with are valid, and
// give productd the very options the in-process modes run with, from
// which BoundsFor derives the bounds.
func TestProductdArgsAreTheInProcessOptions(t *testing.T) {
	p := &phase{redis: &redisServer{addr: "127.0.0.1:1"}, pd: &productdEnv{writeToken: newWriteToken(), origin: &originDB{dsn: "postgres://postgres@127.0.0.1:5432/test?sslmode=disable&search_path=chaos_x"}}}
	// The environment the processes get: the write token only.
	getenv := func(k string) string {
		if k == "PRODUCTD_WRITE_TOKEN" {
			return p.pd.writeToken
		}
		return ""
	}
	cfg, err := productd.ParseFlags(p.productdArgs(1), getenv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{
		"coalescing": cfg.Coalescing(), "lease": cfg.LeaseTTL, "coalesce wait": cfg.EffectiveCoalesceWait(),
		"redis timeout": cfg.RedisTimeout, "heartbeat": cfg.BusHeartbeat, "down after": cfg.EffectiveBusDownAfter(),
		"bus-down TTL": cfg.BusDownTTL, "TTL": cfg.TTL, "loader timeout": cfg.LoaderTimeout, "origin latency": cfg.OriginLatency,
		"jitter": cfg.Jitter, "failure throttle": cfg.FailureThrottle, "stale for": cfg.StaleFor, "early refresh": cfg.EarlyRefresh,
		"seed": cfg.Seed, "redis": cfg.Redis, "prefix": cfg.RedisPrefix,
	}
	want := map[string]any{
		"coalescing": productd.CoalesceCluster, "lease": leaseTTL, "coalesce wait": coalesceWait,
		"redis timeout": sharedTimeout, "heartbeat": heartbeat, "down after": downAfter,
		"bus-down TTL": busDownTTL, "TTL": cacheTTL, "loader timeout": loaderTimeout, "origin latency": originLatency,
		"jitter": 0.0, "failure throttle": time.Duration(0), "stale for": time.Duration(0), "early refresh": false,
		"seed": false, "redis": "redis://instance1:chaos@127.0.0.1:1/0", "prefix": keyPrefix,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("productd's %s = %v, want %v", k, got[k], w)
		}
	}
	// The Redis timeout is also the lease's (redislease Timeout), which
	// the cluster bounds count as redisTimeout.
	if sharedTimeout != redisTimeout {
		t.Errorf("productd uses -redis-timeout for both; the bounds assume %v and %v", sharedTimeout, redisTimeout)
	}
}

func TestProductdBoundsAreClusterOnesWithAPutsDeletes(t *testing.T) {
	b, c := BoundsFor(ModeProductd), BoundsFor(ModeCluster)
	if b.Delivery != c.Delivery || b.BusDown != c.BusDown || b.Recovery != c.Recovery || b.Read != c.Read || !b.Fencing {
		t.Errorf("productd bounds %+v, want the cluster ones %+v (but the write's), fencing checked", b, c)
	}
	if want := 3*sharedTimeout + invalidateTimeout + redisTimeout + Slack; b.Write != want {
		t.Errorf("productd write bound %v, want %v", b.Write, want)
	}
}

// The process faults come first in every order, shuffled; the productd
// mode has no fault that needs a hook inside an instance.
func TestProductdFaultOrderStartsWithTheProcessFaults(t *testing.T) {
	all := faultsFor(ModeProductd)
	seen := map[string]bool{}
	for seed := range uint64(20) {
		order := faultOrder(ModeProductd, rand.New(rand.NewPCG(seed, 0)))
		if !slices.Equal(slices.Sorted(slices.Values(order)), slices.Sorted(slices.Values(all))) {
			t.Fatalf("order %v is not a permutation of %v", order, all)
		}
		first := order[:len(processFaults)]
		if !slices.Contains(first, FaultLeaderKilled) || !slices.Contains(first, FaultLeaderStopped) {
			t.Fatalf("order %v does not start with the process faults", order)
		}
		seen[strings.Join(order, ",")] = true
	}
	if len(seen) < 10 {
		t.Errorf("%d different orders over 20 seeds, want them shuffled", len(seen))
	}
	for _, f := range all {
		if strings.Contains(f, FaultCodecPanic) || strings.Contains(f, FaultSlowWrites) {
			t.Errorf("productd's cycle has %s, which needs an in-process hook", f)
		}
	}
	for _, mode := range []string{ModeCluster, ModeLocal, ModeNoBus} {
		for _, f := range faultsFor(mode) {
			if slices.Contains(processFaults, f) {
				t.Errorf("mode %s has the process fault %s", mode, f)
			}
		}
	}
	if !takesBusDown(FaultLeaderStopped) || takesBusDown(FaultLeaderKilled) {
		t.Error("a frozen leader's bus goes down; a killed one starts again with an empty memory")
	}
	if !takesBulkDown(FaultScripts) || !takesBulkDown(FaultScripts+"+"+FaultSlowWrites) || takesBulkDown(FaultPublish) {
		t.Error("scripts refused keep bulk invalidations unannounced, and only they")
	}
}

// Workload keys name fixed rows; each probe key a row of its own, of
// another product than the previous one; a body maps back to its key.
func TestRowMapGivesEachProbeKeyAFreshRow(t *testing.T) {
	m := newRowMap()
	if r := m.ref("t1:p2"); r != (product.Ref{Tenant: "t1", ID: product.ProductID(2), Locale: "en-US", Currency: "USD"}) {
		t.Errorf("t1:p2 is row %+v", r)
	}
	// The harness's categories are productd's: a reprice of a key's
	// category changes the rows of exactly the keys categoryOf groups.
	keys := []string{"t0:p0", "t0:p1", "t0:p2", "t0:p3", "t1:p0", "t1:p1", "t1:p2"}
	for _, a := range keys {
		for _, b := range keys {
			ra, rb := m.ref(a), m.ref(b)
			same := ra.Tenant == rb.Tenant && product.CategoryOf(ra.ID) == product.CategoryOf(rb.ID)
			if same != (categoryOf(a) == categoryOf(b)) {
				t.Errorf("keys %s and %s (rows %s, %s): productd's categories and the harness's disagree", a, b, ra.ID, rb.ID)
			}
		}
	}
	if categoryOf("t0:p0") != categoryOf("t0:p1") {
		t.Error("keys p0 and p1 of a tenant must share a category")
	}
	catalog := chaosCatalog()
	rows := map[product.Ref]bool{}
	var prev product.Ref
	for n := range 3 * probeProducts {
		k := probeTenant + ":f" + string(rune('a'+n%26)) + strings.Repeat("x", n/26)
		r := m.ref(k)
		if r != m.ref(k) {
			t.Fatalf("key %s maps to two rows", k)
		}
		if rows[r] {
			t.Fatalf("key %s got row %+v again", k, r)
		}
		rows[r] = true
		if r.Tenant != probeTenant || r.ID == prev.ID || !slices.Contains(catalog.Locales, r.Locale) || !slices.Contains(catalog.Currencies, r.Currency) {
			t.Fatalf("key %s got row %+v after %+v", k, r, prev)
		}
		if _, err := product.NewRef(r.Tenant, r.ID, r.Locale, r.Currency); err != nil {
			t.Fatalf("row %+v: %v", r, err)
		}
		if got := m.keyOf(product.Product{TenantID: r.Tenant, ProductID: r.ID, Locale: r.Locale, Currency: r.Currency}); got != k {
			t.Fatalf("row %+v maps back to %q, want %q", r, got, k)
		}
		prev = r
	}
	if got := m.keyOf(product.Product{TenantID: "t0", ProductID: "p-00099", Locale: "en-US", Currency: "USD"}); got != "t0/p-00099/en-US/USD" {
		t.Errorf("a row no key names maps to %q", got)
	}
	if !strings.HasPrefix(path(m.ref("t0:p0")), "/v1/tenants/t0/products/p-00001?") {
		t.Errorf("path %s", path(m.ref("t0:p0")))
	}
}

func TestARunWhoseRawReadsFindNothingFails(t *testing.T) {
	ops := make([]Op, 300)
	for i := range ops {
		ops[i] = Op{Kind: RawRead, Key: "k"}
	}
	if err := checkRawReadsFound(ModeProductd, ops); err == nil {
		t.Error("300 raw reads found nothing, and the run passed")
	}
	ops[150].Found = true
	if err := checkRawReadsFound(ModeProductd, ops); err != nil {
		t.Error(err)
	}
	if err := checkRawReadsFound(ModeProductd, ops[:10]); err != nil {
		t.Errorf("a short run: %v", err)
	}
}

// A short productd run goes through the whole machinery: the build, the
// origin, the processes, a leader killed mid-load and started again, a
// leader frozen past its lease, the check; and every process is gone
// afterwards (TestMain's goleak sees the harness's goroutines end).
func TestProductdRunStrikesTheLeaderWithEachProcessFault(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts productd")
	}
	start := time.Now()
	reports, progress := runProgress(t, Config{Duration: 11 * time.Second, Instances: 2, Modes: []string{ModeProductd}, Seed: 1})
	// The bound catches a run that hangs, not a slow one: it includes
	// building productd, which took 46 s beside a second make test.
	if took := time.Since(start); took > 3*time.Minute {
		t.Errorf("an 11s run took %v", took)
	}
	if len(reports) != 1 || reports[0].Mode != ModeProductd {
		t.Fatalf("reports %+v, want one for %s", reports, ModeProductd)
	}
	r := reports[0]
	if r.Total.Ops < 300 {
		t.Errorf("%d operations recorded in 11s, want hundreds", r.Total.Ops)
	}
	var rows []string
	for _, row := range r.Rows {
		rows = append(rows, row.Fault)
	}
	for _, f := range processFaults {
		if !slices.Contains(rows, f) {
			t.Errorf("no row %s: %v", f, rows)
		}
		if !regexp.MustCompile(f + `: instance \d+'s load of \S+ struck: true`).MatchString(progress) {
			t.Errorf("the %s probe did not strike a leader's load:\n%s", f, progress)
		}
	}
}

func TestModeDurationsGiveTheRestToTheOthers(t *testing.T) {
	cfg := Config{Duration: 66 * time.Second, Modes: Modes, ModeDurations: map[string]time.Duration{ModeProductd: 12 * time.Second}}
	got, err := modeDurations(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{18 * time.Second, 18 * time.Second, 18 * time.Second, 12 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("durations %v, want %v", got, want)
	}
	cfg.ModeDurations = nil
	if got, _ := modeDurations(cfg); !slices.Equal(got, []time.Duration{16500 * time.Millisecond, 16500 * time.Millisecond, 16500 * time.Millisecond, 16500 * time.Millisecond}) {
		t.Errorf("equal shares %v", got)
	}
	for _, bad := range []Config{
		{Duration: time.Minute, Modes: []string{"cluster", "nope"}},
		{Duration: time.Minute, Modes: []string{ModeCluster, ModeProductd}, ModeDurations: map[string]time.Duration{ModeProductd: time.Minute}},
		{Duration: time.Minute, Modes: []string{ModeCluster}, ModeDurations: map[string]time.Duration{ModeProductd: time.Second}},
		{Duration: time.Minute, Modes: []string{ModeProductd}, ModeDurations: map[string]time.Duration{ModeProductd: 0}},
	} {
		if _, err := modeDurations(bad); err == nil {
			t.Errorf("modes %v with durations %v accepted", bad.Modes, bad.ModeDurations)
		}
	}
}

// Extra slack (make test's short run, beside other suites) widens every
// time bound by the same amount, and nothing else.
func TestExtraSlackWidensEveryTimeBound(t *testing.T) {
	for _, mode := range Modes {
		b, w := BoundsFor(mode), BoundsFor(mode).Plus(250*time.Millisecond)
		want := b
		want.Delivery += 250 * time.Millisecond
		want.BusDown += 250 * time.Millisecond
		want.Recovery += 250 * time.Millisecond
		want.Read += 250 * time.Millisecond
		want.Write += 250 * time.Millisecond
		if w != want {
			t.Fatalf("%s: Plus(250ms) = %+v, want %+v", mode, w, want)
		}
	}
}
