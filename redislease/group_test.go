package redislease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// groupRig is a Coordinator on a client whose round trips are counted
// (trips) and can be held (faults), with its scripts loaded.
type groupRig struct {
	in     *instance
	trips  *roundTripHook
	faults *faultHook
}

func newGroupRig(t *testing.T, addr, prefix string) *groupRig {
	t.Helper()
	r := &groupRig{trips: &roundTripHook{}, faults: &faultHook{}}
	r.in = newInstance(t, newClient(t, addr, r.trips, r.faults), prefix, instanceConfig{})
	// The scripts are loaded (a first EVALSHA answers NOSCRIPT, then EVAL).
	ctx := context.Background()
	g, err := r.in.coord.Claim(ctx, "warm-up", driver.ClaimRequest{Wait: time.Second})
	if err != nil || g.Lease == nil {
		t.Fatalf("warm-up Claim: %+v %v", g, err)
	}
	if _, err := g.Lease.Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return r
}

// group is the queue of s's calls (outside Redis Cluster there is one per
// script).
func (r *groupRig) group(s *redis.Script) *scriptGroup {
	return r.in.coord.groupFor(context.Background(), s, "any")
}

// awaitQueued waits until n calls of s are queued behind the one in
// progress.
func (r *groupRig) awaitQueued(t *testing.T, s *redis.Script, n int) {
	t.Helper()
	g := r.group(s)
	eventually(t, time.Minute, fmt.Sprintf("%d calls queued", n), func() bool { return g.queued() == n })
}

// claimResult is one Claim's answer.
type claimResult struct {
	key string
	g   driver.Grant
	err error
}

func claimAsync(ctx context.Context, c *Coordinator, key string) <-chan claimResult {
	ch := make(chan claimResult, 1)
	go func() {
		g, err := c.Claim(ctx, key, driver.ClaimRequest{Wait: time.Second})
		ch <- claimResult{key: key, g: g, err: err}
	}()
	return ch
}

