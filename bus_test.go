package flightcache_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// busNet connects Caches in one process the way a Bus connects instances:
// each endpoint is one instance. Publish delivers synchronously, under the
// net's lock (so every handler sees messages one at a time and in order),
// to the subscribers of every other endpoint. It is a test double of the
// Bus contract, not of Redis; package redislease tests the real one.
type busNet struct {
	mu   sync.Mutex
	subs []*busSub
	// retained holds every bulk invalidation published, replayed to a
	// subscriber before each BusUp, as the Bus contract requires.
	retained []retainedInvalidation
}

type retainedInvalidation struct {
	cache string
	inv   driver.Invalidation
}

// replay delivers the retained bulk invalidations of s's cache to s; the
// caller holds n.mu.
func (n *busNet) replay(s *busSub) {
	for _, r := range n.retained {
		if r.cache == s.cache {
			s.h.Invalidated(r.inv)
		}
	}
}

type busSub struct {
	ep    *busEndpoint
	cache string
	h     driver.BusHandler
}

type busEndpoint struct {
	net      *busNet
	count    atomic.Int64
	failWith atomic.Pointer[error] // Publish returns it when set
	// published, when set, gets every invalidation this endpoint published.
	published chan driver.Invalidation
	// While holding (guarded by net.mu), messages for this endpoint wait
	// in held: a slow delivery.
	holding bool
	held    []driver.Invalidation
}

// hold delays the delivery of messages to this endpoint until deliverHeld.
func (e *busEndpoint) hold() {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	e.holding = true
}

// deliverHeld delivers what hold delayed, in order, and stops holding.
func (e *busEndpoint) deliverHeld() {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	e.holding = false
	for _, inv := range e.held {
		for _, s := range e.net.subs {
			if s.ep == e {
				s.h.Invalidated(inv)
			}
		}
	}
	e.held = nil
}

func (n *busNet) endpoint() *busEndpoint { return &busEndpoint{net: n} }

func (e *busEndpoint) Publish(ctx context.Context, cache string, inv driver.Invalidation) error {
	if err := e.failWith.Load(); err != nil {
		return *err
	}
	e.count.Add(1)
	if e.published != nil {
		defer func() { e.published <- inv }()
	}
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	if inv.Kind != driver.InvalidationKey {
		e.net.retained = append(e.net.retained, retainedInvalidation{cache, inv})
	}
	for _, s := range e.net.subs {
		if s.ep != e && s.cache == cache {
			if s.ep.holding {
				s.ep.held = append(s.ep.held, inv)
				continue
			}
			s.h.Invalidated(inv)
		}
	}
	return nil
}

// Subscribe replays the retained bulk invalidations and reports BusUp at
// once: the net always works.
func (e *busEndpoint) Subscribe(cache string, h driver.BusHandler) (func(), error) {
	s := &busSub{ep: e, cache: cache, h: h}
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	e.net.subs = append(e.net.subs, s)
	e.net.replay(s)
	h.BusChanged(driver.BusUp)
	return func() {
		e.net.mu.Lock()
		defer e.net.mu.Unlock()
		e.net.subs = slices.DeleteFunc(e.net.subs, func(x *busSub) bool { return x == s })
	}, nil
}

// inject delivers inv to this endpoint's own subscribers, as if another
// instance had published it (late, twice, out of order: whatever the test
// says).
func (e *busEndpoint) inject(inv driver.Invalidation) {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	for _, s := range e.net.subs {
		if s.ep == e {
			s.h.Invalidated(inv)
		}
	}
}

// setState reports s to this endpoint's subscribers.
func (e *busEndpoint) setState(s driver.BusState) {
	e.net.mu.Lock()
	defer e.net.mu.Unlock()
	for _, sub := range e.net.subs {
		if sub.ep == e {
			if s == driver.BusUp {
				e.net.replay(sub)
			}
			sub.h.BusChanged(s)
		}
	}
}

// rangeLocal is a map LocalStore with All, on its own lock.
type rangeLocal[V any] struct {
	mu sync.Mutex
	m  map[string]*driver.Item[V]
}

func newRangeLocal[V any]() *rangeLocal[V] {
	return &rangeLocal[V]{m: make(map[string]*driver.Item[V])}
}

