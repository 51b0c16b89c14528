package flightcache_test

// The shared tier misbehaving: hung, slow, failing, hostile. Each must cost a
// Get almost nothing beyond SharedTimeout, and never its value.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// hungShared is a SharedStore that never answers: every call blocks until
// its context ends. hangReads and hangWrites pick which calls hang; the
// others behave like mapShared.
type hungShared struct {
	*mapShared
	hangReads, hangWrites bool
	// netTimeouts makes a hung call end as go-redis ends one that its
	// context's deadline cut short: with a network timeout error, not
	// with ctx.Err().
	netTimeouts bool
	calls       atomic.Int64
	hanging     chan struct{} // when set, gets a value as each hanging read starts
}

func (s *hungShared) Get(ctx context.Context, key string) (driver.Entry, bool, error) {
	s.calls.Add(1)
	if s.hangReads {
		if s.hanging != nil {
			s.hanging <- struct{}{}
		}
		<-ctx.Done()
		if s.netTimeouts {
			return driver.Entry{}, false, errIOTimeout{}
		}
		return driver.Entry{}, false, ctx.Err()
	}
	return s.mapShared.Get(ctx, key)
}

func (s *hungShared) Set(ctx context.Context, key string, e driver.Entry) error {
	s.calls.Add(1)
	if s.hangWrites {
		<-ctx.Done()
		if s.netTimeouts {
			return errIOTimeout{}
		}
		return ctx.Err()
	}
	return s.mapShared.Set(ctx, key, e)
}

func (s *hungShared) Delete(ctx context.Context, key string) error {
	s.calls.Add(1)
	if s.hangWrites {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.mapShared.Delete(ctx, key)
}

// errIOTimeout is what a network read cut short by its deadline returns
// (net.Error with Timeout true), as go-redis passes it on.
type errIOTimeout struct{}

func (errIOTimeout) Error() string   { return "read tcp 127.0.0.1:1->127.0.0.1:6379: i/o timeout" }
func (errIOTimeout) Timeout() bool   { return true }
func (errIOTimeout) Temporary() bool { return true }

// failingShared fails every call at once and counts the calls that reach it.
type failingShared struct{ calls atomic.Int64 }

var errSharedDown = errors.New("connection refused")

func (s *failingShared) Get(context.Context, string) (driver.Entry, bool, error) {
	s.calls.Add(1)
	return driver.Entry{}, false, errSharedDown
}

func (s *failingShared) Set(context.Context, string, driver.Entry) error {
	s.calls.Add(1)
	return errSharedDown
}

func (s *failingShared) Delete(context.Context, string) error {
	s.calls.Add(1)
	return errSharedDown
}

// countBreaker is a SharedBreaker that opens after threshold consecutive
// failures and stays open (the test has no cool-down). It records every
// outcome it was told.
type countBreaker struct {
	threshold int
	mu        sync.Mutex
	fails     int
	state     driver.BreakerState
	refused   int
	outcomes  []bool // the failed flag of every done, in order
	pending   int    // Allows not yet done
}

func (b *countBreaker) Allow() (func(failed bool), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == driver.BreakerOpen {
		b.refused++
		return nil, driver.ErrBreakerOpen
	}
	b.pending++
	return func(failed bool) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.pending--
		b.outcomes = append(b.outcomes, failed)
		if !failed {
			b.fails = 0
			return
		}
		if b.fails++; b.fails >= b.threshold {
			b.state = driver.BreakerOpen
		}
	}, nil
}

func (b *countBreaker) State() driver.BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// stateRecorder records the breaker states reported in events.
type stateRecorder struct {
	*recorder
	mu     sync.Mutex
	states []driver.BreakerState
}

func (r *stateRecorder) ObserveCache(e driver.Event) {
	r.recorder.ObserveCache(e)
	if e.Kind == driver.EventBreakerChanged {
		r.mu.Lock()
		r.states = append(r.states, e.Breaker)
		r.mu.Unlock()
	}
}