// completeAll waits for each Claim of chs, wants a lease from every one,
// and completes the leases concurrently (as their flights would, and so
// that grouped completions are exercised too).
func completeAll(ctx context.Context, t *testing.T, chs []<-chan claimResult) {
	t.Helper()
	var wg sync.WaitGroup
	for _, ch := range chs {
		res := awaitClaim(t, ch)
		if res.err != nil || res.g.Lease == nil {
			t.Fatalf("Claim %q: %+v %v, want a lease", res.key, res.g, res.err)
		}
		wg.Go(func() {
			if _, err := res.g.Lease.Complete(ctx, nil); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

func awaitClaim(t *testing.T, ch <-chan claimResult) claimResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(time.Minute):
		t.Fatal("a Claim did not return within a minute")
		return claimResult{}
	}
}

// N concurrent Claims of distinct keys on one instance, the leases of a
// Batcher's misses, take two round trips, not N: the first goes alone at
// once, the others queue while it is in progress and go together in one
// pipeline when it returns. Their Completes, concurrent too, take two the
// same way. A lone Claim and a lone Complete still take one round trip
// each, as before grouping.
func TestConcurrentClaimsShareOneRoundTrip(t *testing.T) {
	const n = 40
	addr, prefix := sharedRedis(t)
	r := newGroupRig(t, addr, prefix)
	ctx := context.Background()

	r.trips.watch("claimgroup-")
	r.faults.pauseNow() // the first Claim's script is held in flight
	chs := make([]<-chan claimResult, n)
	for i := range chs {
		chs[i] = claimAsync(ctx, r.in.coord, fmt.Sprintf("claimgroup-%d", i))
	}
	r.awaitQueued(t, acquireScript, n-1)
	r.faults.resume()
	leases := make([]driver.Lease, n)
	tokens := map[uint64]bool{}
	for i, ch := range chs {
		res := awaitClaim(t, ch)
		if res.err != nil || res.g.Lease == nil {
			t.Fatalf("Claim %q: %+v %v: want a lease", res.key, res.g, res.err)
		}
		leases[i] = res.g.Lease
		tokens[res.g.Lease.Token()] = true
	}
	claimTrips := r.trips.seen()
	want := []string{"evalsha", strings.Repeat("evalsha+", n-2) + "evalsha"}
	if fmt.Sprint(claimTrips) != fmt.Sprint(want) {
		t.Fatalf("%d concurrent Claims made %d round trips %q, want 2: one alone, one pipeline of %d", n, len(claimTrips), claimTrips, n-1)
	}
	if len(tokens) != n {
		t.Fatalf("%d distinct tokens for %d keys", len(tokens), n)
	}

	r.trips.watch("claimgroup-")
	r.faults.pauseNow()
	errs := make(chan error, n)
	for _, l := range leases {
		go func() {
			done, err := l.Complete(ctx, nil)
			if err == nil && !done.Written {
				err = errors.New("the completion was refused")
			}
			errs <- err
		}()
	}
	r.awaitQueued(t, completeScript, n-1)
	r.faults.resume()
	for range n {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("a Complete did not return within a minute")
		}
	}
	if trips := r.trips.seen(); fmt.Sprint(trips) != fmt.Sprint(want) {
		t.Fatalf("%d concurrent Completes made %d round trips %q, want 2", n, len(trips), trips)
	}
	// Each key's completion is recorded: a new Claim finds it done.
	for i := range n {
		g, err := r.in.coord.Claim(ctx, fmt.Sprintf("claimgroup-%d", i), driver.ClaimRequest{Wait: time.Second, After: leases[i].Token() - 1})
		if err != nil || g.Done != leases[i].Token() {
			t.Fatalf("key %d after its grouped Complete: %+v %v, want done by token %d", i, g, err, leases[i].Token())
		}
	}

	r.trips.watch("claimgroup-lone")
	g, err := r.in.coord.Claim(ctx, "claimgroup-lone", driver.ClaimRequest{Wait: time.Second})
	if err != nil || g.Lease == nil {
		t.Fatalf("lone Claim: %+v %v", g, err)
	}
	if _, err := g.Lease.Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if trips := r.trips.seen(); fmt.Sprint(trips) != fmt.Sprint([]string{"evalsha", "evalsha"}) {
		t.Fatalf("a lone Claim and Complete made round trips %q, want one each", trips)
	}
	t.Logf("%d concurrent Claims: %d round trips %q...; a lone Claim and Complete: 1 each", n, len(claimTrips), claimTrips[0])
}

// A caller whose ctx ends while its Claim is queued returns at once, with
// its ctx's error, and its script is never sent (the key's token is never
// issued); the Claims queued with it are served.
func TestQueuedClaimWhoseCallerLeftIsNotSent(t *testing.T) {
	addr, prefix := sharedRedis(t)
	r := newGroupRig(t, addr, prefix)
	ctx := context.Background()
	r.faults.pauseNow()
	first := claimAsync(ctx, r.in.coord, "first")
	g := r.group(acquireScript)
	eventually(t, time.Minute, "the first Claim in progress", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.busy
	})
	lctx, leave := context.WithCancel(ctx)
	left := claimAsync(lctx, r.in.coord, "left")
	r.awaitQueued(t, acquireScript, 1)
	stayed := claimAsync(ctx, r.in.coord, "stayed")
	r.awaitQueued(t, acquireScript, 2)
	leave()
	if res := awaitClaim(t, left); !errors.Is(res.err, context.Canceled) || res.g.Lease != nil {
		t.Fatalf("the Claim whose caller left, Redis still held: %+v %v, want context.Canceled at once", res.g, res.err)
	}
	r.faults.resume()
	for _, ch := range []<-chan claimResult{first, stayed} {
		if res := awaitClaim(t, ch); res.err != nil || res.g.Lease == nil {
			t.Fatalf("Claim %q: %+v %v, want a lease", res.key, res.g, res.err)
		} else if _, err := res.g.Lease.Complete(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	if tok, err := r.in.coord.Token(ctx, "left"); err != nil || tok != 0 {
		t.Fatalf("the key of the Claim whose caller left has token %d (%v): its script was sent", tok, err)
	}
}

// A script of the pipeline that Redis refuses (here the user may not
// touch its key: NOPERM, on a private server) fails its own Claim alone,
// with Redis's error; the Claims in the same pipeline get their leases.
func TestOneRefusedScriptOfAGroupFailsItsClaimAlone(t *testing.T) {
	srv := testenv.StartRedis(t)
	r := newGroupRig(t, srv.Addr, testenv.UniqueName("refused:")+":")
	ctx := context.Background()
	// From now on the client's user may touch the keys of these cache
	// keys alone.
	rule := []any{"ACL", "SETUSER", "default", "resetkeys"}
	for _, key := range []string{"first", "good-a", "good-b"} {
		k, err := r.in.coord.keysFor(key)
		if err != nil {
			t.Fatal(err)
		}
		rule = append(rule, "~"+k.value+"*")
	}
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := admin.Do(ctx, rule...).Err(); err != nil {
		t.Fatal(err)
	}
	r.faults.pauseNow()
	first := claimAsync(ctx, r.in.coord, "first")
	eventually(t, time.Minute, "the first Claim in progress", func() bool {
		g := r.group(acquireScript)
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.busy
	})
	var queued []<-chan claimResult
	for i, key := range []string{"good-a", "refused", "good-b"} {
		queued = append(queued, claimAsync(ctx, r.in.coord, key))
		r.awaitQueued(t, acquireScript, i+1)
	}
	r.trips.watch("}") // every key
	r.faults.resume()
	for _, ch := range append(queued, first) {
		res := awaitClaim(t, ch)
		if res.key == "refused" {
			if !redis.HasErrorPrefix(res.err, "NOPERM") || res.g.Lease != nil {
				t.Fatalf("the Claim of a key the user may not touch: %+v %v, want Redis's NOPERM error", res.g, res.err)
			}
			continue
		}
		if res.err != nil || res.g.Lease == nil {
			t.Fatalf("Claim %q: %+v %v, want a lease", res.key, res.g, res.err)
		}
		if _, err := res.g.Lease.Complete(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	if trips := r.trips.seen(); len(trips) < 1 || trips[0] != "evalsha+evalsha+evalsha" {
		t.Fatalf("round trips %q: want the three queued Claims in one pipeline first", trips)
	}
}

// Scripts the server forgot (SCRIPT FLUSH, on a private server) while
// Claims were queued: the pipeline's calls answered NOSCRIPT are sent
// again with the script's text, and every Claim gets its lease.
func TestGroupedClaimsSurviveAFlushedScriptCache(t *testing.T) {
	srv := testenv.StartRedis(t)
	r := newGroupRig(t, srv.Addr, testenv.UniqueName("noscript:")+":")
	ctx := context.Background()
	r.faults.pauseNow()
	const n = 8
	chs := make([]<-chan claimResult, n)
	for i := range chs {
		chs[i] = claimAsync(ctx, r.in.coord, fmt.Sprintf("k%d", i))
	}
	r.awaitQueued(t, acquireScript, n-1)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r.trips.watch("k")
	r.faults.resume()
	completeAll(ctx, t, chs)
	evals := 0
	for _, trip := range r.trips.seen() {
		if strings.Contains(trip, "eval+") || strings.HasSuffix(trip, "eval") && !strings.HasSuffix(trip, "evalsha") {
			evals++
		}
	}
	if evals == 0 {
		t.Fatalf("round trips %q: no script was sent again with its text", r.trips.seen())
	}
}

// A group's queue is bounded: a call that finds maxGroupQueue calls
// waiting goes alone, at once, instead of joining them, and the queue
// goes in pipelines of at most maxGroupPipeline.
func TestFullGroupQueueSendsTheCallAlone(t *testing.T) {
	addr, prefix := sharedRedis(t)
	r := newGroupRig(t, addr, prefix)
	ctx := context.Background()
	r.trips.watch("full-")
	r.faults.pauseNow()
	chs := []<-chan claimResult{claimAsync(ctx, r.in.coord, "full-first")}
	eventually(t, time.Minute, "the first Claim in progress", func() bool { return len(r.trips.seen()) == 1 })
	for i := range maxGroupQueue {
		chs = append(chs, claimAsync(ctx, r.in.coord, fmt.Sprintf("full-%d", i)))
	}
	r.awaitQueued(t, acquireScript, maxGroupQueue)
	chs = append(chs, claimAsync(ctx, r.in.coord, "full-over"))
	// Sent at once, alone: it reaches the client while the first is held.
	eventually(t, time.Minute, "the call over the bound sent alone", func() bool { return len(r.trips.seen()) == 2 })
	if q := r.group(acquireScript).queued(); q != maxGroupQueue {
		t.Fatalf("%d calls queued, want the bound %d", q, maxGroupQueue)
	}
	r.faults.resume()
	completeAll(ctx, t, chs)
	trips := r.trips.seen()
	var alone, piped int
	for _, trip := range trips {
		if !strings.HasPrefix(trip, "evalsha") {
			continue
		}
		switch n := strings.Count(trip, "evalsha"); {
		case n == 1:
			alone++
		case n <= maxGroupPipeline:
			piped += n
		default:
			t.Fatalf("a pipeline of %d scripts, over the bound %d", n, maxGroupPipeline)
		}
	}
	// Claims and Completes together: every script was sent once.
	if alone+piped != 2*(maxGroupQueue+2) {
		t.Fatalf("%d scripts sent alone and %d in pipelines, want %d in all", alone, piped, 2*(maxGroupQueue+2))
	}
}
