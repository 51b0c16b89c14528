package flightcache_test

// Tests named for the coherence invariants that a review proved broken:
// each failed on the code before its fix.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testlocal"
)

// recordingCoordinator hands out recordingLeases and remembers them.
type recordingCoordinator struct {
	mu     sync.Mutex
	leases []*recordingLease
	// ended, when set, gets every lease once it is completed or failed.
	ended chan *recordingLease
}

func (r *recordingCoordinator) Claim(ctx context.Context, key string, req driver.ClaimRequest) (driver.Grant, error) {
	l := &recordingLease{coord: r}
	r.mu.Lock()
	r.leases = append(r.leases, l)
	r.mu.Unlock()
	return driver.Grant{Lease: l}, nil
}

func (r *recordingCoordinator) Invalidate(ctx context.Context, key string) error { return nil }

func (r *recordingCoordinator) all() []*recordingLease {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*recordingLease(nil), r.leases...)
}

// recordingLease records how it was ended.
type recordingLease struct {
	coord     *recordingCoordinator
	completes atomic.Int32
	fails     atomic.Int32
	stored    atomic.Bool // Complete was given an entry
	failErr   atomic.Pointer[error]
}

func (l *recordingLease) Token() uint64         { return 1 }
func (l *recordingLease) TakenOver() bool       { return false }
func (l *recordingLease) Lost() <-chan struct{} { return nil }

func (l *recordingLease) Complete(ctx context.Context, e *driver.Entry) (driver.Completion, error) {
	l.completes.Add(1)
	l.stored.Store(e != nil)
	if l.coord.ended != nil {
		l.coord.ended <- l
	}
	return driver.Completion{Written: true}, nil
}

func (l *recordingLease) Fail(ctx context.Context, err error) error {
	l.fails.Add(1)
	l.failErr.Store(&err)
	if l.coord.ended != nil {
		l.coord.ended <- l
	}
	return nil
}

func (l *recordingLease) endings() int { return int(l.completes.Load() + l.fails.Load()) }

// panicCodec panics on Marshal: a codec with a bug.
type panicCodec[V any] struct{ driver.JSONCodec[V] }

func (panicCodec[V]) Marshal(V) ([]byte, error) { panic("codec bug") }

// In cluster mode a flight that holds no lease (the Coordinator failed and
// the flight degraded to local coalescing) never writes the shared tier:
// its write could not be fenced, and would overwrite a newer Set made on
// another instance meanwhile for the entry's whole TTL.
func TestFlightWithoutALeaseNeverWritesTheSharedTier(t *testing.T) {
	shared := newMapShared(time.Now)
	a := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared, Coordinator: &downCoordinator{}})
	b := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared})

	loading, release := make(chan struct{}), make(chan struct{})
	done := make(chan flightcache.Result[*product], 1)
	go func() {
		r, err := a.Fetch(context.Background(), "p:1", func(ctx context.Context) (*product, error) {
			close(loading)
			<-release
			return &product{ID: "1", Price: 1}, nil // read before b's Set
		})
		if err != nil {
			t.Errorf("degraded Fetch: %v", err)
		}
		done <- r
	}()
	<-loading
	if err := b.Set(context.Background(), "p:1", &product{ID: "1", Price: 2}); err != nil {
		t.Fatal(err)
	}
	close(release)
	r := <-done
	if r.Value == nil || r.Value.Price != 1 {
		t.Fatalf("degraded Fetch = %+v, want its own load's value", r)
	}
	got, err := b.Fetch(context.Background(), "p:1", nil)
	if err != nil || got.Value.Price != 2 {
		t.Fatalf("the shared tier holds %+v, %v after the degraded load; want the newer Set (price 2)", got.Value, err)
	}
	if n := shared.sets.Load(); n != 1 {
		t.Fatalf("%d shared writes, want 1 (the Set's; none from the flight without a lease)", n)
	}
}

