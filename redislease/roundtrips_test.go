package redislease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache"

	"github.com/redis/go-redis/v9"
)

// roundTripHook records every round trip of a client (a command, or a
// pipeline: one each) that names a key or channel containing mark.
type roundTripHook struct {
	mu    sync.Mutex
	mark  string
	trips []string
}

func (h *roundTripHook) record(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mark == "" {
		return
	}
	var names []string
	touches := false
	for _, c := range cmds {
		names = append(names, c.Name())
		for _, a := range c.Args() {
			if s, ok := a.(string); ok && strings.Contains(s, h.mark) {
				touches = true
			}
		}
	}
	if touches {
		h.trips = append(h.trips, strings.Join(names, "+"))
	}
}

func (h *roundTripHook) watch(mark string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mark, h.trips = mark, nil
}

func (h *roundTripHook) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.trips...)
}

func (h *roundTripHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}
func (h *roundTripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds...)
		return next(ctx, cmds)
	}
}

// A cold miss of one instance in cluster mode, with nobody else asking,
// costs its leader two Redis round trips, counted on a real client: the
// read-or-claim look (the Get's shared read, which finds nothing and takes
// the lease in the same script), and the complete script, which also
// makes the fenced write, writes the done marker, releases the lease and
// publishes to the key's followers.
func TestColdMissInClusterModeCostsTwoRoundTrips(t *testing.T) {
	addr, prefix := sharedRedis(t)
	hook := &roundTripHook{}
	in := newInstance(t, newClient(t, addr, hook), prefix, instanceConfig{})
	ctx := context.Background()
	load := func(context.Context) (string, error) { return "v", nil }
	// The scripts are loaded (a first EVALSHA answers NOSCRIPT, then EVAL)
	// by a miss of another key.
	if _, err := in.cache.Fetch(ctx, "warm-up", load); err != nil {
		t.Fatal(err)
	}
	hook.watch("cold-key")
	res, err := in.cache.Fetch(ctx, "cold-key", load)
	if err != nil || res.Value != "v" || res.Outcome != flightcache.OutcomeLoaded {
		t.Fatalf("cold Fetch: %v %v %v", res.Value, res.Outcome, err)
	}
	trips := hook.seen()
	want := []string{"evalsha", "evalsha"}
	if fmt.Sprint(trips) != fmt.Sprint(want) {
		t.Fatalf("a cold miss made %d round trips %q, want %d %q", len(trips), trips, len(want), want)
	}
	t.Logf("a cold miss in cluster mode: %d round trips %q (outcome %v)", len(trips), trips, res.Outcome)
}

// A warm shared hit in cluster mode (another instance loaded the key, this
// one has no local copy) costs one round trip: the read-or-claim look,
// which finds the entry and takes no lease. The key's token is untouched
// (no lease was issued), and the Result is a shared hit, as with a plain
// read of the shared tier.
func TestWarmSharedHitInClusterModeCostsOneRoundTrip(t *testing.T) {
	addr, prefix := sharedRedis(t)
	other := newInstance(t, newClient(t, addr), prefix, instanceConfig{})
	hook := &roundTripHook{}
	in := newInstance(t, newClient(t, addr, hook), prefix, instanceConfig{})
	ctx := context.Background()
	load := func(context.Context) (string, error) { return "v", nil }
	if _, err := in.cache.Fetch(ctx, "warm-up", load); err != nil {
		t.Fatal(err)
	}
	if r, err := other.cache.Fetch(ctx, "warm-key", load); err != nil || r.Outcome != flightcache.OutcomeLoaded {
		t.Fatalf("the other instance's load: %+v %v", r, err)
	}
	tok, err := in.coord.Token(ctx, "warm-key")
	if err != nil {
		t.Fatal(err)
	}
	hook.watch("warm-key")
	res, err := in.cache.Fetch(ctx, "warm-key", func(context.Context) (string, error) {
		return "", errors.New("a warm shared hit loaded")
	})
	if err != nil || res.Value != "v" || res.Outcome != flightcache.OutcomeHitShared {
		t.Fatalf("warm Fetch: %v %v %v", res.Value, res.Outcome, err)
	}
	trips := hook.seen()
	if want := []string{"evalsha"}; fmt.Sprint(trips) != fmt.Sprint(want) {
		t.Fatalf("a warm shared hit made %d round trips %q, want %q", len(trips), trips, want)
	}
	if after, err := in.coord.Token(ctx, "warm-key"); err != nil || after != tok {
		t.Fatalf("the key's token went from %d to %d (%v): a warm hit took a lease", tok, after, err)
	}
	// And the local tier has it now: the next Get makes no round trip.
	hook.watch("warm-key")
	if res, err := in.cache.Fetch(ctx, "warm-key", load); err != nil || res.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("second Fetch: %+v %v", res, err)
	}
	if trips := hook.seen(); len(trips) != 0 {
		t.Fatalf("a local hit made round trips %q", trips)
	}
}

