package flightcache_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// A key invalidation whose Version is below one already applied (its
// publisher's clock lags another's, within ClockSkew) still drops the
// copies read before it.
func TestAnInvalidationNotNewerThanTheLastStillDropsOlderCopies(t *testing.T) {
	clock := newFakeClock()
	net := &busNet{}
	b := newInstance(t, net, nil, clock, nil) // ClockSkew default 10ms
	var price, calls atomic.Int64
	load := valueLoader(&price, &calls)
	inv := func(at time.Time) driver.Invalidation {
		return driver.Invalidation{Kind: driver.InvalidationKey, Target: "k", Version: wallAt(clock, at)}
	}
	T := clock.Now()
	// C (clock 5ms ahead) deletes at real T: Version T+5ms.
	b.bus.inject(inv(T.Add(5 * time.Millisecond)))
	clock.Advance(time.Millisecond)
	price.Store(1)
	mustGet(t, b.c, "k", load) // B reads origin at T+1ms: price 1
	clock.Advance(time.Millisecond)
	// origin changes to 2, A (accurate clock) Sets at real T+3ms.
	price.Store(2)
	b.bus.inject(inv(T.Add(3 * time.Millisecond)))
	if r := mustGet(t, b.c, "k", load); r.Value.Price != 2 {
		t.Errorf("after A's write B serves price %d (%v): the invalidation was dropped as a duplicate", r.Value.Price, r.Outcome)
	}
}

// A Version far in the future (one host's clock is wrong) is taken as now:
// later, correct invalidations of the target still apply.
func TestAnInvalidationFromTheFutureDoesNotFenceLaterOnes(t *testing.T) {
	net := &busNet{}
	b := newInstance(t, net, nil, nil, nil)
	var price, calls atomic.Int64
	load := valueLoader(&price, &calls)
	b.bus.inject(driver.Invalidation{Kind: driver.InvalidationAll, Version: time.Now().Add(time.Hour)})
	price.Store(1)
	mustGet(t, b.c, "k", load)
	price.Store(2)
	b.bus.inject(driver.Invalidation{Kind: driver.InvalidationAll, Version: time.Now()}) // a real Clear
	if r := mustGet(t, b.c, "k", load); r.Value.Price != 2 {
		t.Errorf("after a Clear B serves price %d (%v)", r.Value.Price, r.Outcome)
	}
}

// A bulk invalidation that an instance never received (its bus was down,
// or it started afterwards) is replayed by the Bus before it is up, so the
// old entries the shared tier still holds are not served.
func TestAnInstanceThatMissedABulkInvalidationGetsItReplayed(t *testing.T) {
	shared := newMapShared(nil)
	net := &busNet{}
	a := newInstance(t, net, shared, nil, nil)
	var price, calls atomic.Int64
	load := valueLoader(&price, &calls)
	price.Store(1)
	mustGet(t, a.c, "item:1:en", load) // shared holds price 1
	price.Store(2)
	if err := a.c.InvalidatePrefix(context.Background(), "item:1:"); err != nil {
		t.Fatal(err)
	}
	// B starts now (or its bus was down and came back: resync).
	b := newInstance(t, net, shared, nil, nil)
	if r := mustGet(t, b.c, "item:1:en", load); r.Value.Price != 2 {
		t.Errorf("B after A's InvalidatePrefix: price %d (%v)", r.Value.Price, r.Outcome)
	}
}

// With the bus down the local copy is not trusted and the shared tier is
// read, but an entry there older than the copy held (a slow peer's
// write-back) is not served either: the key is loaded again, and the
// instance never goes back.
func TestAnOlderSharedEntryIsNeverServedOverANewerCopyHeld(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(nil)
	net := &busNet{}
	b := newInstance(t, net, shared, clock, func(o *flightcache.Options[*product]) { o.BusDownTTL = time.Second })
	var price, calls atomic.Int64
	load := valueLoader(&price, &calls)
	price.Store(2)
	r := mustGet(t, b.c, "k", load) // B loads 2, writes back
	if r.Value.Price != 2 {
		t.Fatal(r.Value.Price)
	}
	// C's slow load of 1 (origin read a minute ago) lands in the shared tier
	// after B's (no Coordinator).
	old, _ := json.Marshal(&product{ID: "1", Price: 1})
	now := time.Now()
	shared.mu.Lock()
	shared.m["k"] = driver.Entry{Value: old, Meta: driver.Meta{
		LoadedAt: now.Add(-time.Minute), FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(time.Hour)}}
	shared.mu.Unlock()
	b.bus.setState(driver.BusDown)
	clock.Advance(2 * time.Second)
	if r := mustGet(t, b.c, "k", load); r.Value.Price != 2 {
		t.Errorf("B served price %d (%v) after having served 2; local still holds 2: %v", r.Value.Price, r.Outcome, b.local.has("k"))
	}
}

