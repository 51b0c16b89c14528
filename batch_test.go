package flightcache_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/singleflight"
)

// batchOrigin is a BatchLoadFunc that records the keys of every call and
// counts loads per key. Keys in missing do not exist; before, when set,
// runs first (to block, fail or panic).
type batchOrigin struct {
	mu      sync.Mutex
	calls   [][]string
	perKey  map[string]int
	missing map[string]bool
	err     error
	extra   map[string]*product // returned on top of what was asked
	before  func(ctx context.Context, keys []string)
	// errFromCtx returns ctx's error, once before has returned, if ctx
	// has ended.
	errFromCtx bool
}

func (o *batchOrigin) load(ctx context.Context, keys []string) (map[string]*product, error) {
	o.mu.Lock()
	o.calls = append(o.calls, slices.Clone(keys))
	if o.perKey == nil {
		o.perKey = map[string]int{}
	}
	for _, k := range keys {
		o.perKey[k]++
	}
	o.mu.Unlock()
	if o.before != nil {
		o.before(ctx, keys)
	}
	if o.errFromCtx && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if o.err != nil {
		return nil, o.err
	}
	m := make(map[string]*product, len(keys))
	for _, k := range keys {
		if !o.missing[k] {
			m[k] = &product{ID: k, Name: "p-" + k}
		}
	}
	for k, v := range o.extra {
		m[k] = v
	}
	return m, nil
}

func (o *batchOrigin) callKeys() [][]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.calls)
}

func (o *batchOrigin) loads(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.perKey[key]
}

func keyRange(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return keys
}

func outcomes(rs []flightcache.KeyResult[*product]) []flightcache.Outcome {
	out := make([]flightcache.Outcome, len(rs))
	for i, r := range rs {
		out[i] = r.Outcome
	}
	return out
}

func TestFetchManyLoadsOnlyTheKeysNoTierHasInOneCall(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{})
	var single origin
	mustFetch(t, c, "a", single.load("a"))
	mustFetch(t, c, "b", single.load("b"))
	o := &batchOrigin{missing: map[string]bool{"gone": true}}

	rs := c.FetchMany(context.Background(), []string{"a", "b", "c", "gone"}, o.load)
	want := []flightcache.Outcome{flightcache.OutcomeHitLocal, flightcache.OutcomeHitLocal, flightcache.OutcomeLoaded, flightcache.OutcomeLoaded}
	if got := outcomes(rs); !slices.Equal(got, want) {
		t.Fatalf("outcomes = %v, want %v", got, want)
	}
	if calls := o.callKeys(); len(calls) != 1 || !slices.Equal(calls[0], []string{"c", "gone"}) {
		t.Fatalf("loader calls = %v, want one call for [c gone]", calls)
	}
	if rs[0].Value.Name != "p-a" || rs[2].Value.Name != "p-c" || rs[2].Err != nil {
		t.Fatalf("values = %+v", rs)
	}
	if !errors.Is(rs[3].Err, flightcache.ErrNotFound) || rs[3].Value != nil {
		t.Fatalf("a key the loader left out = %+v, want ErrNotFound", rs[3])
	}

	// Everything is cached now, the missing key negatively.
	rs = c.FetchMany(context.Background(), []string{"a", "b", "c", "gone"}, o.load)
	want = []flightcache.Outcome{flightcache.OutcomeHitLocal, flightcache.OutcomeHitLocal, flightcache.OutcomeHitLocal, flightcache.OutcomeNegativeHit}
	if got := outcomes(rs); !slices.Equal(got, want) || len(o.callKeys()) != 1 {
		t.Fatalf("second batch: outcomes %v after %d loader calls, want %v after 1", got, len(o.callKeys()), want)
	}
	if _, err := c.Get(context.Background(), "gone", single.load("gone")); !errors.Is(err, flightcache.ErrNotFound) || single.calls.Load() != 2 {
		t.Fatalf("single Get of the negatively cached key: %v after %d loads", err, single.calls.Load())
	}
}