func (l *rangeLocal[V]) Get(key string) (*driver.Item[V], bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	it, ok := l.m[key]
	return it, ok
}

func (l *rangeLocal[V]) Set(key string, it driver.Item[V]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m[key] = &it
}

func (l *rangeLocal[V]) Delete(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, key)
}

func (l *rangeLocal[V]) All() iter.Seq2[string, *driver.Item[V]] {
	return func(yield func(string, *driver.Item[V]) bool) {
		l.mu.Lock()
		snapshot := maps.Clone(l.m)
		l.mu.Unlock()
		for k, it := range snapshot {
			if !yield(k, it) {
				return
			}
		}
	}
}

func (l *rangeLocal[V]) has(key string) bool {
	_, ok := l.Get(key)
	return ok
}

// instance is one Cache of a two-instance setup sharing a shared tier and
// a bus net.
type instance struct {
	c     *flightcache.Cache[*product]
	local *rangeLocal[*product]
	bus   *busEndpoint
	rec   *recorder
}

func newInstance(t *testing.T, net *busNet, shared driver.SharedStore, clock *fakeClock, tweak func(*flightcache.Options[*product])) *instance {
	t.Helper()
	in := &instance{local: newRangeLocal[*product](), bus: net.endpoint(), rec: newRecorder()}
	opts := flightcache.Options[*product]{
		Name: "product", Local: in.local, Bus: in.bus, Observer: in.rec,
		TTL: time.Hour, Jitter: flightcache.DisableJitter,
	}
	if shared != nil {
		opts.Shared = shared
	}
	if clock != nil {
		opts.Now = clock.Now
	}
	if tweak != nil {
		tweak(&opts)
	}
	in.c = newCache(t, opts)
	return in
}

// valueLoader returns a loader that returns the product with Price *price,
// counting its calls.
func valueLoader(price *atomic.Int64, calls *atomic.Int64) flightcache.LoadFunc[*product] {
	return func(ctx context.Context) (*product, error) {
		calls.Add(1)
		return &product{ID: "1", Price: int(price.Load())}, nil
	}
}

func mustGet(t *testing.T, c *flightcache.Cache[*product], key string, load flightcache.LoadFunc[*product]) flightcache.Result[*product] {
	t.Helper()
	r, err := c.Fetch(context.Background(), key, load)
	if err != nil {
		t.Fatalf("Fetch(%q): %v", key, err)
	}
	return r
}

func TestSetOnOneInstanceDropsTheOthersOlderCopy(t *testing.T) {
	net := &busNet{}
	shared := newMapShared(nil)
	a := newInstance(t, net, shared, nil, nil)
	b := newInstance(t, net, shared, nil, nil)
	var price, calls atomic.Int64
	price.Store(1)
	load := valueLoader(&price, &calls)

	if r := mustGet(t, b.c, "k", load); r.Value.Price != 1 {
		t.Fatalf("B loaded price %d, want 1", r.Value.Price)
	}
	if r := mustGet(t, b.c, "k", load); r.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("B's second Get: %v, want a local hit", r.Outcome)
	}
	if err := a.c.Set(context.Background(), "k", &product{ID: "1", Price: 2}); err != nil {
		t.Fatal(err)
	}
	if b.local.has("k") {
		t.Fatal("B still holds its copy after A's Set was delivered")
	}
	r := mustGet(t, b.c, "k", load)
	if r.Value.Price != 2 || r.Outcome != flightcache.OutcomeHitShared {
		t.Fatalf("B after A's Set: price %d (%v), want 2 from the shared tier", r.Value.Price, r.Outcome)
	}
	if got := a.rec.count(driver.EventInvalidationSent); got != 1 {
		t.Errorf("A sent %d invalidations, want 1", got)
	}
	if got := b.rec.count(driver.EventInvalidationApplied); got != 1 {
		t.Errorf("B applied %d invalidations, want 1", got)
	}
	if got := a.rec.count(driver.EventInvalidationReceived); got != 0 {
		t.Errorf("A received %d of its own invalidations, want 0", got)
	}
}

