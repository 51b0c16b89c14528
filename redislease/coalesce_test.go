package redislease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/redis/go-redis/v9"
)

const (
	herdInstances = 8
	herdRequests  = 2000
	herdLatency   = 200 * time.Millisecond
)

// herd sends herdRequests concurrent Gets of one key, spread evenly over
// the instances, all released together, and returns every answer and the
// number of origin calls.
func herd(t *testing.T, instances []*instance, key string) ([]getResult, int64) {
	t.Helper()
	o := &origin{latency: herdLatency, value: "the-value"}
	start := make(chan struct{})
	results := make([]getResult, herdRequests)
	var wg sync.WaitGroup
	for i := range herdRequests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := instances[i%len(instances)].cache.Fetch(context.Background(), key, o.load)
			results[i] = getResult{r: r, err: err}
		}()
	}
	close(start)
	wg.Wait()
	return results, o.calls.Load()
}

func newInstances(t *testing.T, n int, newClient func() redis.UniversalClient, prefix string, cfg instanceConfig) []*instance {
	t.Helper()
	ins := make([]*instance, n)
	for i := range ins {
		ins[i] = newInstance(t, newClient(), prefix, cfg)
	}
	return ins
}

func checkHerd(t *testing.T, results []getResult) (cluster int) {
	t.Helper()
	for i, r := range results {
		if r.err != nil || r.r.Value != "the-value" {
			t.Fatalf("Get %d = %q, %v; want the-value", i, r.r.Value, r.err)
		}
		if r.r.Scope == flightcache.ScopeCluster {
			cluster++
		}
	}
	return cluster
}

func TestClusterModeLoadsOnceForEightInstances(t *testing.T) {
	addr, prefix := sharedRedis(t)
	// A long lease, as in the Cluster herd: 2,000 goroutines under -race
	// on a loaded machine can hold the leader's heartbeat back past the
	// default 3s, and this test is about coalescing, not takeover.
	ins := newInstances(t, herdInstances, func() redis.UniversalClient { return newClient(t, addr) }, prefix, instanceConfig{lease: Options{Timeout: 10 * time.Second, LeaseTTL: 15 * time.Second}})
	results, calls := herd(t, ins, "product:42")
	if calls != 1 {
		for i, in := range ins {
			t.Logf("instance %d: events %v", i, in.rec.counts)
		}
		t.Fatalf("origin called %d times across %d instances in cluster mode, want exactly 1", calls, herdInstances)
	}
	cluster := checkHerd(t, results)
	// One instance led; the others waited for it across the cluster, or,
	// arriving after it wrote (the machine is slow), found its value in
	// their double-check. Those that waited report ScopeCluster.
	var leaders, woken int
	for _, in := range ins {
		leaders += in.rec.count(driver.EventLeaseAcquired)
		woken += in.rec.count(driver.EventFollowerWoken)
	}
	if leaders != 1 {
		t.Fatalf("%d leases, want 1", leaders)
	}
	if (woken > 0) != (cluster > 0) {
		t.Fatalf("%d followers woken but %d results report ScopeCluster", woken, cluster)
	}
}

func TestLocalModeLoadsAtMostOncePerInstance(t *testing.T) {
	addr, prefix := sharedRedis(t)
	ins := newInstances(t, herdInstances, func() redis.UniversalClient { return newClient(t, addr) }, prefix, instanceConfig{local: true})
	results, calls := herd(t, ins, "product:42")
	if calls < 1 || calls > herdInstances {
		t.Fatalf("origin called %d times in local mode, want 1 to %d", calls, herdInstances)
	}
	if cluster := checkHerd(t, results); cluster != 0 {
		t.Fatalf("%d results report ScopeCluster in local mode", cluster)
	}
	for _, in := range ins {
		if s := in.cache.Scope(); s != flightcache.ScopeLocal {
			t.Fatalf("Scope() = %v without a coordinator, want local", s)
		}
	}
}

// A leader that stops heartbeating and never writes (its instance crashed)
// is replaced by one follower once its lease expires, and every waiting
// Get completes with the new leader's value.
func TestCrashedLeaderIsTakenOverWithinLeaseTTL(t *testing.T) {
	addr, prefix := sharedRedis(t)
	crashedLeaderIsTakenOver(t, func(hooks ...redis.Hook) redis.UniversalClient { return newClient(t, addr, hooks...) }, prefix)
}