// A shared tier that hangs costs a miss one SharedTimeout (its read), not
// one per shared call, and never the value: the Get skips the double-check
// and the write-back once the read timed out.
func TestHungSharedTierCostsAMissAtMostOneSharedTimeout(t *testing.T) {
	t.Run("store returns ctx.Err", func(t *testing.T) { testHungSharedTierCostsOneTimeout(t, false) })
	// go-redis: a read its context's deadline cut short is a network
	// "i/o timeout", which must count as the shared timeout all the same.
	t.Run("store returns a network timeout", func(t *testing.T) { testHungSharedTierCostsOneTimeout(t, true) })
}

func testHungSharedTierCostsOneTimeout(t *testing.T, netTimeouts bool) {
	const (
		sharedTimeout = 100 * time.Millisecond
		loadTime      = 30 * time.Millisecond
	)
	shared := &hungShared{mapShared: newMapShared(time.Now), hangReads: true, hangWrites: true, netTimeouts: netTimeouts}
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared, SharedTimeout: sharedTimeout})
	// A generous caller deadline, so that a Cache without its own shared
	// deadline fails here instead of hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	r, err := c.Fetch(ctx, "p:1", func(ctx context.Context) (*product, error) {
		time.Sleep(loadTime) // the origin's latency, not synchronisation
		return &product{ID: "1"}, nil
	})
	took := time.Since(start)
	if err != nil || r.Value == nil || r.Value.ID != "1" {
		t.Fatalf("Fetch = %+v, %v; a hung shared tier must not cost the value", r, err)
	}
	wantOutcome(t, r.Outcome, flightcache.OutcomeLoadedWriteFailed)
	if !errors.Is(r.WriteErr, context.DeadlineExceeded) {
		t.Fatalf("WriteErr = %v, want the shared timeout", r.WriteErr)
	}
	// The call count below proves one timeout was paid, not two (each
	// call to the hung tier waits out its own); the time is a sanity bound
	// with room for a busy machine.
	if limit := 10 * (sharedTimeout + loadTime); took >= limit {
		t.Fatalf("the miss took %v, want about one shared timeout plus the load (%v)", took, sharedTimeout+loadTime)
	}
	if n := shared.calls.Load(); n != 1 {
		t.Fatalf("%d shared calls, want 1: after a timeout the Get must leave the tier alone", n)
	}
}

// The write-back is not counted against the loader timeout: a value loaded
// in time is returned, as loaded_write_failed, when the shared write takes
// longer than the whole loader timeout.
func TestWriteBackSlowerThanLoaderTimeoutStillReturnsTheValue(t *testing.T) {
	shared := &hungShared{mapShared: newMapShared(time.Now), hangWrites: true}
	rec := newRecorder()
	c := newCache(t, flightcache.Options[*product]{
		Local: newLocal[*product](t, nil), Shared: shared, Observer: rec,
		LoaderTimeout: 20 * time.Millisecond, SharedTimeout: 100 * time.Millisecond,
	})
	var o origin
	r, err := c.Fetch(context.Background(), "p:1", o.load("1"))
	if err != nil || r.Value == nil {
		t.Fatalf("Fetch = %+v, %v; the value loaded in time", r, err)
	}
	wantOutcome(t, r.Outcome, flightcache.OutcomeLoadedWriteFailed)
	if !errors.Is(r.WriteErr, context.DeadlineExceeded) {
		t.Fatalf("WriteErr = %v, want the shared write's timeout", r.WriteErr)
	}
	if n := rec.count(driver.EventWriteFailed); n != 1 {
		t.Fatalf("EventWriteFailed = %d, want 1", n)
	}
	// The local tier got the value.
	wantOutcome(t, mustFetch(t, c, "p:1", o.load("1")).Outcome, flightcache.OutcomeHitLocal)
}