func TestDeleteOnOneInstanceDropsTheOthersCopyWithoutSharedTier(t *testing.T) {
	net := &busNet{}
	a := newInstance(t, net, nil, nil, nil)
	b := newInstance(t, net, nil, nil, nil)
	var price, calls atomic.Int64
	price.Store(1)
	load := valueLoader(&price, &calls)
	mustGet(t, b.c, "k", load)
	price.Store(2)
	if err := a.c.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	if r := mustGet(t, b.c, "k", load); r.Value.Price != 2 || r.Outcome != flightcache.OutcomeLoaded {
		t.Fatalf("B after A's Delete: price %d (%v), want a new load of 2", r.Value.Price, r.Outcome)
	}
}

// wallAt is the wall-clock Version that the Cache on clock reads as t.
func wallAt(clock *fakeClock, t time.Time) time.Time {
	return t.Add(time.Since(clock.Now()))
}

func TestLateDuplicateAndOutOfOrderInvalidationsNeverRegress(t *testing.T) {
	clock := newFakeClock()
	net := &busNet{}
	b := newInstance(t, net, nil, clock, func(o *flightcache.Options[*product]) { o.ClockSkew = flightcache.DisableClockSkew })
	var price, calls atomic.Int64
	load := valueLoader(&price, &calls)
	inv := func(at time.Time) driver.Invalidation {
		return driver.Invalidation{Kind: driver.InvalidationKey, Target: "k", Version: at}
	}
	// served records every price B serves and fails on a regression.
	last := 0
	served := func() int {
		t.Helper()
		r := mustGet(t, b.c, "k", load)
		if r.Value.Price < last {
			t.Fatalf("B served price %d after %d", r.Value.Price, last)
		}
		last = r.Value.Price
		return last
	}

	t0 := time.Now() // versions are wall-clock times, whatever the Cache's clock
	price.Store(5)
	served() // read at t0: version 5
	clock.Advance(time.Second)

	b.bus.inject(inv(t0.Add(-time.Second))) // older than the value held
	if !b.local.has("k") || served() != 5 {
		t.Fatal("an invalidation older than the value held evicted it")
	}
	if got := b.rec.count(driver.EventInvalidationIgnored); got != 1 {
		t.Fatalf("ignored %d invalidations, want 1", got)
	}

	price.Store(7)
	t7 := time.Now()
	clock.Advance(time.Second)
	b.bus.inject(inv(t7)) // newer than the value: evicts
	if b.local.has("k") {
		t.Fatal("a newer invalidation did not evict the older value")
	}
	if got := served(); got != 7 {
		t.Fatalf("after the invalidation B served %d, want 7", got)
	}
	before := calls.Load()
	b.bus.inject(inv(t7))                       // the same message again
	b.bus.inject(inv(t7.Add(-time.Second / 2))) // an earlier one, late
	b.bus.inject(inv(t0))                       // and an even earlier one
	if !b.local.has("k") {
		t.Fatal("a duplicate or late invalidation evicted the newer value")
	}
	if served(); calls.Load() != before {
		t.Fatal("a duplicate or late invalidation caused a load")
	}
	if got := b.rec.count(driver.EventInvalidationIgnored); got != 4 {
		t.Fatalf("ignored %d invalidations, want 4", got)
	}
}

func TestInvalidationRefusesTheWriteOfALoadInProgress(t *testing.T) {
	net := &busNet{}
	b := newInstance(t, net, nil, nil, nil)
	started, release := make(chan struct{}), make(chan struct{})
	old := func(ctx context.Context) (*product, error) {
		close(started)
		<-release
		return &product{Price: 1}, nil
	}
	done := make(chan flightcache.Result[*product])
	go func() {
		r, _ := b.c.Fetch(context.Background(), "k", old)
		done <- r
	}()
	<-started
	b.bus.inject(driver.Invalidation{Kind: driver.InvalidationKey, Target: "k", Version: time.Now()})
	close(release)
	if r := <-done; r.Value.Price != 1 {
		t.Fatalf("the caller of the load got %d, want its value 1", r.Value.Price)
	}
	if b.local.has("k") {
		t.Fatal("a load that read before the invalidation stored its value")
	}
	var calls atomic.Int64
	var price atomic.Int64
	price.Store(2)
	if r := mustGet(t, b.c, "k", valueLoader(&price, &calls)); r.Value.Price != 2 {
		t.Fatalf("after the invalidation B served %d, want a new load (2)", r.Value.Price)
	}
}

