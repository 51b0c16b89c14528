package flightcache_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// taggedOrigin is an origin whose loads tag their values with tags.
func taggedOrigin(o *origin, id string, tags ...string) flightcache.LoadFunc[*product] {
	load := o.load(id)
	return func(ctx context.Context) (*product, error) {
		flightcache.SetTags(ctx, tags...)
		return load(ctx)
	}
}

// tagCache is a Cache on clock with a map-backed shared tier.
func tagCache(t *testing.T, clock *fakeClock, shared *mapShared, opts flightcache.Options[*product]) *flightcache.Cache[*product] {
	t.Helper()
	opts.Now = clock.Now
	if opts.Local == nil {
		opts.Local = newLocal[*product](t, clock)
	}
	if shared != nil {
		opts.Shared = shared
	}
	if opts.TTL == 0 {
		opts.TTL = time.Minute
	}
	return newCache(t, opts)
}

// The entry's own read time is compared with the tag's fence, never the
// reader's: a value loaded after the invalidation is served however late
// it is read, and one loaded before is never served however early.
func TestTagFenceComparesTheEntrysReadTimeNeverTheReaders(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	c := tagCache(t, clock, shared, flightcache.Options[*product]{})
	ctx := context.Background()
	o := &origin{}
	load := taggedOrigin(o, "1", "product:1")

	getValue(t, c, "p:1", load) // loaded before the fence: absent after it
	clock.Advance(time.Second)
	if err := c.InvalidateTag(ctx, "product:1"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	if p := getValue(t, c, "p:1", load); p.Price != 2 {
		t.Fatalf("after InvalidateTag got the value of load %d, want a new load", p.Price)
	}
	// Read long after the fence, the new value is still newer than it.
	for range 5 {
		clock.Advance(5 * time.Second)
		r, err := c.Fetch(ctx, "p:1", load)
		if err != nil || r.Value.Price != 2 || r.Outcome != flightcache.OutcomeHitLocal {
			t.Fatalf("a value read after the fence: got load %d, %v, %v; want load 2 from the local tier", r.Value.Price, r.Outcome, err)
		}
	}
	// Another instance on the shared tier reads the entry of load 2: its
	// own read time decides, and it was read after the fence.
	other := tagCache(t, clock, shared, flightcache.Options[*product]{})
	r, err := other.Fetch(ctx, "p:1", load)
	if err != nil || r.Value.Price != 2 || r.Outcome != flightcache.OutcomeHitShared {
		t.Fatalf("another instance: got load %d, %v, %v; want load 2 from the shared tier", r.Value.Price, r.Outcome, err)
	}
	if n := o.calls.Load(); n != 2 {
		t.Fatalf("origin called %d times, want 2", n)
	}
}

// A shared entry read before the fence is absent even to a reader that
// never held it, and however long after the fence it reads.
func TestTagFenceCoversOlderSharedEntriesForEveryReader(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	writer := tagCache(t, clock, shared, flightcache.Options[*product]{})
	ctx := context.Background()
	o := &origin{}
	load := taggedOrigin(o, "1", "product:1")
	getValue(t, writer, "p:1", load)
	clock.Advance(time.Second)
	if err := writer.InvalidateTag(ctx, "product:1"); err != nil {
		t.Fatal(err)
	}
	e, ok := shared.peek("p:1")
	if !ok || !slices.Equal(e.Tags, []string{"product:1"}) {
		t.Fatalf("shared entry: found %v, tags %q; want it kept with its tag (nothing walks the tiers)", ok, e.Tags)
	}
	clock.Advance(10 * time.Second)
	if p := getValue(t, writer, "p:1", load); p.Price != 2 {
		t.Fatalf("the writer served load %d after InvalidateTag, want load 2", p.Price)
	}
}

// Noting an invalidation again (a replay on start-up or BusUp, a repeated
// message) with its original version never moves the fence to the moment
// it was learnt: a value read after the invalidation stays.
func TestTagFenceNeverMovesOnRematerialisation(t *testing.T) {
	clock := newFakeClock()
	net := &busNet{}
	ep := net.endpoint()
	c := tagCache(t, clock, nil, flightcache.Options[*product]{Local: newRangeLocal[*product](), Bus: ep})
	ctx := context.Background()
	o := &origin{}
	load := taggedOrigin(o, "1", "product:1")

	version := time.Now()
	ep.inject(driver.Invalidation{Kind: driver.InvalidationTag, Target: "product:1", Version: version})
	clock.Advance(time.Second)
	getValue(t, c, "p:1", load) // read after the invalidation
	for range 3 {
		clock.Advance(time.Second)
		ep.inject(driver.Invalidation{Kind: driver.InvalidationTag, Target: "product:1", Version: version})
		ep.setState(driver.BusDown)
		ep.setState(driver.BusUp) // replays the retained invalidations too
		// BusUp empties the local tier (resync); the value's own version
		// is still after the fence, so it is loaded once more only for
		// the resync, never dropped by the replayed fence.
		before := o.calls.Load()
		getValue(t, c, "p:1", load)
		r, err := c.Fetch(ctx, "p:1", load)
		if err != nil || r.Outcome != flightcache.OutcomeHitLocal || o.calls.Load() != before+1 {
			t.Fatalf("after a replay: %v, %v, %d loads; want one reload for the resync, then hits", r.Outcome, err, o.calls.Load()-before)
		}
	}
	// Without a resync in between, a replay drops nothing newer.
	ep.inject(driver.Invalidation{Kind: driver.InvalidationTag, Target: "product:1", Version: version})
	if r, err := c.Fetch(ctx, "p:1", load); err != nil || r.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("after a repeated invalidation: %v, %v; want a local hit", r.Outcome, err)
	}
}