// The loader timeout still bounds the origin: a loader that honours its
// context fails at LoaderTimeout, whatever SharedTimeout is.
func TestLoaderTimeoutBoundsTheOriginOnly(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{
		Shared: newMapShared(time.Now), LoaderTimeout: 20 * time.Millisecond, SharedTimeout: 5 * time.Second,
	})
	var deadline time.Duration
	_, err := c.Get(context.Background(), "p:1", func(ctx context.Context) (*product, error) {
		d, _ := ctx.Deadline()
		deadline = time.Until(d)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the loader's deadline", err)
	}
	if deadline > 20*time.Millisecond {
		t.Fatalf("the loader's deadline was %v away, want at most LoaderTimeout", deadline)
	}
}

// A shared tier that fails every call is skipped once the breaker opens:
// 200 misses of distinct keys make only the calls it takes to open it.
func TestFailingSharedTierIsSkippedByTheBreaker(t *testing.T) {
	const threshold = 5
	shared := &failingShared{}
	br := &countBreaker{threshold: threshold}
	rec := &stateRecorder{recorder: newRecorder()}
	logs := &logBuffer{}
	c := newCache(t, flightcache.Options[*product]{
		Local: newLocal[*product](t, nil), Shared: shared, SharedBreaker: br, Observer: rec, Logger: logs.logger(),
	})
	var o origin
	start := time.Now()
	for i := range 200 {
		id := string(rune('a'+i%26)) + string(rune('a'+i/26))
		r, err := c.Fetch(context.Background(), "p:"+id, o.load(id))
		if err != nil || r.Value == nil {
			t.Fatalf("Fetch %d = %+v, %v; a failing shared tier must not fail the Get", i, r, err)
		}
	}
	// The call count below is the proof that no miss paid for the tier;
	// the time is only a sanity bound, with room for a busy machine.
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("200 misses took %v, want well under a second on an idle machine", took)
	}
	if n := shared.calls.Load(); n != threshold {
		t.Fatalf("%d calls reached the failing tier, want %d (then the breaker is open)", n, threshold)
	}
	if o.calls.Load() != 200 {
		t.Fatalf("origin called %d times, want 200", o.calls.Load())
	}
	rec.mu.Lock()
	states := rec.states
	rec.mu.Unlock()
	if len(states) != 1 || states[0] != driver.BreakerOpen {
		t.Fatalf("EventBreakerChanged states = %v, want [open] once", states)
	}
	// The skipped calls are counted, not logged: one warning per failure
	// kind at most, plus the breaker's change.
	if n := logs.count("shared tier read failed"); n > 1 {
		t.Fatalf("%d read-failure log lines, want at most 1 (rate-limited, none for skipped reads)", n)
	}
	if logs.count("circuit breaker changed state") != 1 {
		t.Fatalf("the breaker's opening was not logged once:\n%s", logs.String())
	}
	br.mu.Lock()
	defer br.mu.Unlock()
	if br.pending != 0 {
		t.Fatalf("%d Allows never got their done", br.pending)
	}
}

// A caller that leaves during a shared read is not a failure of the tier:
// the breaker hears a success, not a failure.
func TestCallerLeavingIsNotReportedAsABreakerFailure(t *testing.T) {
	shared := &hungShared{mapShared: newMapShared(time.Now), hangReads: true, hanging: make(chan struct{}, 1)}
	br := &countBreaker{threshold: 1}
	c := newCache(t, flightcache.Options[*product]{Shared: shared, SharedBreaker: br, SharedTimeout: 10 * time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, "p:1", (&origin{}).load("1"))
		done <- err
	}()
	<-shared.hanging // the read is in the tier: leave
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	br.mu.Lock()
	defer br.mu.Unlock()
	if len(br.outcomes) != 1 || br.outcomes[0] {
		t.Fatalf("breaker outcomes = %v, want one success", br.outcomes)
	}
	if br.state != driver.BreakerClosed {
		t.Fatalf("breaker %v, want closed", br.state)
	}
}