func TestInvalidatePrefixDropsEveryVariantOnEveryInstance(t *testing.T) {
	net := &busNet{}
	shared := newMapShared(nil)
	// No skew allowance: a value loaded right after the invalidation is
	// newer than it (with one, it would be reloaded once more).
	noSkew := func(o *flightcache.Options[*product]) { o.ClockSkew = flightcache.DisableClockSkew }
	a := newInstance(t, net, shared, nil, noSkew)
	b := newInstance(t, net, shared, nil, noSkew)
	var price, calls atomic.Int64
	price.Store(1)
	load := valueLoader(&price, &calls)
	keys := []string{"t=1|id=4|loc=en", "t=1|id=4|loc=de", "t=1|id=42|loc=en"}
	for _, k := range keys {
		mustGet(t, b.c, k, load)
	}
	price.Store(2)
	if err := a.c.InvalidatePrefix(context.Background(), "t=1|id=4|"); err != nil {
		t.Fatal(err)
	}
	if b.local.has(keys[0]) || b.local.has(keys[1]) {
		t.Fatal("B still holds a variant under the prefix")
	}
	if !b.local.has(keys[2]) {
		t.Fatal("B dropped a key outside the prefix")
	}
	// The shared tier still has the old entries (no prefix delete), but
	// both instances treat them as absent and load again.
	for _, in := range []*instance{a, b} {
		for _, k := range keys[:2] {
			if r := mustGet(t, in.c, k, load); r.Value.Price != 2 {
				t.Fatalf("%s after the prefix invalidation: price %d (%v), want 2", k, r.Value.Price, r.Outcome)
			}
		}
	}
	if r := mustGet(t, a.c, keys[2], load); r.Value.Price != 1 {
		t.Fatalf("a key outside the prefix was reloaded: price %d", r.Value.Price)
	}
	// A's reload overwrote the shared entry; B's next miss reads it.
	b.local.Delete(keys[0])
	if r := mustGet(t, b.c, keys[0], load); r.Outcome != flightcache.OutcomeHitShared || r.Value.Price != 2 {
		t.Fatalf("the reloaded shared entry: %v price %d, want a shared hit of 2", r.Outcome, r.Value.Price)
	}
}

func TestClearDropsEverythingOnEveryInstance(t *testing.T) {
	net := &busNet{}
	shared := newMapShared(nil)
	a := newInstance(t, net, shared, nil, nil)
	b := newInstance(t, net, shared, nil, nil)
	var price, calls atomic.Int64
	price.Store(1)
	load := valueLoader(&price, &calls)
	for _, k := range []string{"x", "y"} {
		mustGet(t, a.c, k, load)
		mustGet(t, b.c, k, load)
	}
	price.Store(2)
	if err := b.c.Clear(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, in := range []*instance{a, b} {
		for _, k := range []string{"x", "y"} {
			if r := mustGet(t, in.c, k, load); r.Value.Price != 2 {
				t.Fatalf("%s after Clear: %d (%v), want 2", k, r.Value.Price, r.Outcome)
			}
		}
	}
}

func TestBusDownCapsLocalFreshnessAndResyncsWhenBack(t *testing.T) {
	clock := newFakeClock()
	net := &busNet{}
	b := newInstance(t, net, nil, clock, func(o *flightcache.Options[*product]) { o.BusDownTTL = 2 * time.Second })
	var price, calls atomic.Int64
	price.Store(1)
	load := valueLoader(&price, &calls)
	mustGet(t, b.c, "k", load)
	if b.c.BusState() != driver.BusUp {
		t.Fatalf("bus state %v, want up", b.c.BusState())
	}

	b.bus.setState(driver.BusDown)
	if b.c.BusState() != driver.BusDown {
		t.Fatalf("bus state %v, want down", b.c.BusState())
	}
	clock.Advance(time.Second)
	if r := mustGet(t, b.c, "k", load); r.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("a 1s-old item while down: %v, want a local hit (BusDownTTL 2s)", r.Outcome)
	}
	clock.Advance(time.Second)
	price.Store(2)
	if r := mustGet(t, b.c, "k", load); r.Outcome != flightcache.OutcomeLoaded || r.Value.Price != 2 {
		t.Fatalf("a 2s-old item while down: %v price %d, want a reload", r.Outcome, r.Value.Price)
	}
	if r := mustGet(t, b.c, "k", load); r.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("the reloaded item while down: %v, want a local hit", r.Outcome)
	}

	price.Store(3)
	b.bus.setState(driver.BusUp)
	if b.local.has("k") {
		t.Fatal("the local tier was not resynchronised when the bus came back")
	}
	if r := mustGet(t, b.c, "k", load); r.Value.Price != 3 {
		t.Fatalf("after the resync: price %d, want 3", r.Value.Price)
	}
	clock.Advance(time.Minute)
	if r := mustGet(t, b.c, "k", load); r.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("with the bus up, a 1m-old item: %v, want a local hit (TTL 1h)", r.Outcome)
	}
	if got := b.rec.count(driver.EventBusChanged); got != 3 {
		t.Fatalf("%d bus state events, want 3 (up, down, up)", got)
	}
}