func crashedLeaderIsTakenOver(t *testing.T, newClient func(...redis.Hook) redis.UniversalClient, prefix string) {
	// A second, not less: on a busy machine the followers' wake-ups and
	// the leader's last heartbeat need slack against the TTL, or a
	// follower claims a lease that has simply expired (no takeover).
	const ttl = time.Second
	cfg := instanceConfig{lease: Options{LeaseTTL: ttl}}
	crash := &faultHook{}
	leader := newInstance(t, newClient(crash), prefix, cfg)
	follow := &faultHook{following: make(chan struct{}, 16)}
	followers := newInstances(t, 3, func() redis.UniversalClient { return newClient(follow) }, prefix, cfg)

	o := &origin{value: "v", gate: make(chan struct{}), started: make(chan int64, 1)}
	leaderGet := fetchAsync(context.Background(), leader.cache, "k", o.load)
	<-o.started // the leader holds the lease and is loading
	o2 := &origin{value: "v2"}
	var waits []<-chan getResult
	for _, f := range followers {
		waits = append(waits, fetchAsync(context.Background(), f.cache, "k", o2.load))
	}
	for range followers {
		<-follow.following // each follower saw the lease held
	}
	crashed := time.Now()
	crash.crashed.Store(true)

	var takeovers int
	for i, w := range waits {
		r := await(t, w, 5*time.Second)
		if r.err != nil || r.r.Value != "v2" {
			t.Fatalf("follower %d = %q, %v; want the taking-over follower's value", i, r.r.Value, r.err)
		}
		// The lease TTL plus the slack of a loaded host (two test suites
		// on two cores delayed a follower 1.15s past the TTL); a follower
		// that waited for its own CoalesceWait instead of the takeover
		// would take several TTLs.
		if d := r.at.Sub(crashed); d > ttl+2*time.Second {
			t.Fatalf("follower %d returned %v after the crash, want within the lease TTL %v plus 2s", i, d, ttl)
		}
	}
	for _, f := range followers {
		takeovers += f.rec.count(driver.EventLeaseTakenOver)
	}
	if takeovers != 1 {
		t.Fatalf("%d takeovers, want exactly 1", takeovers)
	}
	if n := o.calls.Load() + o2.calls.Load(); n != 2 {
		t.Fatalf("origin called %d times, want 2: the crashed leader's and the takeover's", n)
	}
	close(o.gate)
	await(t, leaderGet, 5*time.Second)
}

// A leader paused past its lease comes back after another instance took
// over and wrote: its write is refused by the fence, the stored value and
// token are the new leader's, and no reader, the old leader's own callers
// included, sees the older value afterwards. The old leader's callers get
// the newer value even when its reads fail after the thaw: the script that
// refuses the write hands it back.
func TestPausedLeaderWriteIsRejectedByFencing(t *testing.T) {
	t.Run("reads work", func(t *testing.T) { pausedLeaderIsFenced(t, false) })
	t.Run("reads fail after the thaw", func(t *testing.T) { pausedLeaderIsFenced(t, true) })
}

func pausedLeaderIsFenced(t *testing.T, readsFail bool) {
	addr, prefix := sharedRedis(t)
	const ttl = 300 * time.Millisecond
	cfg := instanceConfig{lease: Options{LeaseTTL: ttl}}
	pause := &faultHook{}
	old := newInstance(t, newClient(t, addr, pause), prefix, cfg)
	next := newInstance(t, newClient(t, addr), prefix, cfg)
	reader := newInstance(t, newClient(t, addr), prefix, cfg)
	ctx := context.Background()

	o1 := &origin{value: "old", gate: make(chan struct{}), started: make(chan int64, 1)}
	oldGet := fetchAsync(ctx, old.cache, "k", o1.load)
	<-o1.started
	t1, err := reader.coord.Token(ctx, "k")
	if err != nil || t1 == 0 {
		t.Fatalf("token of the first lease = %d, %v", t1, err)
	}
	pause.pauseNow() // SIGSTOP: no heartbeat, no write

	o2 := &origin{value: "new"}
	r := await(t, fetchAsync(ctx, next.cache, "k", o2.load), 5*time.Second)
	if r.err != nil || r.r.Value != "new" || o2.calls.Load() != 1 {
		t.Fatalf("takeover Get = %q, %v after %d loads; want new, loaded once", r.r.Value, r.err, o2.calls.Load())
	}
	if next.rec.count(driver.EventLeaseTakenOver) != 1 {
		t.Fatalf("the second instance did not take the lease over")
	}
	t2, err := reader.coord.Token(ctx, "k")
	if err != nil || t2 <= t1 {
		t.Fatalf("token after takeover = %d, %v; want above %d", t2, err, t1)
	}

	pause.resume() // SIGCONT
	pause.failGets.Store(readsFail)
	close(o1.gate)
	r = await(t, oldGet, 5*time.Second)
	pause.failGets.Store(false)
	if r.err != nil || r.r.Value != "new" {
		t.Fatalf("the old leader's Get = %q, %v; want the newer value it was fenced by", r.r.Value, r.err)
	}
	if old.rec.count(driver.EventFencedWriteRejected) != 1 {
		t.Fatalf("EventFencedWriteRejected = %d on the old leader, want 1", old.rec.count(driver.EventFencedWriteRejected))
	}
	e, ok, err := reader.store.Get(ctx, "k")
	if err != nil || !ok || string(e.Value) != `"new"` {
		t.Fatalf("stored %q (%v, %v), want the new leader's value", e.Value, ok, err)
	}
	// The fenced write leaves the token as the takeover set it; the
	// token key may also be gone by now, LeaseTTL (300ms) after its last
	// use, which a loaded machine easily outlasts here.
	if tok, _ := reader.coord.Token(ctx, "k"); tok != t2 && tok != 0 {
		t.Fatalf("token = %d after the fenced write, want %d (or 0, expired)", tok, t2)
	}
	for _, in := range []*instance{old, next, reader} {
		if v, err := in.cache.Get(ctx, "k", o2.load); err != nil || v != "new" {
			t.Fatalf("a later Get = %q, %v; want new", v, err)
		}
	}
}