func TestGetManyMapsFoundKeysAndLeavesMissingOnesOut(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{})
	o := &batchOrigin{missing: map[string]bool{"x": true}}
	m, err := c.GetMany(context.Background(), []string{"a", "x", "b"}, o.load)
	if err != nil || len(m) != 2 || m["a"].Name != "p-a" || m["b"].Name != "p-b" {
		t.Fatalf("GetMany = %v, %v", m, err)
	}
	o.err = errOrigin
	m, err = c.GetMany(context.Background(), []string{"a", "new1", "new2"}, o.load)
	var be *flightcache.BatchError
	if !errors.As(err, &be) || be.Failed != 2 || !errors.Is(err, errOrigin) || len(m) != 1 || m["a"] == nil {
		t.Fatalf("GetMany with a failing loader = %v, %v; want a's value and a BatchError for 2 keys", m, err)
	}
}

func TestFetchManyAnswersRepeatedKeysFromOneLoad(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{})
	o := &batchOrigin{}
	rs := c.FetchMany(context.Background(), []string{"a", "b", "a", "a"}, o.load)
	if calls := o.callKeys(); len(calls) != 1 || !slices.Equal(calls[0], []string{"a", "b"}) {
		t.Fatalf("loader calls = %v, want one for [a b]", calls)
	}
	if rs[0].Value != rs[2].Value || rs[0].Value != rs[3].Value || rs[3].Outcome != flightcache.OutcomeLoaded {
		t.Fatalf("repeated key answered differently: %+v", rs)
	}
}

func TestFetchManySplitsItsLoadIntoChunksOfMaxBatchSize(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{MaxBatchSize: 3})
	o := &batchOrigin{}
	keys := keyRange("k", 8)
	rs := c.FetchMany(context.Background(), keys, o.load)
	calls := o.callKeys()
	var all []string
	for _, call := range calls {
		if len(call) > 3 {
			t.Fatalf("a loader call got %d keys, more than MaxBatchSize 3", len(call))
		}
		all = append(all, call...)
	}
	slices.Sort(all)
	want := slices.Sorted(slices.Values(keys))
	if len(calls) != 3 || !slices.Equal(all, want) {
		t.Fatalf("loader calls = %v, want 3 chunks covering every key once", calls)
	}
	for i, r := range rs {
		if r.Err != nil || r.Value.ID != keys[i] {
			t.Fatalf("key %d = %+v", i, r)
		}
	}
}

func TestMaxBatchSizeIsValidated(t *testing.T) {
	for _, n := range []int{-1, 10001} {
		_, err := flightcache.New(flightcache.Options[int]{Local: newLocal[int](t, nil), MaxBatchSize: n})
		var ce *flightcache.ConfigError
		if !errors.As(err, &ce) || ce.Field != "MaxBatchSize" {
			t.Fatalf("MaxBatchSize %d: err = %v", n, err)
		}
	}
}

func TestFetchManyFailsOnlyTheInvalidKeys(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{MaxKeyLen: 8})
	o := &batchOrigin{}
	rs := c.FetchMany(context.Background(), []string{"", "ok", "far-too-long", "\xff"}, o.load)
	for _, i := range []int{0, 2, 3} {
		if !errors.Is(rs[i].Err, flightcache.ErrInvalidKey) || rs[i].Outcome != flightcache.OutcomeLoadFailed {
			t.Fatalf("invalid key %d = %+v", i, rs[i])
		}
	}
	if rs[1].Err != nil || rs[1].Value.ID != "ok" {
		t.Fatalf("valid key = %+v", rs[1])
	}
	if calls := o.callKeys(); len(calls) != 1 || !slices.Equal(calls[0], []string{"ok"}) {
		t.Fatalf("loader calls = %v", calls)
	}
}

