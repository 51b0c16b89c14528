package bloomguard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache/bloomguard"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

var _ driver.Guard = bloomguard.Guard{}

// pair is one (tenant, id).
type pair struct{ tenant, id string }

// sliceSource yields ps.
func sliceSource(ps []pair) bloomguard.Source {
	return func(ctx context.Context, add func(tenant, id string)) error {
		for _, p := range ps {
			add(p.tenant, p.id)
		}
		return nil
	}
}

func newFilter(t testing.TB, cfg bloomguard.Config) *bloomguard.Filter {
	t.Helper()
	f, err := bloomguard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func randomPairs(r *rand.Rand, n int, tenants int) []pair {
	ps := make([]pair, n)
	for i := range ps {
		ps[i] = pair{tenant: "t" + strconv.Itoa(r.IntN(tenants)), id: strconv.FormatUint(r.Uint64(), 36)}
	}
	return ps
}

func TestUnbuiltFilterAnswersMaybe(t *testing.T) {
	f := newFilter(t, bloomguard.Config{})
	if !f.MayContain("acme", "never-added") {
		t.Fatal("a filter that was never built answered no")
	}
	if s := f.Stats(); s.Built || s.Filtered != 0 {
		t.Fatalf("Stats of an unbuilt filter = %+v", s)
	}
}

func TestNoFalseNegativeForSourcedOrAddedIDs(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	f := newFilter(t, bloomguard.Config{ExpectedItems: 10_000})
	sourced := randomPairs(r, 20_000, 7) // twice the expected count: more false positives, never a false negative
	addedBefore := randomPairs(r, 500, 7)
	for _, p := range addedBefore {
		f.Add(p.tenant, p.id)
	}
	if err := f.Rebuild(context.Background(), sliceSource(sourced)); err != nil {
		t.Fatal(err)
	}
	addedAfter := randomPairs(r, 500, 7)
	for _, p := range addedAfter {
		f.Add(p.tenant, p.id)
	}
	check := func(when string) {
		for _, set := range [][]pair{sourced, addedBefore, addedAfter} {
			for _, p := range set {
				if !f.MayContain(p.tenant, p.id) {
					t.Fatalf("%s: false negative for a pair that was sourced or added", when)
				}
			}
		}
	}
	check("after the first rebuild")
	// The next source does not yield the pairs added after the first
	// Rebuild began (a source read before they were stored at the origin):
	// they survive because Add promised them.
	if err := f.Rebuild(context.Background(), sliceSource(sourced)); err != nil {
		t.Fatal(err)
	}
	for _, p := range addedAfter {
		if !f.MayContain(p.tenant, p.id) {
			t.Fatal("false negative for a pair added after the last source read began")
		}
	}
}

// TestSourceReadAfterAddIsAuthoritative: once a Rebuild whose source was read
// after an Add has completed, the source decides, so IDs deleted at the origin
// leave the filter.
func TestSourceReadAfterAddIsAuthoritative(t *testing.T) {
	f := newFilter(t, bloomguard.Config{ExpectedItems: 100})
	f.Add("acme", "deleted")
	for range 2 {
		if err := f.Rebuild(context.Background(), sliceSource(nil)); err != nil {
			t.Fatal(err)
		}
	}
	if f.MayContain("acme", "deleted") {
		t.Fatal("an ID no source yields since its Add survived two rebuilds")
	}
}

// TestNoFalseNegativeForIDsAddedDuringRebuild adds IDs while a Rebuild's
// source is being read (it blocks halfway until the adds are done) and
// while rebuilds swap filters back to back.
func TestNoFalseNegativeForIDsAddedDuringRebuild(t *testing.T) {
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	f := newFilter(t, bloomguard.Config{ExpectedItems: 2_000})
	base := randomPairs(r, 1_000, 3)
	if err := f.Rebuild(context.Background(), sliceSource(base)); err != nil {
		t.Fatal(err)
	}

	halfway := make(chan struct{})
	resume := make(chan struct{})
	blocking := func(ctx context.Context, add func(tenant, id string)) error {
		for i, p := range base {
			if i == len(base)/2 {
				close(halfway)
				<-resume
			}
			add(p.tenant, p.id)
		}
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- f.Rebuild(context.Background(), blocking) }()
	<-halfway
	during := randomPairs(r, 300, 3)
	for _, p := range during {
		f.Add(p.tenant, p.id)
		if !f.MayContain(p.tenant, p.id) {
			t.Fatal("false negative right after Add, during a rebuild")
		}
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, p := range during {
		if !f.MayContain(p.tenant, p.id) {
			t.Fatal("false negative after the swap for a pair added while the source was read")
		}
	}

	// Free-running: adders, readers of what was added, and back-to-back
	// rebuilds, all at once.
	// The origin: base plus every pair an adder stored, which it does
	// before it calls Add (as Add's contract asks). A source takes its
	// snapshot when it starts, like a database query, so pairs stored while
	// it streams reach the new filter only through Add's replay.
	var (
		originMu sync.Mutex
		origin   = append([]pair(nil), base...)
	)
	originSource := func(ctx context.Context, add func(tenant, id string)) error {
		originMu.Lock()
		snapshot := origin[:len(origin):len(origin)]
		originMu.Unlock()
		for _, p := range snapshot {
			add(p.tenant, p.id)
		}
		return nil
	}
	var (
		mu      sync.Mutex
		added   []pair
		stop    atomic.Bool
		adders  sync.WaitGroup
		readers sync.WaitGroup
		fails   atomic.Int64
	)
	for w := range 4 {
		adders.Add(1)
		go func() {
			defer adders.Done()
			wr := rand.New(rand.NewPCG(uint64(w), 4))
			for i := 0; i < 400; i++ {
				p := pair{tenant: "t" + strconv.Itoa(wr.IntN(3)), id: "w" + strconv.Itoa(w) + "-" + strconv.Itoa(i)}
				originMu.Lock()
				origin = append(origin, p)
				originMu.Unlock()
				f.Add(p.tenant, p.id)
				if !f.MayContain(p.tenant, p.id) {
					fails.Add(1)
				}
				mu.Lock()
				added = append(added, p)
				mu.Unlock()
			}
		}()
	}
	readers.Add(2)
	go func() {
		defer readers.Done()
		for !stop.Load() {
			mu.Lock()
			snapshot := added[:len(added):len(added)]
			mu.Unlock()
			for _, p := range snapshot {
				if !f.MayContain(p.tenant, p.id) {
					fails.Add(1)
				}
			}
		}
	}()
	go func() {
		defer readers.Done()
		for !stop.Load() {
			if err := f.Rebuild(context.Background(), originSource); err != nil {
				fails.Add(1)
			}
		}
	}()
	adders.Wait()
	stop.Store(true)
	readers.Wait()
	if n := fails.Load(); n != 0 {
		t.Fatalf("%d false negatives (or failed rebuilds) for pairs added concurrently with rebuilds", n)
	}
	for _, p := range added {
		if !f.MayContain(p.tenant, p.id) {
			t.Fatal("false negative after the concurrent rebuilds")
		}
	}
	if f.Stats().Rebuilds < 2 {
		t.Fatalf("only %d rebuilds ran", f.Stats().Rebuilds)
	}
}

func TestMeasuredFalsePositiveRateWithinTolerance(t *testing.T) {
	for _, rate := range []float64{0.01, 0.001} {
		t.Run(fmt.Sprint(rate), func(t *testing.T) {
			const n, probes = 100_000, 100_000
			f := newFilter(t, bloomguard.Config{ExpectedItems: n, FalsePositiveRate: rate})
			r := rand.New(rand.NewPCG(5, 6))
			ps := randomPairs(r, n, 10)
			if err := f.Rebuild(context.Background(), sliceSource(ps)); err != nil {
				t.Fatal(err)
			}
			fp := 0
			for i := range probes {
				// "absent-" never occurs in the base-36 IDs of ps.
				if f.MayContain("t"+strconv.Itoa(i%10), "absent-"+strconv.Itoa(i)) {
					fp++
				}
			}
			got := float64(fp) / probes
			if got > 1.5*rate {
				t.Fatalf("measured false-positive rate %.4f > 1.5 × configured %.4f", got, rate)
			}
			s := f.Stats()
			if s.EstimatedFalsePositiveRate > 1.5*rate || s.EstimatedFalsePositiveRate <= 0 {
				t.Fatalf("estimated false-positive rate %.4f, configured %.4f", s.EstimatedFalsePositiveRate, rate)
			}
			if s.Filtered != uint64(probes-fp) {
				t.Fatalf("Filtered = %d, want %d", s.Filtered, probes-fp)
			}
			t.Logf("configured %.4f measured %.4f estimated %.4f fill %.3f bits %d k %d",
				rate, got, s.EstimatedFalsePositiveRate, s.FillRatio, s.Bits, s.HashFunctions)
		})
	}
}

func TestOneTenantsIDsDoNotMakeAnotherTenantsMaybe(t *testing.T) {
	const n = 50_000
	f := newFilter(t, bloomguard.Config{ExpectedItems: n})
	ps := make([]pair, n)
	for i := range ps {
		ps[i] = pair{tenant: "acme", id: strconv.Itoa(i)}
	}
	if err := f.Rebuild(context.Background(), sliceSource(ps)); err != nil {
		t.Fatal(err)
	}
	fp := 0
	for i := range n {
		if f.MayContain("globex", strconv.Itoa(i)) {
			fp++
		}
	}
	if got := float64(fp) / n; got > 0.015 {
		t.Fatalf("%.4f of acme's IDs are a maybe in globex; want only false positives (≤ 1.5 %%)", got)
	}
	// The encoding is injective: moving bytes between tenant and id gives
	// another pair.
	f2 := newFilter(t, bloomguard.Config{ExpectedItems: 100})
	if err := f2.Rebuild(context.Background(), sliceSource([]pair{{"ab", "c"}})); err != nil {
		t.Fatal(err)
	}
	if f2.MayContain("a", "bc") || f2.MayContain("abc", "") || f2.MayContain("", "abc") {
		t.Fatal("a pair with the same concatenation as an added one answered maybe")
	}
}

func TestFailedRebuildKeepsCurrentFilter(t *testing.T) {
	f := newFilter(t, bloomguard.Config{ExpectedItems: 100})
	if err := f.Rebuild(context.Background(), sliceSource([]pair{{"acme", "1"}})); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("origin down")
	err := f.Rebuild(context.Background(), func(ctx context.Context, add func(tenant, id string)) error {
		add("acme", "2")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Rebuild error = %v, want one matching the source's", err)
	}
	if !f.MayContain("acme", "1") {
		t.Fatal("a failed rebuild lost an ID of the current filter")
	}
	if s := f.Stats(); s.Rebuilds != 1 || s.RebuildFailures != 1 {
		t.Fatalf("Rebuilds = %d, RebuildFailures = %d; want 1 and 1", s.Rebuilds, s.RebuildFailures)
	}
}

func TestFilterOlderThanMaxAgeAnswersMaybe(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	f := newFilter(t, bloomguard.Config{
		ExpectedItems: 100,
		MaxAge:        time.Minute,
		Now:           func() time.Time { return time.Unix(0, now.Load()) },
	})
	if err := f.Rebuild(context.Background(), sliceSource(nil)); err != nil {
		t.Fatal(err)
	}
	if f.MayContain("acme", "x") {
		t.Fatal("a fresh filter answered maybe for an ID it never saw")
	}
	now.Add(int64(time.Minute + time.Nanosecond))
	if !f.MayContain("acme", "x") {
		t.Fatal("a filter older than MaxAge answered no")
	}
}

func TestRebuildEveryRebuildsUntilClose(t *testing.T) {
	f := newFilter(t, bloomguard.Config{ExpectedItems: 100})
	calls := make(chan struct{}, 16)
	src := func(ctx context.Context, add func(tenant, id string)) error {
		add("acme", "1")
		select {
		case calls <- struct{}{}:
		default:
		}
		return nil
	}
	if err := f.RebuildEvery(context.Background(), time.Millisecond, src); err != nil {
		t.Fatal(err)
	}
	<-calls
	<-calls
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if !f.MayContain("acme", "1") {
		t.Fatal("a scheduled rebuild did not publish its source")
	}
	if err := f.RebuildEvery(context.Background(), time.Millisecond, src); !errors.Is(err, bloomguard.ErrClosed) {
		t.Fatalf("RebuildEvery after Close = %v, want ErrClosed", err)
	}
	// leakcheck (TestMain) checks that the schedule's goroutine is gone.
}

func TestCloseCancelsARunningScheduledRebuild(t *testing.T) {
	f := newFilter(t, bloomguard.Config{ExpectedItems: 100})
	started := make(chan struct{})
	var once sync.Once
	src := func(ctx context.Context, add func(tenant, id string)) error {
		once.Do(func() { close(started) })
		<-ctx.Done()
		return ctx.Err()
	}
	if err := f.RebuildEvery(context.Background(), time.Millisecond, src); err != nil {
		t.Fatal(err)
	}
	<-started
	f.Close() // returns only once the source saw its context end
	if s := f.Stats(); s.Built || s.RebuildFailures != 1 {
		t.Fatalf("after a cancelled rebuild: Built %v, RebuildFailures %d", s.Built, s.RebuildFailures)
	}
}

func TestNewRejectsConfigOutOfRange(t *testing.T) {
	for _, cfg := range []bloomguard.Config{
		{FalsePositiveRate: 1},
		{FalsePositiveRate: -0.1},
		{FalsePositiveRate: 2},
		{MaxAge: -time.Second},
	} {
		if _, err := bloomguard.New(cfg); !errors.Is(err, bloomguard.ErrInvalidConfig) {
			t.Errorf("New(%+v) error = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	f := newFilter(t, bloomguard.Config{})
	if err := f.RebuildEvery(context.Background(), 0, sliceSource(nil)); !errors.Is(err, bloomguard.ErrInvalidConfig) {
		t.Fatalf("RebuildEvery(0) = %v, want ErrInvalidConfig", err)
	}
}

func TestNextRebuildSizesForTheIDsItSaw(t *testing.T) {
	f := newFilter(t, bloomguard.Config{ExpectedItems: 100})
	r := rand.New(rand.NewPCG(7, 8))
	ps := randomPairs(r, 10_000, 1)
	for range 2 {
		if err := f.Rebuild(context.Background(), sliceSource(ps)); err != nil {
			t.Fatal(err)
		}
	}
	if s := f.Stats(); s.EstimatedFalsePositiveRate > 0.015 {
		t.Fatalf("second rebuild of 10,000 IDs into a filter configured for 100: estimated FP %.4f", s.EstimatedFalsePositiveRate)
	}
}

func TestGuardAnswersMaybeForKeysItCannotSplit(t *testing.T) {
	f := newFilter(t, bloomguard.Config{ExpectedItems: 100})
	if err := f.Rebuild(context.Background(), sliceSource([]pair{{"acme", "1"}})); err != nil {
		t.Fatal(err)
	}
	g := bloomguard.Guard{Filter: f, Split: func(key string) (string, string, bool) {
		tenant, id, ok := cut(key)
		return tenant, id, ok
	}}
	ctx := context.Background()
	if !g.MayExist(ctx, "acme/1") {
		t.Fatal("an existing key was turned away")
	}
	if g.MayExist(ctx, "acme/2") {
		t.Fatal("a missing key answered maybe")
	}
	if !g.MayExist(ctx, "no-slash") {
		t.Fatal("a key the splitter does not recognise was turned away")
	}
}

func cut(key string) (string, string, bool) {
	for i := range len(key) {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", "", false
}