// While the breaker is open, Set keeps the local tier right and says the
// shared tier was skipped.
func TestSetWithBreakerOpenReturnsErrBreakerOpen(t *testing.T) {
	br := &countBreaker{threshold: 1, state: driver.BreakerOpen}
	shared := &failingShared{}
	local := newLocal[*product](t, nil)
	c := newCache(t, flightcache.Options[*product]{Local: local, Shared: shared, SharedBreaker: br})
	err := c.Set(context.Background(), "p:1", &product{ID: "1"})
	if !errors.Is(err, driver.ErrBreakerOpen) {
		t.Fatalf("Set = %v, want ErrBreakerOpen", err)
	}
	if _, ok := local.Get("p:1"); !ok {
		t.Fatal("the local tier did not get the value")
	}
	if shared.calls.Load() != 0 {
		t.Fatal("a call reached the shared tier through an open breaker")
	}
}

// Set and Delete are bounded by SharedTimeout too, not by the caller's
// context (which here never ends).
func TestSharedTimeoutBoundsExplicitWrites(t *testing.T) {
	shared := &hungShared{mapShared: newMapShared(time.Now), hangWrites: true}
	c := newCache(t, flightcache.Options[*product]{Shared: shared, SharedTimeout: 20 * time.Millisecond})
	if err := c.Set(context.Background(), "p:1", &product{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Set = %v, want the shared timeout", err)
	}
	if err := c.Delete(context.Background(), "p:1"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Delete = %v, want the shared timeout", err)
	}
}

// An entry read back from the shared tier lives at most MaxTTL (and
// StaleFor after that), whatever its envelope claims: a corrupt or hostile
// entry cannot live forever in the local tier.
func TestSharedEntryLifetimeIsCappedAtMaxTTL(t *testing.T) {
	shared := newMapShared(time.Now)
	now := time.Now()
	data, _ := json.Marshal(&product{ID: "1"})
	forever := now.Add(100 * 365 * 24 * time.Hour)
	shared.m["p:1"] = driver.Entry{Value: data, Meta: driver.Meta{
		FreshUntil: forever, StaleUntil: forever.Add(time.Hour), LoadedAt: now, LoadDuration: 1000 * time.Hour,
	}}
	local := newLocal[*product](t, nil)
	const staleFor = time.Minute
	c := newCache(t, flightcache.Options[*product]{Local: local, Shared: shared, StaleFor: staleFor})
	wantOutcome(t, mustFetch(t, c, "p:1", (&origin{}).load("1")).Outcome, flightcache.OutcomeHitShared)
	it, ok := local.Get("p:1")
	if !ok {
		t.Fatal("the shared hit was not copied into the local tier")
	}
	if limit := time.Now().Add(flightcache.MaxTTL); it.FreshUntil.After(limit) {
		t.Fatalf("FreshUntil = %v, want at most now+MaxTTL (%v)", it.FreshUntil, limit)
	}
	if limit := it.FreshUntil.Add(staleFor); it.StaleUntil.After(limit) {
		t.Fatalf("StaleUntil = %v, want at most FreshUntil+StaleFor (%v)", it.StaleUntil, limit)
	}
	if it.LoadDuration > 10*time.Second {
		t.Fatalf("LoadDuration = %v, want at most the loader timeout", it.LoadDuration)
	}
}

// Times in the shared tier are wall-clock times, whatever clock the Cache
// runs on: another process (here a Cache on a clock ten years off) reads
// them right.
func TestSharedTierTimesAreWallClockWhateverTheCacheClock(t *testing.T) {
	shared := newMapShared(time.Now)
	var written driver.Entry
	shared.onSet = func(e driver.Entry) { written = e }
	clockA := newFakeClock() // 2030
	a := clocked(t, clockA, flightcache.Options[*product]{Shared: shared, TTL: time.Minute, Jitter: flightcache.DisableJitter})
	var o origin
	before := time.Now()
	wantOutcome(t, mustFetch(t, a, "p:1", o.load("1")).Outcome, flightcache.OutcomeLoaded)
	after := time.Now()
	if written.LoadedAt.Before(before) || written.LoadedAt.After(after) {
		t.Fatalf("LoadedAt in the shared tier = %v, want the wall clock in [%v, %v]", written.LoadedAt, before, after)
	}
	if d := written.FreshUntil.Sub(written.LoadedAt); d != time.Minute {
		t.Fatalf("FreshUntil - LoadedAt = %v, want the TTL", d)
	}

	clockB := newFakeClock()
	clockB.Advance(10 * 365 * 24 * time.Hour) // 2040
	b := clocked(t, clockB, flightcache.Options[*product]{Shared: shared, TTL: time.Minute})
	r := mustFetch(t, b, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeHitShared)
	if r.Age > time.Since(before) {
		t.Fatalf("Age = %v on another clock, want the real time since the load (at most %v)", r.Age, time.Since(before))
	}
}

// rejectingShared is a SharedStore that works but rejects every entry: each
// Get finds a corrupt (or foreign) entry, each Set a value too large. Both
// errors are about one entry, as redisstore's are.
type rejectingShared struct{ gets, sets atomic.Int64 }

var errRejected = fmt.Errorf("corrupt payload under key #0123abcd: %w", driver.ErrEntryRejected)

func (s *rejectingShared) Get(context.Context, string) (driver.Entry, bool, error) {
	s.gets.Add(1)
	return driver.Entry{}, false, errRejected
}

func (s *rejectingShared) Set(context.Context, string, driver.Entry) error {
	s.sets.Add(1)
	return errRejected
}

func (s *rejectingShared) Delete(context.Context, string) error { return nil }

// Errors about one entry (corrupt, another key's, too large) say nothing
// about the tier: twenty in a row, on reads and write-backs, by Fetch and by
// FetchMany, leave a breaker that opens after five failures closed, and
// every key is still read from the tier and loaded.
func TestEntryRejectionsDoNotOpenTheBreaker(t *testing.T) {
	const n = 20
	shared := &rejectingShared{}
	br := &countBreaker{threshold: 5}
	c := newCache(t, flightcache.Options[*product]{Shared: shared, SharedBreaker: br})
	var o origin
	for i := range n {
		id := fmt.Sprint(i)
		r, err := c.Fetch(context.Background(), "p:"+id, o.load(id))
		if err != nil || r.Value == nil {
			t.Fatalf("Fetch %d = %+v, %v; a rejected entry is a miss", i, r, err)
		}
		wantOutcome(t, r.Outcome, flightcache.OutcomeLoadedWriteFailed)
		if !errors.Is(r.WriteErr, driver.ErrEntryRejected) {
			t.Fatalf("WriteErr = %v, want the store's rejection", r.WriteErr)
		}
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("q:", i)
	}
	for i, kr := range c.FetchMany(context.Background(), keys, func(_ context.Context, keys []string) (map[string]*product, error) {
		m := make(map[string]*product, len(keys))
		for _, k := range keys {
			m[k] = &product{ID: k}
		}
		return m, nil
	}) {
		if kr.Err != nil || kr.Value == nil {
			t.Fatalf("FetchMany key %d = %+v; a rejected entry is that key's miss", i, kr)
		}
	}
	if s := br.State(); s != driver.BreakerClosed {
		t.Fatalf("breaker %v after %d entry rejections, want closed", s, 2*n)
	}
	br.mu.Lock()
	defer br.mu.Unlock()
	for i, failed := range br.outcomes {
		if failed {
			t.Fatalf("the breaker heard a failure (call %d of %d)", i, len(br.outcomes))
		}
	}
	if br.refused != 0 || shared.gets.Load() < 2*n || shared.sets.Load() < n {
		t.Fatalf("refused %d, gets %d, sets %d: every key should reach the tier", br.refused, shared.gets.Load(), shared.sets.Load())
	}
}

// slowCodec is JSON whose Marshal signals encoding when it starts, then
// waits for release and for hold more: a value slow to encode (tens of
// MiB).
type slowCodec struct {
	driver.JSONCodec[*product]
	encoding chan struct{}
	release  chan struct{}
	hold     time.Duration
}

func (s slowCodec) Marshal(v *product) ([]byte, error) {
	s.encoding <- struct{}{}
	<-s.release
	<-time.After(s.hold)
	return s.JSONCodec.Marshal(v)
}

// The loader timeout covers the origin only: a value loaded just in time
// reaches the leader and every waiter even when encoding it for the shared
// tier takes longer than the whole flight timeout would have allowed.
func TestSlowEncodingAfterATimelyLoadNeverLosesTheValue(t *testing.T) {
	t.Run("write-back", func(t *testing.T) { testSlowEncodingAfterATimelyLoad(t, nil) })
	// With a Coordinator the leader encodes for its lease's completion.
	t.Run("lease completion", func(t *testing.T) {
		coord := &downCoordinator{}
		coord.up.Store(true)
		testSlowEncodingAfterATimelyLoad(t, coord)
	})
}

func testSlowEncodingAfterATimelyLoad(t *testing.T, coord driver.Coordinator) {
	const (
		loaderTimeout = 100 * time.Millisecond
		sharedTimeout = 10 * time.Millisecond
		coalesceWait  = 10 * time.Millisecond
		waiters       = 3
	)
	// Longer than the flight's whole hard timeout, cluster part included.
	codec := slowCodec{encoding: make(chan struct{}, 1), release: make(chan struct{}),
		hold: loaderTimeout + coalesceWait + 4*sharedTimeout + 50*time.Millisecond}
	rec := newRecorder()
	opts := flightcache.Options[*product]{
		Shared: newMapShared(time.Now), Codec: codec, Observer: rec,
		LoaderTimeout: loaderTimeout, SharedTimeout: sharedTimeout,
	}
	if coord != nil {
		opts.Coordinator, opts.CoalesceWait = coord, coalesceWait
	}
	c := newCache(t, opts)
	load := func(ctx context.Context) (*product, error) {
		<-time.After(5 * time.Millisecond) // well in time, however loaded the machine
		return &product{ID: "1"}, nil
	}
	type answer struct {
		r   flightcache.Result[*product]
		err error
	}
	answers := make(chan answer, waiters+1)
	fetch := func() {
		r, err := c.Fetch(context.Background(), "p:1", load)
		answers <- answer{r, err}
	}
	go fetch()
	<-codec.encoding // loaded; the write-back is encoding
	for range waiters {
		go fetch()
	}
	deadline := time.Now().Add(10 * time.Second)
	for rec.engineCount("shared") < waiters {
		if time.Now().After(deadline) {
			t.Fatal("the waiters never joined the flight")
		}
		runtime.Gosched()
	}
	close(codec.release)
	for range waiters + 1 {
		a := <-answers
		if a.err != nil || a.r.Value == nil || a.r.Value.ID != "1" {
			t.Fatalf("Fetch = %+v, %v; the value was loaded in time", a.r, a.err)
		}
	}
	if n := rec.engineCount("timeout"); n != 0 {
		t.Fatalf("%d engine timeouts; the write-back is not the loader's", n)
	}
}

// The same for a batch: a chunk loaded in time is answered even when its
// write-back outlasts the flights' timeout.
func TestSlowEncodingAfterATimelyBatchLoadNeverLosesTheValues(t *testing.T) {
	const (
		loaderTimeout = 100 * time.Millisecond
		sharedTimeout = 10 * time.Millisecond
	)
	codec := slowCodec{encoding: make(chan struct{}, 2), release: make(chan struct{}),
		hold: loaderTimeout + 3*sharedTimeout + 50*time.Millisecond}
	close(codec.release)
	c := newCache(t, flightcache.Options[*product]{
		Shared: newMapShared(time.Now), Codec: codec,
		LoaderTimeout: loaderTimeout, SharedTimeout: sharedTimeout,
	})
	res := c.FetchMany(context.Background(), []string{"p:1", "p:2"}, func(_ context.Context, keys []string) (map[string]*product, error) {
		<-time.After(5 * time.Millisecond)
		m := make(map[string]*product, len(keys))
		for _, k := range keys {
			m[k] = &product{ID: k}
		}
		return m, nil
	})
	for i, kr := range res {
		if kr.Err != nil || kr.Value == nil {
			t.Fatalf("key %d = %+v; the values were loaded in time", i, kr)
		}
	}
}