// InvalidateTag never lets a covered value be served, not even as the
// fallback of a failing load; ExpireTag keeps it as that fallback.
func TestExpireTagServesStaleInvalidateTagNever(t *testing.T) {
	for _, expire := range []bool{true, false} {
		t.Run(fmt.Sprintf("expire=%v", expire), func(t *testing.T) {
			clock := newFakeClock()
			shared := newMapShared(clock.Now)
			c := tagCache(t, clock, shared, flightcache.Options[*product]{StaleFor: time.Hour})
			ctx := context.Background()
			o := &origin{}
			getValue(t, c, "p:1", taggedOrigin(o, "1", "product:1"))
			clock.Advance(time.Second)
			call := c.InvalidateTag
			if expire {
				call = c.ExpireTag
			}
			if err := call(ctx, "product:1"); err != nil {
				t.Fatal(err)
			}
			failing := func(ctx context.Context) (*product, error) { return nil, errors.New("origin down") }
			// Twice: from the local tier, then (local dropped) from the
			// shared tier, read by a second instance.
			other := tagCache(t, clock, shared, flightcache.Options[*product]{StaleFor: time.Hour})
			if expire {
				_ = other.ExpireTag(ctx, "product:1") // as its Bus would deliver
			} else {
				_ = other.InvalidateTag(ctx, "product:1")
			}
			for i, cc := range []*flightcache.Cache[*product]{c, other} {
				r, err := cc.Fetch(ctx, "p:1", failing)
				if expire {
					if err != nil || r.Outcome != flightcache.OutcomeStale || r.Value.Price != 1 {
						t.Fatalf("instance %d after ExpireTag: %v, %v; want the old value as stale", i, r.Outcome, err)
					}
					continue
				}
				if err == nil || r.Outcome == flightcache.OutcomeStale {
					t.Fatalf("instance %d after InvalidateTag: %v, %v; want the load's error, never the old value", i, r.Outcome, err)
				}
			}
			// A load that succeeds replaces it.
			if p := getValue(t, c, "p:1", taggedOrigin(o, "1", "product:1")); p.Price != 2 {
				t.Fatalf("got load %d, want the new load", p.Price)
			}
		})
	}
}