func TestFetchManyAfterCloseFailsEveryKey(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{})
	o := &batchOrigin{}
	c.FetchMany(context.Background(), []string{"a"}, o.load)
	c.Close()
	for _, r := range c.FetchMany(context.Background(), []string{"a", "b"}, o.load) {
		if !errors.Is(r.Err, singleflight.ErrClosed) {
			t.Fatalf("after Close = %+v", r)
		}
	}
	if len(o.callKeys()) != 1 {
		t.Fatal("a closed Cache called the loader")
	}
}

func TestFetchManyWithNilLoaderFailsOnlyTheMisses(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{})
	var o origin
	mustFetch(t, c, "a", o.load("a"))
	rs := c.FetchMany(context.Background(), []string{"a", "b"}, nil)
	if rs[0].Err != nil || !errors.Is(rs[1].Err, singleflight.ErrNilFunc) {
		t.Fatalf("nil loader = %+v", rs)
	}
}

func TestBatchLoaderErrorFailsEveryKeyOfTheCall(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{})
	o := &batchOrigin{err: errOrigin}
	for _, r := range c.FetchMany(context.Background(), []string{"a", "b"}, o.load) {
		if !errors.Is(r.Err, errOrigin) || r.Outcome != flightcache.OutcomeLoadFailed {
			t.Fatalf("failed load = %+v", r)
		}
	}
	o.err = nil // nothing was cached: the next batch loads again
	for _, r := range c.FetchMany(context.Background(), []string{"a", "b"}, o.load) {
		if r.Err != nil || r.Outcome != flightcache.OutcomeLoaded {
			t.Fatalf("after recovery = %+v", r)
		}
	}
}

func TestPanickingBatchLoaderFailsItsKeysAndTheCacheKeepsWorking(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{})
	var single origin
	mustFetch(t, c, "hit", single.load("hit"))
	o := &batchOrigin{before: func(context.Context, []string) { panic("boom") }}
	rs := c.FetchMany(context.Background(), []string{"hit", "a", "b"}, o.load)
	var pe *singleflight.PanicError
	if rs[0].Err != nil || !errors.As(rs[1].Err, &pe) || pe.Value != "boom" || !errors.As(rs[2].Err, &pe) {
		t.Fatalf("panicking loader = %+v", rs)
	}
	o.before = nil
	if rs := c.FetchMany(context.Background(), []string{"a", "b"}, o.load); rs[0].Err != nil || rs[1].Err != nil {
		t.Fatalf("after the panic = %+v", rs)
	}
}

func TestBatchLoaderTimeoutReleasesItsKeysAndEndsTheLoadersContext(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{LoaderTimeout: 20 * time.Millisecond})
	loaderDone := make(chan error, 1)
	o := &batchOrigin{before: func(ctx context.Context, _ []string) {
		<-ctx.Done()
		loaderDone <- ctx.Err()
	}}
	o.errFromCtx = true // a loader whose query ended with its context
	for _, r := range c.FetchMany(context.Background(), []string{"a", "b"}, o.load) {
		if !errors.Is(r.Err, context.DeadlineExceeded) || r.Outcome != flightcache.OutcomeLoadFailed {
			t.Fatalf("timed-out key = %+v", r)
		}
	}
	if err := <-loaderDone; err == nil {
		t.Fatal("the loader's context did not end with its keys' flights")
	}
}