// A codec that panics while the leader completes its lease still ends the
// lease: otherwise its heartbeat keeps it alive and every instance waits
// CoalesceWait on the key.
func TestCodecPanicDuringCompletionEndsTheLease(t *testing.T) {
	coord := &recordingCoordinator{}
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: newMapShared(time.Now), Coordinator: coord, Codec: panicCodec[*product]{}})
	var o origin
	r, err := c.Fetch(context.Background(), "p:1", o.load("1"))
	leases := coord.all()
	if len(leases) != 1 {
		t.Fatalf("%d leases, want 1", len(leases))
	}
	if n := leases[0].endings(); n != 1 {
		t.Fatalf("the lease was ended %d times after the codec panicked, want exactly once", n)
	}
	if leases[0].stored.Load() {
		t.Fatal("the lease stored an entry the codec could not encode")
	}
	if err != nil || r.Value == nil || r.Outcome != flightcache.OutcomeLoadedWriteFailed || r.WriteErr == nil {
		t.Fatalf("Fetch = %+v, %v; want the loaded value with OutcomeLoadedWriteFailed and a WriteErr", r, err)
	}
}

// A batch in cluster mode writes the local tier only, by design (its loads
// hold no lease): that is a successful load, not a failed write.
func TestBatchInClusterModeIsLoadedNotWriteFailed(t *testing.T) {
	coord := &downCoordinator{}
	coord.up.Store(true)
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: newMapShared(time.Now), Coordinator: coord})
	rs := c.FetchMany(context.Background(), []string{"p:1", "p:2"}, func(ctx context.Context, keys []string) (map[string]*product, error) {
		m := make(map[string]*product)
		for _, k := range keys {
			m[k] = &product{ID: k}
		}
		return m, nil
	})
	for i, r := range rs {
		if r.Err != nil || r.Outcome != flightcache.OutcomeLoaded || r.WriteErr != nil {
			t.Errorf("key %d: %+v; want OutcomeLoaded with no WriteErr", i, r)
		}
	}
}

// While the Bus is down, a local item that entered memory more than
// BusDownTTL ago is untrusted as a stale fallback too, not only as a fresh
// value: it may have been invalidated meanwhile.
func TestUntrustedLocalItemIsNotServedAsStaleWhileTheBusIsDown(t *testing.T) {
	clock := newFakeClock()
	net := &busNet{}
	in := newInstance(t, net, nil, clock, func(o *flightcache.Options[*product]) {
		o.TTL, o.StaleFor, o.BusDownTTL = time.Minute, time.Hour, time.Second
	})
	var price, calls atomic.Int64
	price.Store(1)
	mustGet(t, in.c, "p:1", valueLoader(&price, &calls))
	in.bus.setState(driver.BusDown)
	clock.Advance(2 * time.Minute) // stale, and well past BusDownTTL
	failing := func(ctx context.Context) (*product, error) { return nil, errors.New("origin down") }
	r, err := in.c.Fetch(context.Background(), "p:1", failing)
	if err == nil || r.Outcome == flightcache.OutcomeStale {
		t.Fatalf("Fetch with the Bus down = %+v, %v; want the origin's error, not an untrusted stale value", r, err)
	}
	// With the Bus up again a stale value would stand in as usual.
	in.bus.setState(driver.BusUp)
	mustGet(t, in.c, "p:1", valueLoader(&price, &calls))
	clock.Advance(2 * time.Minute)
	if r, err := in.c.Fetch(context.Background(), "p:1", failing); err != nil || r.Outcome != flightcache.OutcomeStale {
		t.Fatalf("Fetch with the Bus up = %+v, %v; want the stale value", r, err)
	}
}

