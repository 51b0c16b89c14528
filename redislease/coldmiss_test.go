package redislease

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// The faults of the read-or-claim look, the first Redis call of a Get
// that missed its local tier in cluster mode with Options.ReadInClaim (it
// stands in for the plain shared read): it is a shared call, under the SharedBreaker and
// SharedTimeout, and what the read before the flight used to give (a
// stale fallback, a shared hit) it gives too.

// countingBreaker is a SharedBreaker that counts the calls it allowed and
// those reported as failures, and refuses every call while refuse is set.
type countingBreaker struct {
	allowed, failures atomic.Int64
	refuse            atomic.Bool
}

func (b *countingBreaker) Allow() (func(failed bool), error) {
	if b.refuse.Load() {
		return nil, driver.ErrBreakerOpen
	}
	b.allowed.Add(1)
	return func(failed bool) {
		if failed {
			b.failures.Add(1)
		}
	}, nil
}

func (b *countingBreaker) State() driver.BreakerState {
	if b.refuse.Load() {
		return driver.BreakerOpen
	}
	return driver.BreakerClosed
}

// A Redis that stops answering (SIGSTOP) at the look: the Get makes that
// one shared call, which times out under SharedTimeout (not the
// Coordinator's much longer Timeout) and is reported to the breaker as a
// failure; the Coordinator is not asked again, and the value is loaded
// within the process and served. An open breaker refuses the look: not
// one command reaches Redis for the key, and the value is loaded all the
// same.
func TestReadOrClaimLookIsASharedCall(t *testing.T) {
	srv := testenv.StartRedis(t)
	hook := &roundTripHook{}
	client := newClient(t, srv.Addr, hook)
	breaker := &countingBreaker{}
	in := newInstance(t, client, "look:", instanceConfig{lease: Options{ReadInClaim: true}, cache: func(o *flightcache.Options[string]) {
		o.SharedBreaker = breaker
		// Far below the Coordinator's 10s Timeout (newInstance): a Get
		// that returns at all did not wait for that one.
		o.SharedTimeout = 300 * time.Millisecond
	}})
	ctx := context.Background()
	o := &origin{value: "v"}
	if _, err := in.cache.Fetch(ctx, "warm-up", o.load); err != nil {
		t.Fatal(err)
	}

	t.Run("Paused", func(t *testing.T) {
		allowed, failures := breaker.allowed.Load(), breaker.failures.Load()
		calls := o.calls.Load()
		srv.Pause()
		defer srv.Resume()
		r, err := in.cache.Fetch(ctx, "paused", o.load)
		if err != nil || r.Value != "v" || r.Scope != flightcache.ScopeLocal {
			t.Fatalf("Fetch with Redis paused: %+v %v, want v loaded within the process", r, err)
		}
		if n := o.calls.Load() - calls; n != 1 {
			t.Fatalf("the origin was called %d times, want 1", n)
		}
		if n := breaker.allowed.Load() - allowed; n != 1 {
			t.Fatalf("the breaker allowed %d shared calls, want 1 (the look; nothing after its timeout)", n)
		}
		if n := breaker.failures.Load() - failures; n != 1 {
			t.Fatalf("the breaker was told of %d failures, want 1", n)
		}
	})

	t.Run("BreakerOpen", func(t *testing.T) {
		breaker.refuse.Store(true)
		defer breaker.refuse.Store(false)
		hook.watch("refused")
		r, err := in.cache.Fetch(ctx, "refused", o.load)
		if err != nil || r.Value != "v" || r.Scope != flightcache.ScopeLocal {
			t.Fatalf("Fetch with the breaker open: %+v %v, want v loaded within the process", r, err)
		}
		if trips := hook.seen(); len(trips) != 0 {
			t.Fatalf("with the breaker open the Get made round trips %q, want none", trips)
		}
	})

	t.Run("RestartedEmpty", func(t *testing.T) {
		srv.Kill()
		srv.Start()
		// The pool's connections died with the server: the first command
		// on each may fail. Dial afresh before the Get under test.
		eventually(t, time.Minute, "the client reconnected", func() bool {
			return client.Ping(ctx).Err() == nil
		})
		// The scripts are gone with the restart: go-redis sends them again
		// (EVALSHA answers NOSCRIPT, then EVAL).
		o2 := &origin{value: "w"}
		r, err := in.cache.Fetch(ctx, "restarted", o2.load)
		if err != nil || r.Value != "w" || r.Outcome != flightcache.OutcomeLoaded {
			t.Fatalf("Fetch after Redis restarted empty: %+v %v, want w loaded under a lease", r, err)
		}
		other := newInstance(t, newClient(t, srv.Addr), "look:", instanceConfig{lease: Options{ReadInClaim: true}})
		if r, err := other.cache.Fetch(ctx, "restarted", o2.load); err != nil || r.Value != "w" || r.Outcome != flightcache.OutcomeHitShared {
			t.Fatalf("another instance after the restart: %+v %v, want a shared hit", r, err)
		}
	})
}