func TestBatchCallerLeavingDoesNotCancelTheLoad(t *testing.T) {
	local := &notifyLocal[*product]{LocalStore: newLocal[*product](t, nil), sets: make(chan driver.Item[*product], 2)}
	c := newCache(t, flightcache.Options[*product]{Local: local})
	entered, release := make(chan struct{}), make(chan struct{})
	var loaderErr atomic.Value
	o := &batchOrigin{before: func(ctx context.Context, _ []string) {
		close(entered)
		<-release
		loaderErr.Store(fmt.Sprint(ctx.Err()))
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan []flightcache.KeyResult[*product])
	go func() { done <- c.FetchMany(ctx, []string{"a", "b"}, o.load) }()
	<-entered
	cancel()
	for _, r := range <-done {
		if !errors.Is(r.Err, context.Canceled) {
			t.Fatalf("caller that left = %+v", r)
		}
	}
	close(release)
	<-local.sets
	<-local.sets
	if got := loaderErr.Load(); got != "<nil>" {
		t.Fatalf("the loader's context ended with the caller: %v", got)
	}
	rs := c.FetchMany(context.Background(), []string{"a", "b"}, o.load)
	if rs[0].Outcome != flightcache.OutcomeHitLocal || rs[1].Outcome != flightcache.OutcomeHitLocal || len(o.callKeys()) != 1 {
		t.Fatalf("after the load finished: %v, %d loader calls", outcomes(rs), len(o.callKeys()))
	}
}

func TestExplicitWriteDuringABatchLoadWins(t *testing.T) {
	for _, op := range []string{"Set", "Delete"} {
		t.Run(op, func(t *testing.T) {
			shared := newMapShared(time.Now)
			c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared})
			entered, release := make(chan struct{}), make(chan struct{})
			o := &batchOrigin{before: func(context.Context, []string) {
				close(entered)
				<-release
			}}
			done := make(chan []flightcache.KeyResult[*product])
			go func() { done <- c.FetchMany(context.Background(), []string{"a", "b"}, o.load) }()
			<-entered
			mine := &product{ID: "a", Name: "explicit"}
			var err error
			if op == "Set" {
				err = c.Set(context.Background(), "a", mine)
			} else {
				err = c.Delete(context.Background(), "a")
			}
			if err != nil {
				t.Fatal(err)
			}
			close(release)
			rs := <-done
			if rs[0].Value.Name != "p-a" {
				t.Fatalf("the batch's own caller got %+v, want the value it loaded", rs[0])
			}
			var single origin
			r := mustFetch(t, c, "a", single.load("a"))
			switch op {
			case "Set":
				if r.Value != mine || r.Outcome != flightcache.OutcomeHitLocal {
					t.Fatalf("after Set, Get = %+v: the batch's write-back overwrote the explicit write", r)
				}
				if e := shared.m["a"]; string(e.Value) != `{"ID":"a","Name":"explicit","Price":0}` {
					t.Fatalf("shared tier after Set = %s", e.Value)
				}
			case "Delete":
				if r.Outcome != flightcache.OutcomeLoaded || single.calls.Load() != 1 {
					t.Fatalf("after Delete, Get = %+v: the batch's write-back resurrected the entry", r)
				}
			}
			if r := mustFetch(t, c, "b", single.load("b")); r.Outcome != flightcache.OutcomeHitLocal {
				t.Fatalf("the key nobody wrote was not written back: %v", r.Outcome)
			}
		})
	}
}

func TestBatchLoaderReturningUnrequestedKeysCannotPoisonTheCache(t *testing.T) {
	rec := newRecorder()
	c := newCache(t, flightcache.Options[*product]{Observer: rec})
	o := &batchOrigin{extra: map[string]*product{"tenant=other|id=1": {Name: "not yours"}}}
	c.FetchMany(context.Background(), []string{"tenant=me|id=1"}, o.load)
	if rec.count(driver.EventUnrequestedKey) != 1 {
		t.Fatalf("EventUnrequestedKey reported %d times, want 1", rec.count(driver.EventUnrequestedKey))
	}
	var single origin
	r := mustFetch(t, c, "tenant=other|id=1", single.load("1"))
	if r.Outcome != flightcache.OutcomeLoaded || r.Value.Name == "not yours" {
		t.Fatalf("the unrequested key was cached: %+v", r)
	}
}