func TestWriteWhoseInvalidationIsNotPublishedSaysSo(t *testing.T) {
	net := &busNet{}
	a := newInstance(t, net, nil, nil, nil)
	cause := errors.New("bus unreachable")
	a.bus.failWith.Store(&cause)
	err := a.c.Set(context.Background(), "k", &product{Price: 9})
	if !errors.Is(err, flightcache.ErrNotPublished) || !errors.Is(err, cause) {
		t.Fatalf("Set with a failing bus: %v, want ErrNotPublished wrapping the cause", err)
	}
	if r := mustGet(t, a.c, "k", nil); r.Value.Price != 9 {
		t.Fatalf("the Set did not take effect locally: %d", r.Value.Price)
	}
	for _, op := range []func() error{
		func() error { return a.c.Delete(context.Background(), "k") },
		func() error { return a.c.InvalidatePrefix(context.Background(), "k") },
		func() error { return a.c.Clear(context.Background()) },
	} {
		if err := op(); !errors.Is(err, flightcache.ErrNotPublished) {
			t.Fatalf("got %v, want ErrNotPublished", err)
		}
	}
}

func TestBusNeedsARangeableLocalStore(t *testing.T) {
	_, err := flightcache.New(flightcache.Options[int]{Local: plainLocal[int]{newLocal[int](t, nil)}, Bus: (&busNet{}).endpoint()})
	var ce *flightcache.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Bus" {
		t.Fatalf("New with a Bus and a Local that cannot range: %v, want a ConfigError on Bus", err)
	}
	c, err := flightcache.New(flightcache.Options[int]{Local: newLocal[int](t, nil), Bus: (&busNet{}).endpoint(), Logger: quietLogger})
	if err != nil {
		t.Fatalf("New with a Bus and a memstore: %v", err)
	}
	c.Close()
	for _, tc := range []struct {
		name  string
		tweak func(*flightcache.Options[int])
		field string
	}{
		{"BusDownTTL above TTL", func(o *flightcache.Options[int]) { o.BusDownTTL = 2 * o.TTL }, "BusDownTTL"},
		{"negative BusDownTTL", func(o *flightcache.Options[int]) { o.BusDownTTL = -time.Second }, "BusDownTTL"},
		{"ClockSkew above 1s", func(o *flightcache.Options[int]) { o.ClockSkew = 2 * time.Second }, "ClockSkew"},
		{"negative ClockSkew", func(o *flightcache.Options[int]) { o.ClockSkew = -time.Second }, "ClockSkew"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := flightcache.Options[int]{Local: newRangeLocal[int](), TTL: time.Minute}
			tc.tweak(&o)
			_, err := flightcache.New(o)
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("got %v, want a ConfigError on %s", err, tc.field)
			}
		})
	}
}

// plainLocal hides every method but LocalStore's.
type plainLocal[V any] struct{ driver.LocalStore[V] }