// Set on any instance wins over a load in flight on another: the load's
// write is fenced, and its callers get the explicit value.
func TestSetOnAnotherInstanceWinsOverLoadInFlight(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newInstance(t, newClient(t, addr), prefix, instanceConfig{})
	b := newInstance(t, newClient(t, addr), prefix, instanceConfig{})
	ctx := context.Background()
	o := &origin{value: "loaded-before-set", gate: make(chan struct{}), started: make(chan int64, 1)}
	get := fetchAsync(ctx, a.cache, "k", o.load)
	<-o.started
	if err := b.cache.Set(ctx, "k", "explicit"); err != nil {
		t.Fatal(err)
	}
	close(o.gate)
	r := await(t, get, 5*time.Second)
	if r.err != nil || r.r.Value != "explicit" {
		t.Fatalf("the load's Get = %q, %v; want the explicit value that fenced it", r.r.Value, r.err)
	}
	e, ok, err := b.store.Get(ctx, "k")
	if err != nil || !ok || string(e.Value) != `"explicit"` {
		t.Fatalf("stored %q (%v, %v), want the explicit value", e.Value, ok, err)
	}
}

// A leader's failure reaches every follower on every instance at once,
// far sooner than the lease TTL; within the failure window a new Get gets
// the error without calling the origin, and after it a Get loads again.
func TestLeaderFailureReachesFollowersPromptly(t *testing.T) {
	addr, prefix := sharedRedis(t)
	const ttl, window = 5 * time.Second, 300 * time.Millisecond
	cfg := instanceConfig{lease: Options{LeaseTTL: ttl, FailureWindow: window}}
	leader := newInstance(t, newClient(t, addr), prefix, cfg)
	follow := &faultHook{following: make(chan struct{}, 16)}
	followers := newInstances(t, 7, func() redis.UniversalClient { return newClient(t, addr, follow) }, prefix, cfg)
	ctx := context.Background()

	boom := errors.New("origin down: dial postgres://app:s3cret@db-7.internal:5432")
	o := &origin{err: boom, gate: make(chan struct{}), started: make(chan int64, 1)}
	leaderGet := fetchAsync(ctx, leader.cache, "k", o.load)
	<-o.started
	var waits []<-chan getResult
	for _, f := range followers {
		waits = append(waits, fetchAsync(ctx, f.cache, "k", o.load))
	}
	for range followers {
		<-follow.following
	}
	failed := time.Now()
	close(o.gate)
	if r := await(t, leaderGet, time.Second); !errors.Is(r.err, boom) {
		t.Fatalf("leader's Get err = %v, want the origin's", r.err)
	}
	for i, w := range waits {
		r := await(t, w, ttl)
		if !errors.Is(r.err, flightcache.ErrLeaderFailed) || strings.Contains(r.err.Error(), "s3cret") || strings.Contains(r.err.Error(), "origin down") {
			t.Fatalf("follower %d err = %v, want ErrLeaderFailed without the leader's error text", i, r.err)
		}
		if d := r.at.Sub(failed); d > ttl/5 {
			t.Fatalf("follower %d failed %v after the leader, want well before the lease TTL %v", i, d, ttl)
		}
	}
	if n := o.calls.Load(); n != 1 {
		t.Fatalf("origin called %d times, want 1", n)
	}
	// Within the window: the error, not the origin.
	if _, err := followers[0].cache.Get(ctx, "k", o.load); !errors.Is(err, flightcache.ErrLeaderFailed) || o.calls.Load() != 1 {
		t.Fatalf("Get within the failure window = %v after %d origin calls; want ErrLeaderFailed, no call", err, o.calls.Load())
	}
	// After it: a new load. Wait for the marker to expire in Redis.
	k, _ := leader.coord.keysFor("k")
	for leader.client.Exists(ctx, k.fail).Val() == 1 {
		time.Sleep(10 * time.Millisecond) // polling Redis' expiry of the marker
	}
	ok := &origin{value: "back"}
	if v, err := followers[1].cache.Get(ctx, "k", ok.load); err != nil || v != "back" || ok.calls.Load() != 1 {
		t.Fatalf("Get after the failure window = %q, %v with %d loads; want a fresh load", v, err, ok.calls.Load())
	}
}