// A loader returning keys it was not asked for and a failing write-back,
// in the same second, are both logged: neither warning's rate limit
// silences the other.
func TestUnrequestedKeysAndWriteFailuresAreRateLimitedApart(t *testing.T) {
	logs := &logBuffer{}
	shared := newMapShared(time.Now)
	shared.writeErr = errors.New("write refused")
	c := newCache(t, flightcache.Options[*product]{Shared: shared, Logger: logs.logger()})
	o := &batchOrigin{extra: map[string]*product{"other": {Name: "not asked"}}}
	c.FetchMany(context.Background(), []string{"mine"}, o.load)
	if logs.count("not asked for") != 1 || logs.count("tier write failed") != 1 {
		t.Fatalf("want one unrequested-keys warning and one write failure:\n%s", logs.String())
	}
}

func TestBatchServesStaleValuesWhenItsLoadFails(t *testing.T) {
	clock := newFakeClock()
	c := clocked(t, clock, flightcache.Options[*product]{TTL: time.Second, StaleFor: time.Minute})
	o := &batchOrigin{}
	first := c.FetchMany(context.Background(), []string{"a"}, o.load)
	clock.Advance(2 * time.Second)
	o.err = errOrigin
	rs := c.FetchMany(context.Background(), []string{"a", "new"}, o.load)
	if rs[0].Outcome != flightcache.OutcomeStale || rs[0].Err != nil || rs[0].Value != first[0].Value || rs[0].Age != 2*time.Second {
		t.Fatalf("stale key = %+v", rs[0])
	}
	if !errors.Is(rs[1].Err, errOrigin) {
		t.Fatalf("key without a stale value = %+v", rs[1])
	}
}

func TestBatchSoftTimeoutServesStaleWhileTheLoadGoesOn(t *testing.T) {
	clock := newFakeClock()
	local := &notifyLocal[*product]{LocalStore: newLocal[*product](t, clock), sets: make(chan driver.Item[*product], 2)}
	c := clocked(t, clock, flightcache.Options[*product]{Local: local, TTL: time.Second, StaleFor: time.Minute, SoftTimeout: 10 * time.Millisecond})
	o := &batchOrigin{}
	c.FetchMany(context.Background(), []string{"a"}, o.load)
	<-local.sets
	clock.Advance(2 * time.Second)
	release := make(chan struct{})
	o.before = func(context.Context, []string) { <-release }
	rs := c.FetchMany(context.Background(), []string{"a"}, o.load)
	if rs[0].Outcome != flightcache.OutcomeStale {
		t.Fatalf("slow load with a stale value = %+v", rs[0])
	}
	close(release)
	it := <-local.sets // the load went on and refreshed the entry
	if !it.FreshUntil.After(clock.Now()) {
		t.Fatal("the background load did not refresh the entry")
	}
}

func TestBatchRespectsMaxInFlight(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{MaxInFlight: 2})
	o := &batchOrigin{}
	rs := c.FetchMany(context.Background(), keyRange("k", 5), o.load)
	loaded, rejected := 0, 0
	for _, r := range rs {
		switch {
		case r.Err == nil:
			loaded++
		case errors.Is(r.Err, singleflight.ErrTooManyInFlight):
			rejected++
		default:
			t.Fatalf("unexpected %+v", r)
		}
	}
	if loaded != 2 || rejected != 3 {
		t.Fatalf("%d loaded, %d rejected; want 2 and 3", loaded, rejected)
	}
}

// guardFunc adapts a function to driver.Guard.
type guardFunc func(key string) bool

func (g guardFunc) MayExist(_ context.Context, key string) bool { return g(key) }

func TestBatchGuardTurnsKeysAwayBeforeTheSharedTierAndTheLoader(t *testing.T) {
	shared := newMapShared(time.Now)
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared,
		Guard: guardFunc(func(k string) bool { return k != "made-up" })})
	o := &batchOrigin{}
	rs := c.FetchMany(context.Background(), []string{"made-up", "real"}, o.load)
	if rs[0].Outcome != flightcache.OutcomeFiltered || !errors.Is(rs[0].Err, flightcache.ErrNotFound) {
		t.Fatalf("filtered key = %+v", rs[0])
	}
	if calls := o.callKeys(); len(calls) != 1 || !slices.Equal(calls[0], []string{"real"}) {
		t.Fatalf("loader calls = %v", calls)
	}
	if shared.gets.Load() != 2 { // "real": the read and the double-check
		t.Fatalf("%d shared Gets, want 2, none for the filtered key", shared.gets.Load())
	}
}