// Every write path carries the value's tags: a Get's and a Fetch's load,
// a GetMany's and a FetchMany's batch load, and Set (WithTags), in both
// tiers.
func TestEveryWritePathCarriesTags(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	c := tagCache(t, clock, shared, flightcache.Options[*product]{})
	ctx := context.Background()
	o := &origin{}
	batch := func(ctx context.Context, keys []string) (map[string]*product, error) {
		flightcache.SetTags(ctx, "t")
		m := make(map[string]*product, len(keys))
		for _, k := range keys {
			m[k] = &product{ID: k, Price: int(o.calls.Add(1))}
		}
		return m, nil
	}
	if _, err := c.Get(ctx, "get", taggedOrigin(o, "get", "t")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(ctx, "fetch", taggedOrigin(o, "fetch", "t")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetMany(ctx, []string{"many:1", "many:2"}, batch); err != nil {
		t.Fatal(err)
	}
	for _, r := range c.FetchMany(ctx, []string{"fmany:1"}, batch) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if err := c.Set(flightcache.WithTags(ctx, "t", "other"), "set", &product{ID: "set"}); err != nil {
		t.Fatal(err)
	}
	keys := []string{"get", "fetch", "many:1", "many:2", "fmany:1", "set"}
	for _, k := range keys {
		e, ok := shared.peek(k)
		if !ok || !slices.Contains(e.Tags, "t") {
			t.Fatalf("%s: shared entry found %v with tags %q, want tag t", k, ok, e.Tags)
		}
	}
	clock.Advance(time.Second)
	if err := c.InvalidateTag(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	for _, k := range keys {
		r, err := c.Fetch(ctx, k, taggedOrigin(o, k, "t"))
		if err != nil || r.Outcome != flightcache.OutcomeLoaded {
			t.Fatalf("%s after InvalidateTag: %v, %v; want a new load", k, r.Outcome, err)
		}
	}
}

// A load in flight when its tag is invalidated serves its own callers but
// is stored in no tier, and a Get that starts after InvalidateTag returned
// does not share it.
func TestLoadInFlightWhenTagInvalidatedIsNotStored(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	c := tagCache(t, clock, shared, flightcache.Options[*product]{})
	ctx := context.Background()
	o := &origin{}
	started, release := make(chan struct{}), make(chan struct{})
	slow := func(ctx context.Context) (*product, error) {
		flightcache.SetTags(ctx, "product:1")
		close(started)
		<-release
		return &product{ID: "1", Price: 100}, nil
	}
	type answer struct {
		r   flightcache.Result[*product]
		err error
	}
	first := make(chan answer, 1)
	go func() {
		r, err := c.Fetch(ctx, "p:1", slow)
		first <- answer{r, err}
	}()
	<-started
	if err := c.InvalidateTag(ctx, "product:1"); err != nil {
		t.Fatal(err)
	}
	// Started after the call: a new flight, not the one in progress.
	r, err := c.Fetch(ctx, "p:1", taggedOrigin(o, "1", "product:1"))
	if err != nil || r.Value.Price != 1 {
		t.Fatalf("a Get after InvalidateTag got %v, %v; want its own load", r.Value, err)
	}
	close(release)
	a := <-first
	if a.err != nil || a.r.Value.Price != 100 || a.r.Outcome != flightcache.OutcomeLoadedUncached {
		t.Fatalf("the load in flight: %v, %v, %v; want its value served, uncached", a.r.Value, a.r.Outcome, a.err)
	}
	clock.Advance(time.Second)
	if e, ok := shared.peek("p:1"); ok && strings.Contains(string(e.Value), `"Price":100`) {
		t.Fatal("the fenced load reached the shared tier")
	}
	if r, err := c.Fetch(ctx, "p:1", taggedOrigin(o, "1", "product:1")); err != nil || r.Value.Price == 100 {
		t.Fatalf("after the fenced load: %v, %v; its value must not have been stored", r.Value, err)
	}
}

// Tags out of bounds are a typed error wherever they are given, never a
// panic, and a value with such tags is not stored.
func TestTagBoundsGiveErrInvalidTag(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	c := tagCache(t, clock, shared, flightcache.Options[*product]{})
	ctx := context.Background()
	tooMany := make([]string, 17)
	for i := range tooMany {
		tooMany[i] = fmt.Sprint("t", i)
	}
	bad := [][]string{{""}, {strings.Repeat("x", 129)}, {"\xff"}, tooMany}
	for _, tags := range bad {
		for _, call := range []func(context.Context, string) error{c.InvalidateTag, c.ExpireTag} {
			if len(tags) == 1 {
				if err := call(ctx, tags[0]); !errors.Is(err, flightcache.ErrInvalidTag) {
					t.Fatalf("invalidating %q: %v, want ErrInvalidTag", tags[0], err)
				}
			}
		}
		if err := c.Set(flightcache.WithTags(ctx, tags...), "k", &product{}); !errors.Is(err, flightcache.ErrInvalidTag) {
			t.Fatalf("Set with %d tags: %v, want ErrInvalidTag", len(tags), err)
		}
		if _, ok := shared.peek("k"); ok {
			t.Fatal("Set with bad tags wrote the shared tier")
		}
		r, err := c.Fetch(ctx, "k", func(ctx context.Context) (*product, error) {
			flightcache.SetTags(ctx, tags...)
			return &product{ID: "k"}, nil
		})
		if err != nil || r.Value == nil || !errors.Is(r.WriteErr, flightcache.ErrInvalidTag) || r.Outcome != flightcache.OutcomeLoadedWriteFailed {
			t.Fatalf("load with %d bad tags: %v, %v, WriteErr %v; want the value, OutcomeLoadedWriteFailed, ErrInvalidTag", len(tags), r.Outcome, err, r.WriteErr)
		}
		if _, ok := shared.peek("k"); ok {
			t.Fatal("a load with bad tags wrote the shared tier")
		}
	}
	// At the bounds: accepted.
	ok := append(tooMany[:15:15], strings.Repeat("y", 128))
	if err := c.Set(flightcache.WithTags(ctx, append(ok, ok...)...), "k", &product{}); err != nil {
		t.Fatalf("16 distinct tags of up to 128 bytes (repeats ignored): %v", err)
	}
}

// An untagged local hit allocates nothing, with tag fences live or not.
func TestUntaggedHitCostsNoAllocationWithTagFencesLive(t *testing.T) {
	c := newCache(t, flightcache.Options[*product]{TTL: time.Minute})
	ctx := context.Background()
	load := (&origin{}).load("1")
	getValue(t, c, "p:1", load)
	if err := c.InvalidateTag(ctx, "unrelated"); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = c.Get(ctx, "p:1", load) }); n != 0 {
		t.Fatalf("an untagged hit allocates %v times, want 0", n)
	}
}

// getValue is Get that fails the test on an error.
func getValue(t *testing.T, c *flightcache.Cache[*product], key string, load flightcache.LoadFunc[*product]) *product {
	t.Helper()
	p, err := c.Get(context.Background(), key, load)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Another instance sees the removal: the invalidation reaches it through
// the Bus and fences its local copy and the shared entry alike, and a
// later-started instance gets it replayed.
func TestTagInvalidationReachesOtherInstances(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	net := &busNet{}
	newInstance := func() *flightcache.Cache[*product] {
		// No clock skew: values loaded right after the invalidation are
		// newer than it to the microsecond (with a skew, those read
		// within it are reloaded once more).
		return tagCache(t, clock, shared, flightcache.Options[*product]{Local: newRangeLocal[*product](), Bus: net.endpoint(),
			ClockSkew: flightcache.DisableClockSkew})
	}
	a, b := newInstance(), newInstance()
	ctx := context.Background()
	o := &origin{}
	load := taggedOrigin(o, "1", "product:1")
	getValue(t, b, "p:1", load)
	getValue(t, b, "p:2", taggedOrigin(o, "2", "product:2"))
	getValue(t, b, "p:3", taggedOrigin(o, "3", "product:1"))
	clock.Advance(time.Second)
	if err := a.InvalidateTag(ctx, "product:1"); err != nil {
		t.Fatal(err)
	}
	if p := getValue(t, b, "p:1", load); p.Price != 4 {
		t.Fatalf("b served load %d after a's InvalidateTag, want a new load", p.Price)
	}
	if r, err := b.Fetch(ctx, "p:2", load); err != nil || r.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("another tag's value: %v, %v; want a local hit", r.Outcome, err)
	}
	// A later instance: the retained invalidation is replayed with its
	// own version, so load 4's shared entry, read after it, is served.
	c := newInstance()
	if r, err := c.Fetch(ctx, "p:1", load); err != nil || r.Value.Price != 4 || r.Outcome != flightcache.OutcomeHitShared {
		t.Fatalf("a later instance: load %d, %v, %v; want load 4 from the shared tier", r.Value.Price, r.Outcome, err)
	}
	// p:3's shared entry was read before the invalidation and nobody
	// touched it since: absent to the later instance.
	if r, err := c.Fetch(ctx, "p:3", taggedOrigin(o, "3", "product:1")); err != nil || r.Value.Price != 5 || r.Outcome != flightcache.OutcomeLoaded {
		t.Fatalf("a later instance, an older shared entry: load %d, %v, %v; want a new load", r.Value.Price, r.Outcome, err)
	}
}

// After ExpireTag a covered value stands in for a load that outlasts
// SoftTimeout, as a value past its TTL does; the load goes on and
// replaces it.
func TestExpireTagServesStaleWhenTheLoadOutlastsTheSoftTimeout(t *testing.T) {
	local := &notifyLocal[*product]{LocalStore: newLocal[*product](t, nil), sets: make(chan driver.Item[*product], 4)}
	c := newCache(t, flightcache.Options[*product]{TTL: time.Hour, StaleFor: time.Hour, SoftTimeout: 20 * time.Millisecond,
		ClockSkew: flightcache.DisableClockSkew, Local: local})
	ctx := context.Background()
	o := &origin{}
	getValue(t, c, "p:1", taggedOrigin(o, "1", "product:1"))
	<-local.sets
	if err := c.ExpireTag(ctx, "product:1"); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	slow := func(ctx context.Context) (*product, error) {
		flightcache.SetTags(ctx, "product:1")
		<-release
		return &product{ID: "1", Price: 100}, nil
	}
	r, err := c.Fetch(ctx, "p:1", slow)
	close(release)
	if err != nil || r.Outcome != flightcache.OutcomeStale || r.Value.Price != 1 {
		t.Fatalf("after ExpireTag, a slow load: %v, %v, %v; want the old value as stale", r.Value, r.Outcome, err)
	}
	// The load goes on and replaces it.
	if it := <-local.sets; it.Value.Price != 100 {
		t.Fatalf("stored %v, want the load's value", it.Value)
	}
	if r, err := c.Fetch(ctx, "p:1", slow); err != nil || r.Value.Price != 100 || r.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("after the load: %v, %v, %v; want its value from the local tier", r.Value, r.Outcome, err)
	}
}