func TestBulkInvalidationInputErrors(t *testing.T) {
	c := newCache(t, flightcache.Options[int]{Local: newRangeLocal[int]()})
	var ke *flightcache.KeyError
	if err := c.InvalidatePrefix(context.Background(), ""); !errors.As(err, &ke) {
		t.Fatalf("empty prefix: %v, want a KeyError", err)
	}
	if err := c.InvalidatePrefix(context.Background(), "\xff"); !errors.As(err, &ke) {
		t.Fatalf("invalid UTF-8: %v, want a KeyError", err)
	}
	plain := newCache(t, flightcache.Options[int]{Local: plainLocal[int]{newRangeLocal[int]()}})
	if err := plain.InvalidatePrefix(context.Background(), "a"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("a Local without All: %v, want errors.ErrUnsupported", err)
	}
	if err := plain.Clear(context.Background()); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("Clear on a Local without All: %v, want errors.ErrUnsupported", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Clear(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Clear with an ended context: %v", err)
	}
	c.Close()
	if err := c.Clear(context.Background()); !errors.Is(err, flightcache.ErrClosed) {
		t.Fatalf("Clear after Close: %v, want ErrClosed", err)
	}
	if c.BusState() != driver.BusNone {
		t.Fatalf("BusState without a Bus: %v", c.BusState())
	}
}

// TestConcurrentWritesAndReadsNeverRegressPerReader runs writers on A that
// Set ever higher prices while readers on B read through a loader that
// reads the current price: every reader's sequence of prices must never go
// down, and after the last write every reader sees it.
func TestConcurrentWritesAndReadsNeverRegressPerReader(t *testing.T) {
	net := &busNet{}
	shared := newMapShared(nil)
	a := newInstance(t, net, shared, nil, nil)
	b := newInstance(t, net, shared, nil, nil)
	var price, calls atomic.Int64
	load := valueLoader(&price, &calls)
	const rounds, readers = 200, 4
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, readers)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := b.c.Fetch(context.Background(), "k", load)
				if err != nil {
					errs <- err
					return
				}
				if r.Value.Price < last {
					errs <- fmt.Errorf("a reader saw the price go down: %d after %d (%v)", r.Value.Price, last, r.Outcome)
					return
				}
				last = r.Value.Price
			}
		}()
	}
	for i := 1; i <= rounds; i++ {
		price.Store(int64(i))
		if err := a.c.Set(context.Background(), "k", &product{Price: i}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if r := mustGet(t, b.c, "k", load); r.Value.Price != rounds {
		t.Fatalf("after the last write B serves %d, want %d", r.Value.Price, rounds)
	}
}

// TestASlowWriteBackThatReachesRedisAfterANewerSetIsNeverServed: without a
// Coordinator, instance C loads the old value, hears of A's Set late and
// writes its value back to the shared tier after A's. B, which heard of the
// Set, treats C's entry as absent and loads the new value; it never serves
// the old one.
func TestASlowWriteBackThatReachesRedisAfterANewerSetIsNeverServed(t *testing.T) {
	net := &busNet{}
	shared := newMapShared(nil)
	a := newInstance(t, net, shared, nil, nil)
	b := newInstance(t, net, shared, nil, nil)
	cInst := newInstance(t, net, shared, nil, nil)
	var price, calls atomic.Int64
	price.Store(1)
	load := valueLoader(&price, &calls)

	read, release := make(chan struct{}), make(chan struct{})
	slow := func(ctx context.Context) (*product, error) {
		p := &product{Price: int(price.Load())} // reads the origin: 1
		close(read)
		<-release
		return p, nil
	}
	cInst.bus.hold() // C hears of A's Set only after its write-back
	done := make(chan struct{})
	go func() {
		defer close(done)
		if r := mustGet(t, cInst.c, "k", slow); r.Value.Price != 1 {
			t.Errorf("C's own load returned %d, want 1", r.Value.Price)
		}
	}()
	<-read
	price.Store(2)
	if err := a.c.Set(context.Background(), "k", &product{Price: 2}); err != nil {
		t.Fatal(err)
	}
	if r := mustGet(t, b.c, "k", load); r.Value.Price != 2 {
		t.Fatalf("B after A's Set: %d", r.Value.Price)
	}
	close(release)
	<-done
	shared.mu.Lock()
	e := shared.m["k"]
	shared.mu.Unlock()
	var got product
	if err := json.Unmarshal(e.Value, &got); err != nil || got.Price != 1 {
		t.Fatalf("the shared tier holds %+v (%v), want C's late write-back of price 1", got, err)
	}
	b.local.Delete("k") // B must read the shared tier again
	if r := mustGet(t, b.c, "k", load); r.Value.Price != 2 {
		t.Fatalf("B served %d (%v) from C's late write-back after having served 2", r.Value.Price, r.Outcome)
	}
	cInst.bus.deliverHeld()
	if r := mustGet(t, cInst.c, "k", load); r.Value.Price != 2 {
		t.Fatalf("C after hearing of the Set: %d (%v)", r.Value.Price, r.Outcome)
	}
}

// TestWritesNotAnnouncedAreRedoneWhenTheBusIsBack: a Delete whose
// invalidation could not be published, and a Set whose shared write failed
// too, are redone once the writer's Bus is up again: the shared entry is
// removed and the other instances drop their copies.
func TestWritesNotAnnouncedAreRedoneWhenTheBusIsBack(t *testing.T) {
	net := &busNet{}
	shared := newMapShared(nil)
	a := newInstance(t, net, shared, nil, nil)
	b := newInstance(t, net, shared, nil, nil)
	a.bus.published = make(chan driver.Invalidation, 8)
	var price, calls atomic.Int64
	price.Store(1)
	load := valueLoader(&price, &calls)
	for _, k := range []string{"d", "s"} {
		mustGet(t, b.c, k, load)
	}

	cause := errors.New("redis frozen")
	a.bus.failWith.Store(&cause)
	a.bus.setState(driver.BusDown)
	shared.writeErr = cause
	price.Store(2)
	if err := a.c.Delete(context.Background(), "d"); !errors.Is(err, flightcache.ErrNotPublished) {
		t.Fatalf("Delete with the bus failing: %v", err)
	}
	if err := a.c.Set(context.Background(), "s", &product{Price: 3}); !errors.Is(err, cause) {
		t.Fatalf("Set with the tier failing: %v", err)
	}
	if got := a.c.PendingInvalidations(); got != 2 {
		t.Fatalf("%d writes pending, want 2", got)
	}
	if !b.local.has("d") || !b.local.has("s") {
		t.Fatal("B heard of writes that were not published")
	}

	a.bus.failWith.Store(nil)
	shared.writeErr = nil
	a.bus.setState(driver.BusUp)
	for range 2 {
		<-a.bus.published
	}
	a.c.Close() // waits for the flush to end
	if got := a.c.PendingInvalidations(); got != 0 {
		t.Fatalf("%d writes still pending after the flush", got)
	}
	if b.local.has("d") || b.local.has("s") {
		t.Fatal("B still holds copies after the redone invalidations")
	}
	for _, k := range []string{"d", "s"} {
		if r := mustGet(t, b.c, k, load); r.Value.Price != 2 || r.Outcome != flightcache.OutcomeLoaded {
			t.Fatalf("B's %s after the redone write: %d (%v), want a new load of 2", k, r.Value.Price, r.Outcome)
		}
	}
}

// TestARedoThatFailsIsTriedAgain: when the Bus is up again but publishing
// still fails (the breaker still open, Redis still slow), the redo waits
// and tries again by itself, without another BusUp or write.
func TestARedoThatFailsIsTriedAgain(t *testing.T) {
	net := &busNet{}
	a := newInstance(t, net, nil, nil, func(o *flightcache.Options[*product]) { o.SharedTimeout = 10 * time.Millisecond })
	b := newInstance(t, net, nil, nil, nil)
	a.bus.published = make(chan driver.Invalidation, 1)
	var price, calls atomic.Int64
	load := valueLoader(&price, &calls)
	mustGet(t, b.c, "k", load)

	cause := errors.New("redis still failing")
	a.bus.failWith.Store(&cause)
	if err := a.c.Delete(context.Background(), "k"); !errors.Is(err, flightcache.ErrNotPublished) {
		t.Fatalf("Delete: %v", err)
	}
	a.bus.setState(driver.BusDown)
	a.bus.setState(driver.BusUp) // the flush fails: still failing
	a.bus.failWith.Store(nil)    // nothing else happens on A from now on
	select {
	case inv := <-a.bus.published:
		if inv.Kind != driver.InvalidationKey || inv.Target != "k" {
			t.Fatalf("redone: %+v", inv)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the redo was not tried again")
	}
	if b.local.has("k") {
		t.Fatal("B still holds its copy after the redo")
	}
}