func TestBatchEarlyRefreshReloadsOnlyTheDueKey(t *testing.T) {
	clock := newFakeClock()
	local := &notifyLocal[*product]{LocalStore: newLocal[*product](t, clock), sets: make(chan driver.Item[*product], 2)}
	c := clocked(t, clock, flightcache.Options[*product]{Local: local, TTL: time.Minute, Jitter: flightcache.DisableJitter, EarlyRefresh: true})
	o := &batchOrigin{before: func(_ context.Context, keys []string) {
		if len(keys) == 1 && keys[0] == "slow" {
			clock.Advance(30 * time.Second) // Δ = 30s for "slow" only
		}
	}}
	c.FetchMany(context.Background(), []string{"slow"}, o.load)
	<-local.sets
	clock.Advance(time.Minute - time.Nanosecond) // 1ns before expiry with Δ = 30s: a refresh is all but certain
	c.FetchMany(context.Background(), []string{"fast"}, o.load)
	<-local.sets
	rs := c.FetchMany(context.Background(), []string{"slow", "fast"}, o.load)
	if rs[0].Outcome != flightcache.OutcomeRefreshed || rs[1].Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("outcomes = %v, want refreshed for the key near expiry only", outcomes(rs))
	}
	<-local.sets // the refresh's write-back
	if calls := o.callKeys(); len(calls) != 3 || !slices.Equal(calls[2], []string{"slow"}) {
		t.Fatalf("loader calls = %v, want the refresh to load [slow] alone", calls)
	}
}

func TestBatchJoinsASingleLoadInFlight(t *testing.T) {
	joined := make(joinSignal, 1)
	c := newCache(t, flightcache.Options[*product]{Observer: joined})
	entered, release := make(chan struct{}), make(chan struct{})
	var single atomic.Int64
	slow := func(ctx context.Context) (*product, error) {
		single.Add(1)
		close(entered)
		<-release
		return &product{ID: "a", Name: "single"}, nil
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.Get(context.Background(), "a", slow) })
	<-entered
	o := &batchOrigin{}
	done := make(chan []flightcache.KeyResult[*product])
	go func() { done <- c.FetchMany(context.Background(), []string{"a", "b"}, o.load) }()
	<-joined
	close(release)
	rs := <-done
	wg.Wait()
	if rs[0].Value.Name != "single" || rs[0].Outcome != flightcache.OutcomeCoalesced {
		t.Fatalf("joined key = %+v", rs[0])
	}
	if calls := o.callKeys(); len(calls) != 1 || !slices.Equal(calls[0], []string{"b"}) || single.Load() != 1 {
		t.Fatalf("loader calls = %v, single loads %d; want [b] and 1", calls, single.Load())
	}
}

func TestSingleGetJoinsABatchLoadInFlight(t *testing.T) {
	joined := make(joinSignal, 1)
	c := newCache(t, flightcache.Options[*product]{Observer: joined})
	entered, release := make(chan struct{}), make(chan struct{})
	o := &batchOrigin{before: func(context.Context, []string) {
		close(entered)
		<-release
	}}
	done := make(chan []flightcache.KeyResult[*product])
	go func() { done <- c.FetchMany(context.Background(), []string{"a", "b"}, o.load) }()
	<-entered
	var single origin
	got := make(chan flightcache.Result[*product])
	go func() {
		r, _ := c.Fetch(context.Background(), "b", single.load("b"))
		got <- r
	}()
	<-joined
	close(release)
	rs := <-done
	r := <-got
	if r.Value != rs[1].Value || r.Outcome != flightcache.OutcomeCoalesced || single.calls.Load() != 0 {
		t.Fatalf("single Get = %+v after %d single loads; want the batch's value, coalesced", r, single.calls.Load())
	}
	if rs[1].Outcome != flightcache.OutcomeLoaded {
		t.Fatalf("batch key = %+v", rs[1])
	}
}

