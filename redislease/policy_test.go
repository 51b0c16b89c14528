package redislease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// A follower that waits CoalesceWait while the leader still loads applies
// OnCoalesceTimeout: by default (nothing stale to serve) it loads itself
// without caching, so the leader's fenced write still lands; WaitFail
// returns ErrCoalesceTimeout instead.
func TestFollowerWaitBoundAppliesItsPolicy(t *testing.T) {
	addr, prefix := sharedRedis(t)
	const wait = 200 * time.Millisecond
	leader := newInstance(t, newClient(t, addr), prefix, instanceConfig{})
	// A wait shorter than the leader's lease, as a follower whose own
	// Coordinator has a lease no longer than its wait sees it (New refuses
	// a wait below the Cache's own Coordinator's lease TTL); they never
	// lead here.
	short := Options{LeaseTTL: wait}
	loadSelf := newInstance(t, newClient(t, addr), prefix, instanceConfig{lease: short, cache: func(o *flightcache.Options[string]) { o.CoalesceWait = wait }})
	fail := newInstance(t, newClient(t, addr), prefix, instanceConfig{lease: short, cache: func(o *flightcache.Options[string]) {
		o.CoalesceWait = wait
		o.OnCoalesceTimeout = flightcache.WaitFail
	}})
	ctx := context.Background()
	slow := &origin{value: "leader's", gate: make(chan struct{}), started: make(chan int64, 1)}
	leaderGet := fetchAsync(ctx, leader.cache, "k", slow.load)
	<-slow.started

	own := &origin{value: "follower's own"}
	r := await(t, fetchAsync(ctx, loadSelf.cache, "k", own.load), 5*time.Second)
	if r.err != nil || r.r.Value != "follower's own" || own.calls.Load() != 1 {
		t.Fatalf("WaitStaleOrLoad without stale = %q, %v after %d loads; want its own load", r.r.Value, r.err, own.calls.Load())
	}
	if _, ok, _ := loadSelf.store.Get(ctx, "k"); ok {
		t.Fatal("the follower's own load was stored; it must leave the write to the leader")
	}
	r = await(t, fetchAsync(ctx, fail.cache, "k", own.load), 5*time.Second)
	if !errors.Is(r.err, flightcache.ErrCoalesceTimeout) || own.calls.Load() != 1 {
		t.Fatalf("WaitFail = %q, %v after %d loads; want ErrCoalesceTimeout without a load", r.r.Value, r.err, own.calls.Load())
	}
	if n := fail.rec.count(driver.EventFollowerWoken); n != 1 {
		t.Fatalf("EventFollowerWoken = %d for the timed-out wait, want 1", n)
	}
	close(slow.gate)
	if r := await(t, leaderGet, 5*time.Second); r.err != nil || r.r.Value != "leader's" {
		t.Fatalf("leader = %q, %v", r.r.Value, r.err)
	}
	if e, ok, err := leader.store.Get(ctx, "k"); err != nil || !ok || string(e.Value) != `"leader's"` {
		t.Fatalf("stored %q, %v, %v; want the leader's value", e.Value, ok, err)
	}
}