// A stale entry in the shared tier, which this instance does not hold,
// with ReadInClaim: the look reads it (it is not served, being stale), the next Claim takes
// the lease, and when the load fails the Get serves that stale entry, as
// it did when it read the tier before the flight. Three round trips: the
// look, the claim, the failure.
func TestReadOrClaimLookKeepsTheStaleFallback(t *testing.T) {
	addr, prefix := sharedRedis(t)
	hook := &roundTripHook{}
	in := newInstance(t, newClient(t, addr, hook), prefix, instanceConfig{lease: Options{ReadInClaim: true}, cache: func(o *flightcache.Options[string]) {
		o.StaleFor = time.Hour
	}})
	ctx := context.Background()
	if _, err := in.cache.Fetch(ctx, "warm-up", (&origin{value: "v"}).load); err != nil {
		t.Fatal(err)
	}
	wall := time.Now()
	e := driver.Entry{Value: []byte(`"old"`), Meta: driver.Meta{
		LoadedAt: wall.Add(-2 * time.Minute), FreshUntil: wall.Add(-time.Minute), StaleUntil: wall.Add(time.Hour),
	}}
	if err := in.store.Set(ctx, "stale-key", e); err != nil {
		t.Fatal(err)
	}
	hook.watch("stale-key")
	boom := errors.New("origin down")
	r, err := in.cache.Fetch(ctx, "stale-key", func(context.Context) (string, error) { return "", boom })
	if err != nil || r.Value != "old" || r.Outcome != flightcache.OutcomeStale {
		t.Fatalf("Fetch with a stale shared entry and a failing origin: %+v %v, want the stale value", r, err)
	}
	trips := hook.seen()
	if want := []string{"evalsha", "evalsha", "evalsha"}; fmt.Sprint(trips) != fmt.Sprint(want) {
		t.Fatalf("round trips %q, want %q (look, claim, fail)", trips, want)
	}
}

// On a real three-master Redis Cluster (a ClusterClient: EVALSHA routed
// by the key's slot), the round trips are those of a single Redis, in
// both modes: by default a cold miss is three (the GET, the claim,
// Complete) and a warm shared hit one GET; with ReadInClaim a cold miss is
// two and a warm shared hit one script.
func TestRedisClusterColdMissAndWarmHitRoundTrips(t *testing.T) {
	addrs := testenv.StartRedisCluster(t, 3)
	newCluster := func(hooks ...redis.Hook) redis.UniversalClient {
		c := redis.NewUniversalClient(&redis.UniversalOptions{
			Addrs: addrs, IsClusterMode: true, ContextTimeoutEnabled: true, MaxRetries: -1,
			DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		})
		for _, h := range hooks {
			c.AddHook(h)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for _, mode := range []struct {
		name       string
		lease      Options
		cold, warm []string
	}{
		{"Default", Options{}, []string{"getrange", "evalsha", "evalsha"}, []string{"getrange"}},
		{"ReadInClaim", Options{ReadInClaim: true}, []string{"evalsha", "evalsha"}, []string{"evalsha"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			prefix := testenv.UniqueName("rt:") + ":"
			hook := &roundTripHook{}
			a := newInstance(t, newCluster(hook), prefix, instanceConfig{lease: mode.lease})
			b := newInstance(t, newCluster(), prefix, instanceConfig{lease: mode.lease})
			if a.coord.ClaimReads() != mode.lease.ReadInClaim {
				t.Fatalf("ClaimReads() = %v with ReadInClaim %v", a.coord.ClaimReads(), mode.lease.ReadInClaim)
			}
			ctx := context.Background()
			load := func(context.Context) (string, error) { return "v", nil }
			// Scripts loaded on every master, slots learned: a miss of keys
			// spread over the cluster.
			for i := range 16 {
				if _, err := a.cache.Fetch(ctx, fmt.Sprintf("warm-up-%d", i), load); err != nil {
					t.Fatal(err)
				}
			}
			for _, key := range []string{"cold-1", "user:{42}:cart", "x{y}z"} {
				hook.watch(key)
				r, err := a.cache.Fetch(ctx, key, load)
				if err != nil || r.Outcome != flightcache.OutcomeLoaded {
					t.Fatalf("cold Fetch of %q: %+v %v", key, r, err)
				}
				if trips := hook.seen(); fmt.Sprint(trips) != fmt.Sprint(mode.cold) {
					t.Fatalf("a cold miss of %q made round trips %q, want %q", key, trips, mode.cold)
				}
			}
			// b loads; a, with no local copy, hits the shared tier.
			for _, key := range []string{"warm-1", "user:{43}:cart"} {
				if r, err := b.cache.Fetch(ctx, key, load); err != nil || r.Outcome != flightcache.OutcomeLoaded {
					t.Fatalf("b's load of %q: %+v %v", key, r, err)
				}
				hook.watch(key)
				r, err := a.cache.Fetch(ctx, key, load)
				if err != nil || r.Outcome != flightcache.OutcomeHitShared {
					t.Fatalf("warm Fetch of %q: %+v %v", key, r, err)
				}
				if trips := hook.seen(); fmt.Sprint(trips) != fmt.Sprint(mode.warm) {
					t.Fatalf("a warm shared hit of %q made round trips %q, want %q", key, trips, mode.warm)
				}
			}
		})
	}
}