// TestBatchDoesNotWaitForAJoinedKeyBeforeLoadingItsOwn is the interleaving
// that deadlocks a batch that waits for all its keys before loading: a
// single load of b waits until the batch's loader has run, and the batch
// joined b. The batch must load a at once and take b from the single load.
func TestBatchDoesNotWaitForAJoinedKeyBeforeLoadingItsOwn(t *testing.T) {
	joined := make(joinSignal, 1)
	c := newCache(t, flightcache.Options[*product]{Observer: joined})
	entered, batchLoaded := make(chan struct{}), make(chan struct{})
	slow := func(ctx context.Context) (*product, error) {
		close(entered)
		<-batchLoaded // released only by the batch's loader
		return &product{ID: "b", Name: "single"}, nil
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.Get(context.Background(), "b", slow) })
	<-entered
	o := &batchOrigin{before: func(_ context.Context, keys []string) {
		if slices.Equal(keys, []string{"a"}) {
			close(batchLoaded)
		}
	}}
	rs := c.FetchMany(context.Background(), []string{"a", "b"}, o.load)
	wg.Wait()
	if rs[0].Outcome != flightcache.OutcomeLoaded || rs[1].Value.Name != "single" {
		t.Fatalf("outcomes %v, b = %+v", outcomes(rs), rs[1].Value)
	}
}

// TestOverlappingBatchesAndSinglesLoadEachKeyOnce: concurrent cold
// batches with overlapping keys, and single Gets of the same keys, load
// every key exactly once between them, and all finish.
func TestOverlappingBatchesAndSinglesLoadEachKeyOnce(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{MaxBatchSize: 7})
	o := &batchOrigin{}
	var singles sync.Map // key → *atomic.Int64
	pool := keyRange("k", 60)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for b := range 12 {
		wg.Go(func() {
			<-start
			// Batch b asks for 20 keys starting at 5·b, in a rotated
			// order, so neighbours overlap by 15 keys in opposite orders.
			keys := slices.Clone(pool[(5*b)%40 : (5*b)%40+20])
			if b%2 == 1 {
				slices.Reverse(keys)
			}
			for i, r := range c.FetchMany(context.Background(), keys, o.load) {
				if r.Err != nil || r.Value == nil || r.Value.ID != keys[i] {
					t.Errorf("batch %d key %s = %+v", b, keys[i], r)
				}
			}
		})
	}
	for i := range 20 {
		wg.Go(func() {
			<-start
			k := pool[(i*3)%len(pool)]
			n, _ := singles.LoadOrStore(k, new(atomic.Int64))
			r, err := c.Get(context.Background(), k, func(ctx context.Context) (*product, error) {
				n.(*atomic.Int64).Add(1)
				return &product{ID: k}, nil
			})
			if err != nil || r.ID != k {
				t.Errorf("single %s = %+v, %v", k, r, err)
			}
		})
	}
	close(start)
	wg.Wait()
	for _, k := range pool {
		n := o.loads(k)
		if v, ok := singles.Load(k); ok {
			n += int(v.(*atomic.Int64).Load())
		}
		asked := false
		for b := range 12 {
			asked = asked || slices.Contains(pool[(5*b)%40:(5*b)%40+20], k)
		}
		if _, ok := singles.Load(k); ok {
			asked = true
		}
		if asked && n != 1 {
			t.Errorf("key %s loaded %d times, want exactly once", k, n)
		}
	}
}