// slowShared blocks Set of "slow" until release is closed.
type slowShared struct {
	*mapShared
	entered chan struct{}
	release chan struct{}
}

func (s *slowShared) Set(ctx context.Context, key string, e driver.Entry) error {
	if key == "slow" {
		close(s.entered)
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.mapShared.Set(ctx, key, e)
}

// A write-back's shared write (network I/O) is not made under the bulk
// lock: a Clear does not wait for it, so neither does any other key's fill.
func TestABulkInvalidationDoesNotWaitForAnotherKeysSharedWrite(t *testing.T) {
	sh := &slowShared{mapShared: newMapShared(nil), entered: make(chan struct{}), release: make(chan struct{})}
	b := newInstance(t, &busNet{}, sh, nil, func(o *flightcache.Options[*product]) { o.SharedTimeout = 2 * time.Second })
	var price, calls atomic.Int64
	load := valueLoader(&price, &calls)
	fetched := make(chan struct{})
	go func() { b.c.Fetch(context.Background(), "slow", load); close(fetched) }()
	<-sh.entered
	cleared := make(chan error)
	go func() { cleared <- b.c.Clear(context.Background()) }()
	select {
	case err := <-cleared:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Second):
		t.Error("Clear waited for another key's shared write")
		close(sh.release)
		<-cleared
		<-fetched
		return
	}
	mustGet(t, b.c, "other", load)
	close(sh.release)
	<-fetched
}

// A prefix invalidation outdates the read-path writes of its keys only: a
// load in progress of another key is stored in both tiers.
func TestAPrefixInvalidationLeavesOtherKeysWriteBacksAlone(t *testing.T) {
	shared := newMapShared(nil)
	b := newInstance(t, &busNet{}, shared, nil, nil)
	started, release := make(chan struct{}), make(chan struct{})
	slow := func(ctx context.Context) (*product, error) {
		close(started)
		<-release
		return &product{Price: 1}, nil
	}
	done := make(chan struct{})
	go func() { mustGet(t, b.c, "user:7:profile", slow); close(done) }()
	<-started
	b.bus.inject(driver.Invalidation{Kind: driver.InvalidationPrefix, Target: "order:99:", Version: time.Now()})
	close(release)
	<-done
	if shared.sets.Load() == 0 || !b.local.has("user:7:profile") {
		t.Errorf("an invalidation of order:99: kept user:7:profile out of both tiers (shared sets %d, local %v)", shared.sets.Load(), b.local.has("user:7:profile"))
	}
}

// noLoadedAt is a SharedStore that does not keep LoadedAt (allowed: zero
// means unknown).
type noLoadedAt struct{ *mapShared }

func (s noLoadedAt) Set(ctx context.Context, key string, e driver.Entry) error {
	e.LoadedAt = time.Time{}
	return s.mapShared.Set(ctx, key, e)
}

// Without a Bus, Set and Delete keep no fence: a shared tier that does not
// keep LoadedAt (allowed: zero means unknown) works after a Delete.
func TestWithoutABusWritesLeaveNoFences(t *testing.T) {
	sh := noLoadedAt{newMapShared(nil)}
	c := newCache(t, flightcache.Options[*product]{Shared: sh, TTL: time.Hour, Jitter: flightcache.DisableJitter, Logger: quietLogger})
	var price, calls atomic.Int64
	load := valueLoader(&price, &calls)
	if err := c.Delete(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		mustGet(t, c, "k", load)
	}
	if calls.Load() != 1 {
		t.Errorf("5 Gets after a Delete made %d origin loads (no Bus configured)", calls.Load())
	}
}