// Cluster mode against a Redis that does not answer is refused at
// construction with a clear message, never silently local.
func TestClusterModeWithUnreachableRedisFailsAtConstruction(t *testing.T) {
	// A port nothing listens on.
	client := redis.NewClient(clientOptions("127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))))
	defer client.Close()
	store, err := redisstore.New(client, redisstore.Options{HashTag: true})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = New(context.Background(), client, store, Options{})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "PING failed") {
		t.Fatalf("New = %v, want ErrUnreachable saying PING failed", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("New took %v to fail against a refused connection, want it at once", d)
	}
	untagged, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), client, untagged, Options{})
	var ce *flightcache.ConfigError
	if !errors.As(err, &ce) || ce.Field != "store" {
		t.Fatalf("New with an untagged store = %v, want a ConfigError on store", err)
	}
}

// A failed load's error text never reaches other instances: it can hold
// SQL, host names or credentials, and they would hand it to their callers.
// Followers get a fixed error matching ErrLeaderFailed that names the
// failure's class only; a marker of an older version, which carried the
// text, is read as a plain failure, its text dropped.
func TestLeaderFailureNeverCarriesTheOriginsErrorText(t *testing.T) {
	addr, prefix := sharedRedis(t)
	leader := newBusCoordinator(t, newClient(t, addr), prefix, Options{FailureWindow: time.Minute})
	follower := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	secret := "pq: password authentication failed for user \"app\" (s3cret) at db-7.internal — " + strings.Repeat("é", 200)
	ctx := context.Background()
	for i, c := range []struct {
		err  error
		want error
	}{
		{errors.New(secret), errFailedError},
		{fmt.Errorf("query: %s: %w", secret, context.DeadlineExceeded), errFailedTimeout},
		{fmt.Errorf("%s: %w", secret, flightcache.ErrNotFound), errFailedNotFound},
		{nil, errFailedError},
	} {
		key := "k" + strconv.Itoa(i)
		cl, err := leader.Claim(ctx, key, driver.ClaimRequest{Wait: time.Second})
		if err != nil || cl.Lease == nil {
			t.Fatalf("Claim = %+v, %v; want a lease", cl, err)
		}
		if err := cl.Lease.Fail(ctx, c.err); err != nil {
			t.Fatal(err)
		}
		_, err = follower.Claim(ctx, key, driver.ClaimRequest{Wait: time.Second})
		if !errors.Is(err, flightcache.ErrLeaderFailed) || err != c.want {
			t.Fatalf("case %d: follower's Claim = %v, want %v", i, err, c.want)
		}
		if text := err.Error(); strings.Contains(text, "s3cret") || strings.Contains(text, "db-7") || !utf8.ValidString(text) {
			t.Fatalf("case %d: follower's error %q carries the leader's text", i, text)
		}
	}
	// A marker as an older version wrote it: the token, then the text.
	k, err := leader.keysFor("old")
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.client.Set(ctx, k.fail, "1 "+secret[:len(secret)-1], time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := follower.Claim(ctx, "old", driver.ClaimRequest{Wait: time.Second}); err != errFailedError {
		t.Fatalf("follower's Claim on an old marker = %v, want %v", err, errFailedError)
	}
}