// An origin error that wraps context.Canceled (a driver reporting a
// cancelled statement) is a failure like any other and is broadcast as
// one: whether a load was cancelled is the loader context's state, not
// what the error says.
func TestOriginErrorWrappingCanceledFailsTheLease(t *testing.T) {
	coord := &recordingCoordinator{}
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: newMapShared(time.Now), Coordinator: coord})
	originErr := fmt.Errorf("driver: statement cancelled by the server: %w", context.Canceled)
	_, err := c.Get(context.Background(), "p:1", func(ctx context.Context) (*product, error) { return nil, originErr })
	if !errors.Is(err, originErr) {
		t.Fatalf("Get = %v, want the origin's error", err)
	}
	l := coord.all()[0]
	if l.fails.Load() != 1 || l.completes.Load() != 0 {
		t.Fatalf("lease: %d fails, %d completes; want it failed once", l.fails.Load(), l.completes.Load())
	}
}

// A load that finishes after Close writes no tier, also in cluster mode:
// its lease is completed with nothing stored.
func TestLoadFinishingAfterCloseWritesNoTierWithACoordinator(t *testing.T) {
	coord := &recordingCoordinator{ended: make(chan *recordingLease, 1)}
	local := newLocal[*product](t, nil)
	c, err := flightcache.New(flightcache.Options[*product]{Local: local, Shared: newMapShared(time.Now), Coordinator: coord, Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	loading, release := make(chan struct{}), make(chan struct{})
	got := make(chan error, 1)
	go func() {
		_, err := c.Get(context.Background(), "p:1", func(ctx context.Context) (*product, error) {
			close(loading)
			<-release // ignores ctx: finishes after Close
			return &product{ID: "1"}, nil
		})
		got <- err
	}()
	<-loading
	c.Close()
	if err := <-got; !errors.Is(err, flightcache.ErrClosed) {
		t.Fatalf("Get across Close = %v, want ErrClosed", err)
	}
	close(release)
	l := <-coord.ended
	if l.stored.Load() || l.endings() != 1 {
		t.Fatalf("lease after Close: stored %v, ended %d times; want completed once with nothing stored", l.stored.Load(), l.endings())
	}
	if _, ok := local.Get("p:1"); ok {
		t.Fatal("the local tier holds the value of a load that finished after Close")
	}
}

// A write whose invalidation could not be published is redone while the
// Bus stays up: a single failed PUBLISH must not leave the other
// instances serving the old value for its whole TTL.
func TestFailedPublishIsRedoneWhileTheBusStaysUp(t *testing.T) {
	net := &busNet{}
	a := newInstance(t, net, nil, nil, func(o *flightcache.Options[*product]) { o.SharedTimeout = 10 * time.Millisecond })
	b := newInstance(t, net, nil, nil, nil)
	a.bus.published = make(chan driver.Invalidation, 1)
	var price, calls atomic.Int64
	mustGet(t, b.c, "k", valueLoader(&price, &calls))

	cause := errors.New("one PUBLISH lost")
	a.bus.failWith.Store(&cause)
	if err := a.c.Delete(context.Background(), "k"); !errors.Is(err, flightcache.ErrNotPublished) {
		t.Fatalf("Delete: %v", err)
	}
	a.bus.failWith.Store(nil) // the bus never went down; nothing else happens on A
	select {
	case inv := <-a.bus.published:
		if inv.Kind != driver.InvalidationKey || inv.Target != "k" {
			t.Fatalf("redone: %+v", inv)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write whose publish failed was not redone while the Bus stayed up")
	}
	if b.local.has("k") {
		t.Fatal("B still holds its copy after the redo")
	}
}

// Without a Coordinator, an instance that served a value never serves an
// older one afterwards, even once its own copy expired and a slow load of
// another instance put older data in the shared tier: reads are monotonic
// per instance, as docs/ARCHITECTURE.md promises.
func TestReadsNeverGoBackAfterTheLocalCopyExpires(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	opts := func() flightcache.Options[*product] {
		return flightcache.Options[*product]{Local: newLocal[*product](t, clock), Shared: shared, Now: clock.Now,
			TTL: time.Minute, Jitter: flightcache.DisableJitter}
	}
	a, b := newCache(t, opts()), newCache(t, opts())

	// B's load reads price 1, then stalls.
	reading, release := make(chan struct{}), make(chan struct{})
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		_, err := b.Get(context.Background(), "p:1", func(ctx context.Context) (*product, error) {
			close(reading)
			<-release
			return &product{ID: "1", Price: 1}, nil
		})
		if err != nil {
			t.Errorf("B: %v", err)
		}
	}()
	<-reading
	clock.Advance(time.Second)
	// The price changes; A loads and serves price 2.
	if r := mustGet(t, a, "p:1", func(ctx context.Context) (*product, error) { return &product{ID: "1", Price: 2}, nil }); r.Value.Price != 2 {
		t.Fatalf("A served %d, want 2", r.Value.Price)
	}
	clock.Advance(10 * time.Second)
	close(release) // B's late write-back of price 1 reaches the shared tier
	<-bDone
	clock.Advance(55 * time.Second) // A's copy expired; B's entry is fresh for 5s more

	r := mustGet(t, a, "p:1", func(ctx context.Context) (*product, error) { return &product{ID: "1", Price: 2}, nil })
	if r.Value.Price != 2 {
		t.Fatalf("A served price %d (%v) after it had served price 2: reads went back in time", r.Value.Price, r.Outcome)
	}
}

// Defaults are coherent: with a Coordinator that tells its lease TTL, the
// default CoalesceWait covers that lease plus a load (so a follower that
// arrives while a crashed leader's lease has long to run is still waiting
// when it can take it over), and a shorter explicit wait is refused.
func TestCoalesceWaitCoversTheLeaseTTLOrIsRefused(t *testing.T) {
	coord := &leaseTTLCoordinator{ttl: 3 * time.Second}
	if _, err := flightcache.New(flightcache.Options[int]{Shared: newMapShared(time.Now), Coordinator: coord, LoaderTimeout: 5 * time.Second, CoalesceWait: 2500 * time.Millisecond}); !errors.Is(err, flightcache.ErrInvalidConfig) {
		t.Fatalf("CoalesceWait 2.5s with a 3s lease: New = %v, want a ConfigError", err)
	}
	c, err := flightcache.New(flightcache.Options[int]{Shared: newMapShared(time.Now), Coordinator: coord, LoaderTimeout: 5 * time.Second, Logger: quietLogger})
	if err != nil {
		t.Fatalf("defaults with a 3s lease: %v", err)
	}
	c.Close()
	if got := coord.lastWait.Load(); got != 0 {
		t.Fatalf("claimed before any Get: %v", got)
	}
	c = newCache(t, flightcache.Options[int]{Shared: newMapShared(time.Now), Coordinator: coord, LoaderTimeout: 5 * time.Second})
	if _, err := c.Get(context.Background(), "k", func(ctx context.Context) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	if got, want := time.Duration(coord.lastWait.Load()), 8*time.Second; got > want || got < want-time.Second {
		t.Fatalf("the default wait was %v, want about the lease TTL plus LoaderTimeout (%v)", got, want)
	}
}

// leaseTTLCoordinator tells its lease TTL and records the wait it was
// asked for; it always leads.
type leaseTTLCoordinator struct {
	recordingCoordinator
	ttl      time.Duration
	lastWait atomic.Int64
}

func (l *leaseTTLCoordinator) LeaseTTL() time.Duration { return l.ttl }

func (l *leaseTTLCoordinator) Claim(ctx context.Context, key string, req driver.ClaimRequest) (driver.Grant, error) {
	l.lastWait.Store(int64(req.Wait))
	return l.recordingCoordinator.Claim(ctx, key, req)
}

// A follower that gives up waiting and loads without storing says so: the
// value is returned, and the outcome is not "loaded" (stored).
func TestLoadAfterTheCoalesceWaitReportsItStoredNothing(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{Shared: newMapShared(time.Now), Coordinator: busyCoordinator{}, CoalesceWait: time.Millisecond})
	var o origin
	r, err := c.Fetch(context.Background(), "p:1", o.load("1"))
	if err != nil || r.Value == nil || r.Outcome != flightcache.OutcomeLoadedUncached {
		t.Fatalf("Fetch = %+v, %v; want the value with OutcomeLoadedUncached", r, err)
	}
	if r2, err := c.Fetch(context.Background(), "p:1", nil); err == nil || r2.Outcome.Hit() {
		t.Fatalf("a later Fetch found %+v: the uncached load was stored", r2)
	}
}

// busyCoordinator: another instance always holds the lease.
type busyCoordinator struct{}

func (busyCoordinator) Claim(ctx context.Context, key string, req driver.ClaimRequest) (driver.Grant, error) {
	return driver.Grant{Waited: req.Wait}, flightcache.ErrCoalesceTimeout
}
func (busyCoordinator) Invalidate(ctx context.Context, key string) error { return nil }

// The read time a load hands to the shared tier is its precise start,
// whatever the lag of the Cache's default clock (a coarse one lags real
// time by a tick, and by much more on a starved host): otherwise two loads
// begun a moment apart can be ordered the wrong way round, and a reader
// whose own copy expires takes an older load's late write-back for newer
// than what it served (monotonic reads, without a Bus). Here the reader's
// clock lags by a second when its load ends and catches up before the
// write-back is encoded, as a starved coarse clock does.
func TestReadTimesKeepTheirOrderWhateverTheClocksLag(t *testing.T) {
	shared := newMapShared(time.Now)
	slow := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared,
		TTL: time.Minute, Jitter: flightcache.DisableJitter})
	lagging := newFakeClock()
	lagging.ns.Store(time.Now().Add(-time.Second).UnixNano())
	catchUp := observerFunc(func(e driver.Event) {
		if e.Kind == driver.EventOriginCall {
			lagging.ns.Store(time.Now().UnixNano()) // the tick the starved clock missed
		}
	})
	readerLocal := testlocal.New[*product](lagging.Now) // the Cache's clock is its Clock: Options.Now left to its default
	reader := newCache(t, flightcache.Options[*product]{Local: readerLocal, Shared: shared, Observer: catchUp,
		TTL: time.Minute, Jitter: flightcache.DisableJitter})

	// The slow instance reads price 1, then stalls.
	reading, release, slowDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(slowDone)
		if _, err := slow.Get(context.Background(), "p:1", func(ctx context.Context) (*product, error) {
			close(reading)
			<-release
			return &product{ID: "1", Price: 1}, nil
		}); err != nil {
			t.Errorf("slow instance: %v", err)
		}
	}()
	<-reading
	// The price changes; the reader loads and serves price 2.
	load2 := func(ctx context.Context) (*product, error) { return &product{ID: "1", Price: 2}, nil }
	if r := mustGet(t, reader, "p:1", load2); r.Value.Price != 2 {
		t.Fatalf("the reader served %d, want 2", r.Value.Price)
	}
	close(release) // the slow load's write-back of price 1 reaches the shared tier
	<-slowDone
	if e, ok := shared.peek("p:1"); !ok || e.LoadedAt.IsZero() {
		t.Fatalf("the slow load wrote no entry with a read time: %+v, %v", e, ok)
	}
	readerLocal.Delete("p:1") // the reader's copy expires or is evicted

	if r := mustGet(t, reader, "p:1", load2); r.Value.Price != 2 {
		t.Fatalf("the reader served price %d (%v) after it had served price 2: the slow load's entry passed for newer", r.Value.Price, r.Outcome)
	}
}

// observerFunc is an Observer made of a function.
type observerFunc func(driver.Event)

func (f observerFunc) ObserveCache(e driver.Event) { f(e) }