// A hung shared tier costs a batch one SharedTimeout, not one per key nor
// one per round trip: after its read timed out, the batch's flights leave
// the tier alone (no double-check, no write-back), as a Get's do.
func TestHungSharedTierCostsABatchAtMostOneSharedTimeout(t *testing.T) {
	const sharedTimeout = 100 * time.Millisecond
	shared := &hungShared{mapShared: newMapShared(time.Now), hangReads: true, hangWrites: true}
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared, SharedTimeout: sharedTimeout})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	rs := c.FetchMany(ctx, keyRange("k", 20), (&batchOrigin{}).load)
	took := time.Since(start)
	for _, r := range rs {
		if r.Err != nil || r.Outcome != flightcache.OutcomeLoadedWriteFailed || !errors.Is(r.WriteErr, context.DeadlineExceeded) {
			t.Fatalf("key = %+v, %v; want the value, loaded_write_failed with the shared timeout", r.Result, r.Err)
		}
	}
	// The call count below proves one timeout was paid (each call to the
	// hung tier waits out its own); the time is a sanity bound with room
	// for a busy machine.
	if limit := 10 * sharedTimeout; took >= limit {
		t.Fatalf("the batch took %v, want about one shared timeout (%v)", took, sharedTimeout)
	}
	if n := shared.calls.Load(); n != 1 {
		t.Fatalf("%d shared calls, want 1: after a timeout the batch must leave the tier alone", n)
	}
}

// Shared-tier times are wall-clock times whatever the Cache's clock, for
// batches as for Gets: another instance reads the batch's write-back with
// the right age and expiry.
func TestBatchWritesAndReadsSharedTimesOnTheWallClock(t *testing.T) {
	shared := newMapShared(time.Now)
	clock := newFakeClock() // far from the wall clock
	a := clocked(t, clock, flightcache.Options[*product]{Shared: shared, TTL: time.Minute, Jitter: flightcache.DisableJitter})
	a.FetchMany(context.Background(), []string{"k"}, (&batchOrigin{}).load)
	e, ok, _ := shared.Get(context.Background(), "k")
	if !ok || time.Until(e.FreshUntil) > time.Minute || e.FreshUntil.Before(time.Now()) {
		t.Fatalf("shared entry fresh until %v, want within a minute of the wall clock", e.FreshUntil)
	}
	b := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared})
	rs := b.FetchMany(context.Background(), []string{"k"}, (&batchOrigin{}).load)
	if rs[0].Outcome != flightcache.OutcomeHitShared || rs[0].Age > time.Second {
		t.Fatalf("another instance read %v, age %v", rs[0].Outcome, rs[0].Age)
	}
}

// A store that panics in the write-back must not end the process from the
// chunk's goroutine: as for a Get, the loaded values are returned with the
// panic as their write error, and the keys stay usable.
func TestPanickingStoreInABatchWriteBackReturnsTheValuesAndKeepsKeysUsable(t *testing.T) {
	local := &panickyLocal[*product]{LocalStore: newLocal[*product](t, nil)}
	c := newCache(t, flightcache.Options[*product]{Local: local})
	local.panicOnSet.Store(true)
	for _, r := range c.FetchMany(context.Background(), []string{"a", "b"}, (&batchOrigin{}).load) {
		if r.Err != nil || r.Value == nil || r.Outcome != flightcache.OutcomeLoadedWriteFailed || r.WriteErr == nil ||
			strings.Contains(r.WriteErr.Error(), "store broke") {
			t.Fatalf("key after a panicking store = %+v, %v", r.Result, r.Err)
		}
	}
	local.panicOnSet.Store(false)
	for _, r := range c.FetchMany(context.Background(), []string{"a", "b"}, (&batchOrigin{}).load) {
		if r.Err != nil {
			t.Fatalf("key after the store recovered = %v", r.Err)
		}
	}
}

// panickyLocal is a LocalStore whose Set panics while panicOnSet is set.
type panickyLocal[V any] struct {
	driver.LocalStore[V]
	panicOnSet atomic.Bool
}

func (p *panickyLocal[V]) Set(key string, it driver.Item[V]) {
	if p.panicOnSet.Load() {
		panic("store broke")
	}
	p.LocalStore.Set(key, it)
}
