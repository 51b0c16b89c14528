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
// costs its leader three Redis round trips by default, counted on a real
// client: the shared read (a bounded GET), the read-or-claim script (the
// flight's double-check of the shared tier and the lease in one step), and
// the complete script, which also makes the fenced write, writes the done
// marker, releases the lease and publishes to the key's followers.
func TestColdMissInClusterModeCostsThreeRoundTrips(t *testing.T) {
	coldMissTrips(t, Options{}, []string{"getrange", "evalsha", "evalsha"})
}

// With Options.ReadInClaim a cold miss costs two: the read-or-claim look
// (the Get's shared read, which finds nothing and takes the lease in the
// same script), and the complete script.
func TestColdMissWithReadInClaimCostsTwoRoundTrips(t *testing.T) {
	coldMissTrips(t, Options{ReadInClaim: true}, []string{"evalsha", "evalsha"})
}

// coldMissTrips checks that a cold miss of one instance built with lease,
// nobody else asking, makes the round trips want, and that its
// Coordinator's ClaimReads is lease.ReadInClaim.
func coldMissTrips(t *testing.T, lease Options, want []string) {
	t.Helper()
	addr, prefix := sharedRedis(t)
	hook := &roundTripHook{}
	in := newInstance(t, newClient(t, addr, hook), prefix, instanceConfig{lease: lease})
	if got := in.coord.ClaimReads(); got != lease.ReadInClaim {
		t.Fatalf("ClaimReads() = %v with ReadInClaim %v", got, lease.ReadInClaim)
	}
	ctx := context.Background()
	load := func(context.Context) (string, error) { return "v", nil }
	// Scripts loaded, connections dialled.
	if _, err := in.cache.Fetch(ctx, "warm-up", load); err != nil {
		t.Fatal(err)
	}
	hook.watch("cold-key")
	res, err := in.cache.Fetch(ctx, "cold-key", load)
	if err != nil || res.Value != "v" || res.Outcome != flightcache.OutcomeLoaded {
		t.Fatalf("cold Fetch: %v %v %v", res.Value, res.Outcome, err)
	}
	trips := hook.seen()
	if fmt.Sprint(trips) != fmt.Sprint(want) {
		t.Fatalf("a cold miss made %d round trips %q, want %d %q", len(trips), trips, len(want), want)
	}
	t.Logf("a cold miss in cluster mode: %d round trips %q (outcome %v)", len(trips), trips, res.Outcome)
}

// A warm shared hit in cluster mode (another instance loaded the key, this
// one has no local copy) is one plain bounded GET by default, no script.
func TestWarmSharedHitInClusterModeIsOneGET(t *testing.T) {
	warmHitTrips(t, Options{}, []string{"getrange"})
}

// With Options.ReadInClaim a warm shared hit is one script instead: the
// read-or-claim look, which finds the entry and takes no lease.
func TestWarmSharedHitWithReadInClaimIsOneScript(t *testing.T) {
	warmHitTrips(t, Options{ReadInClaim: true}, []string{"evalsha"})
}

// warmHitTrips checks that a warm shared hit of an instance built with
// lease makes the round trips want, leaves the key's token untouched (no
// lease was issued), is a shared hit, and fills the local tier: the next
// Get makes no round trip.
func warmHitTrips(t *testing.T, lease Options, want []string) {
	t.Helper()
	addr, prefix := sharedRedis(t)
	other := newInstance(t, newClient(t, addr), prefix, instanceConfig{lease: lease})
	hook := &roundTripHook{}
	in := newInstance(t, newClient(t, addr, hook), prefix, instanceConfig{lease: lease})
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
	if trips := hook.seen(); fmt.Sprint(trips) != fmt.Sprint(want) {
		t.Fatalf("a warm shared hit made %d round trips %q, want %q", len(trips), trips, want)
	}
	if after, err := in.coord.Token(ctx, "warm-key"); err != nil || after != tok {
		t.Fatalf("the key's token went from %d to %d (%v): a warm hit took a lease", tok, after, err)
	}
	hook.watch("warm-key")
	if res, err := in.cache.Fetch(ctx, "warm-key", load); err != nil || res.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("second Fetch: %+v %v", res, err)
	}
	if trips := hook.seen(); len(trips) != 0 {
		t.Fatalf("a local hit made round trips %q", trips)
	}
}

// A follower on another instance, woken by the leader's completion, reads
// the value in the same script that reports the completion, in both modes.
// By default: its shared read before the flight (one GET), its Claim's
// first look (the lease is held), the subscription, the look after
// subscribing, and the look after the wake-up that brings the value. With
// ReadInClaim the GET is the read-or-claim look instead (the lease is
// held): no GET at all. Either way, no GET after the wake-up.
func TestClusterFollowerReadsTheValueInItsWakeUpScript(t *testing.T) {
	for _, mode := range []struct {
		name    string
		lease   Options
		gets    int // GETs the follower makes
		scripts int // scripts before it waits on the key's channel
	}{
		{"Default", Options{}, 1, 2},
		{"ReadInClaim", Options{ReadInClaim: true}, 0, 3},
	} {
		t.Run(mode.name, func(t *testing.T) {
			followerTrips(t, mode.lease, mode.gets, mode.scripts)
		})
	}
}

func followerTrips(t *testing.T, lease Options, wantGets, scripts int) {
	addr, prefix := sharedRedis(t)
	leader := newInstance(t, newClient(t, addr), prefix, instanceConfig{lease: lease})
	hook := &roundTripHook{}
	follower := newInstance(t, newClient(t, addr, hook), prefix, instanceConfig{lease: lease})
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
		return n >= scripts
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
	if gets != wantGets || trips[len(trips)-1] != "evalsha" {
		t.Fatalf("the follower's round trips %q: want %d GET (before its flight) and the value in its last script", trips, wantGets)
	}
	if wantGets == 1 && trips[0] != "getrange" {
		t.Fatalf("the follower's round trips %q: want its GET first, before its flight", trips)
	}
	t.Logf("a cluster follower: %d round trips %q", len(trips), trips)
}