// A follower on another instance, woken by the leader's completion, reads
// the value in the same script that reports the completion: its
// read-or-claim look (the lease is held), its Claim's first look, the
// subscription, the look after subscribing, and the look after the wake-up
// that brings the value. No GET at all.
func TestClusterFollowerReadsTheValueInItsWakeUpScript(t *testing.T) {
	addr, prefix := sharedRedis(t)
	leader := newInstance(t, newClient(t, addr), prefix, instanceConfig{})
	hook := &roundTripHook{}
	follower := newInstance(t, newClient(t, addr, hook), prefix, instanceConfig{})
	ctx := context.Background()
	quick := func(context.Context) (string, error) { return "w", nil }
	// Scripts loaded, the subscription connection dialled.
	for _, in := range []*instance{leader, follower} {
		if _, err := in.cache.Fetch(ctx, "warm-up", quick); err != nil {
			t.Fatal(err)
		}
	}
	entered, release := make(chan struct{}), make(chan struct{})
	lead := fetchAsync(ctx, leader.cache, "herd-key", func(context.Context) (string, error) {
		close(entered)
		<-release
		return "v", nil
	})
	<-entered
	hook.watch("herd-key")
	foll := fetchAsync(ctx, follower.cache, "herd-key", func(context.Context) (string, error) {
		return "", errors.New("the follower loaded: it should have waited for the leader")
	})
	// Released once the follower waits on the key's channel: its
	// subscription has been made (and looked again after).
	eventually(t, time.Minute, "the follower's subscription and second look", func() bool {
		n := 0
		for _, c := range hook.seen() {
			if c == "evalsha" {
				n++
			}
		}
		return n >= 3
	})
	close(release)
	if r := await(t, lead, time.Minute); r.err != nil || r.r.Value != "v" {
		t.Fatalf("leader: %+v", r)
	}
	r := await(t, foll, time.Minute)
	if r.err != nil || r.r.Value != "v" || r.r.Outcome != flightcache.OutcomeCoalesced {
		t.Fatalf("follower: %+v", r)
	}
	var gets int
	trips := hook.seen()
	for _, c := range trips {
		if c == "getrange" {
			gets++
		}
	}
	if gets != 0 || trips[len(trips)-1] != "evalsha" {
		t.Fatalf("the follower's round trips %q: want no GET, and the value in its last script", trips)
	}
	t.Logf("a cluster follower: %d round trips %q", len(trips), trips)
}

// With Options.PlainSharedRead the Get reads the shared tier with a plain
// bounded GET before its flight, as before the read-or-claim look: a warm
// shared hit is that one GET (no script), a cold miss 3 round trips.
func TestPlainSharedReadKeepsTheGETBeforeTheFlight(t *testing.T) {
	addr, prefix := sharedRedis(t)
	other := newInstance(t, newClient(t, addr), prefix, instanceConfig{})
	hook := &roundTripHook{}
	in := newInstance(t, newClient(t, addr, hook), prefix, instanceConfig{lease: Options{PlainSharedRead: true}})
	if in.coord.ClaimReads() {
		t.Fatal("ClaimReads with PlainSharedRead = true, want false")
	}
	ctx := context.Background()
	load := func(context.Context) (string, error) { return "v", nil }
	if _, err := in.cache.Fetch(ctx, "warm-up", load); err != nil {
		t.Fatal(err)
	}
	hook.watch("cold-key")
	if r, err := in.cache.Fetch(ctx, "cold-key", load); err != nil || r.Outcome != flightcache.OutcomeLoaded {
		t.Fatalf("cold Fetch: %+v %v", r, err)
	}
	if trips, want := hook.seen(), []string{"getrange", "evalsha", "evalsha"}; fmt.Sprint(trips) != fmt.Sprint(want) {
		t.Fatalf("a cold miss made round trips %q, want %q", trips, want)
	}
	if _, err := other.cache.Fetch(ctx, "warm-key", load); err != nil {
		t.Fatal(err)
	}
	hook.watch("warm-key")
	if r, err := in.cache.Fetch(ctx, "warm-key", load); err != nil || r.Outcome != flightcache.OutcomeHitShared {
		t.Fatalf("warm Fetch: %+v %v", r, err)
	}
	if trips, want := hook.seen(), []string{"getrange"}; fmt.Sprint(trips) != fmt.Sprint(want) {
		t.Fatalf("a warm shared hit made round trips %q, want %q", trips, want)
	}
}
