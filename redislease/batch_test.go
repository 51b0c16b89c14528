package redislease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// batchOrigin is a batch loader that counts, per key, how often it was
// asked for it. Each call returns value+key for every key, after latency;
// while gate is set, a call first signals started and waits for it.
type batchOrigin struct {
	mu      sync.Mutex
	loads   map[string]int
	calls   int
	value   string
	latency time.Duration
	gate    chan struct{}
	started chan struct{}
}

func newBatchOrigin(value string) *batchOrigin {
	return &batchOrigin{loads: make(map[string]int), value: value}
}

func (o *batchOrigin) load(ctx context.Context, keys []string) (map[string]string, error) {
	o.mu.Lock()
	o.calls++
	for _, k := range keys {
		o.loads[k]++
	}
	o.mu.Unlock()
	if o.gate != nil {
		select {
		case o.started <- struct{}{}:
		default:
		}
		select {
		case <-o.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if o.latency > 0 {
		// The origin's latency, not synchronisation.
		t := time.NewTimer(o.latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	m := make(map[string]string, len(keys))
	for _, k := range keys {
		m[k] = o.value + k
	}
	return m, nil
}

func (o *batchOrigin) loadsOf(k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.loads[k]
}

func (o *batchOrigin) callCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls
}

// batchKeys returns n keys under name.
func batchKeys(name string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", name, i)
	}
	return keys
}

// fetchManyAll runs one FetchMany per instance, all released at once.
// Instance i asks for its own window of keys, 2/3 of them, starting at
// i/n of the way (wrapping), so that no instance asks for every key: each
// claims some keys first and finds others claimed, and at least two of
// them lead. It returns their answers by key.
func fetchManyAll(t *testing.T, ins []*instance, keys []string, load flightcache.BatchLoadFunc[string]) []map[string]flightcache.KeyResult[string] {
	t.Helper()
	start := make(chan struct{})
	out := make([]map[string]flightcache.KeyResult[string], len(ins))
	var wg sync.WaitGroup
	for i, in := range ins {
		var window []string
		for n := range 2 * len(keys) / 3 {
			window = append(window, keys[(i*len(keys)/len(ins)+n)%len(keys)])
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			rs := in.cache.FetchMany(context.Background(), window, load)
			out[i] = make(map[string]flightcache.KeyResult[string], len(rs))
			for n, r := range rs {
				out[i][window[n]] = r
			}
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// checkBatchLoadedOnce fails unless every instance got value+key for every
// key and the origin loaded each key exactly once in the whole cluster.
func checkBatchLoadedOnce(t *testing.T, o *batchOrigin, keys []string, got []map[string]flightcache.KeyResult[string]) {
	t.Helper()
	for i, rs := range got {
		for k, r := range rs {
			if r.Err != nil || r.Value != o.value+k {
				t.Fatalf("instance %d, key %s: %q, %v (%v); want %q", i, k, r.Value, r.Err, r.Outcome, o.value+k)
			}
		}
	}
	for _, k := range keys {
		if n := o.loadsOf(k); n != 1 {
			t.Fatalf("key %s loaded %d times across %d instances, want exactly 1", k, n, len(got))
		}
	}
	// No instance asked for every key: at least two led a loader call.
	if n := o.callCount(); n < 2 {
		t.Fatalf("%d loader calls for keys no single instance asked for all of, want at least 2", n)
	}
}

// Three instances (each its own client, Coordinator and Cache on one
// Redis) batch overlapping windows of 40 keys at once: each key is loaded
// once in the whole cluster. Each instance leads the keys it
// claimed first and waits for the others (not loading them twice), and
// what it loads reaches the shared tier: a fourth instance reads every
// key from it.
func TestBatchOfThreeInstancesLoadsEachKeyOnce(t *testing.T) {
	addr, prefix := sharedRedis(t)
	cfg := instanceConfig{lease: Options{LeaseTTL: 15 * time.Second}} // coalescing, not take-over
	ins := newInstances(t, 3, func() redis.UniversalClient { return newClient(t, addr) }, prefix, cfg)
	keys := batchKeys("three", 40)
	o := newBatchOrigin("v-")
	o.latency = 20 * time.Millisecond
	got := fetchManyAll(t, ins, keys, o.load)
	checkBatchLoadedOnce(t, o, keys, got)
	t.Logf("overlapping batches of 40 keys by 3 instances at once: %d loader calls, each key loaded once", o.callCount())

	reader := newInstance(t, newClient(t, addr), prefix, cfg)
	rs := reader.cache.FetchMany(context.Background(), keys, nil)
	for n, r := range rs {
		if r.Err != nil || r.Value != "v-"+keys[n] || r.Outcome != flightcache.OutcomeHitShared {
			t.Fatalf("a fourth instance reads %s: %q %v %v; want a shared hit", keys[n], r.Value, r.Outcome, r.Err)
		}
	}
}

// A cold batch of 16 keys on one instance costs three round trips,
// counted on the client: the shared read (one pipeline), the claim of
// every key's lease with the read of its entry (one pipeline of claim
// scripts), and the completion (one pipeline of complete scripts: fenced
// writes, done markers, releases, wake-ups). Not one per key.
func TestBatchClaimsAndCompletesInOneRoundTripEach(t *testing.T) {
	addr, prefix := sharedRedis(t)
	hook := &roundTripHook{}
	in := newInstance(t, newClient(t, addr, hook), prefix, instanceConfig{})
	ctx := context.Background()
	o := newBatchOrigin("v-")
	// The scripts are loaded (a first EVALSHA answers NOSCRIPT, then EVAL)
	// by a batch of other keys.
	if rs := in.cache.FetchMany(ctx, batchKeys("warm-up", 2), o.load); rs[0].Err != nil {
		t.Fatal(rs[0].Err)
	}
	keys := batchKeys("cold-batch", 16)
	hook.watch("cold-batch")
	rs := in.cache.FetchMany(ctx, keys, o.load)
	for n, r := range rs {
		if r.Err != nil || r.Value != "v-"+keys[n] || r.Outcome != flightcache.OutcomeLoaded {
			t.Fatalf("key %s: %q %v %v", keys[n], r.Value, r.Outcome, r.Err)
		}
	}
	trips := hook.seen()
	want := []string{strings.Repeat("getrange+", 15) + "getrange", strings.Repeat("evalsha+", 15) + "evalsha", strings.Repeat("evalsha+", 15) + "evalsha"}
	if !slices.Equal(trips, want) {
		t.Fatalf("a cold batch of 16 keys made %d round trips %q, want 3", len(trips), trips)
	}
	if n := in.rec.count(driver.EventLeaseAcquired); n != 16+2 {
		t.Fatalf("%d leases acquired, want 18 (16 and the warm-up's 2)", n)
	}
}

// An instance that dies in the middle of a batch it leads (its Redis
// calls fail from then on: no heartbeat, no completion) holds its leases
// until they expire; another instance batching the same keys waits for
// them, takes each over and loads it once, and its values are the ones
// in the shared tier. The dead instance's late completion changes
// nothing.
func TestBatchLeaderDyingMidBatchIsTakenOver(t *testing.T) {
	addr, prefix := sharedRedis(t)
	// The heir must claim while the dead leases still stand (they end
	// between 2 and 3 lease-TTL thirds after the crash): a lease that
	// expired first is claimed afresh, not taken over. 3s leaves a loaded
	// host two seconds for that.
	cfg := instanceConfig{lease: Options{LeaseTTL: 3 * time.Second}}
	hook := &faultHook{}
	dead := newInstance(t, newClient(t, addr, hook), prefix, cfg)
	heir := newInstance(t, newClient(t, addr), prefix, cfg)
	keys := batchKeys("dies", 6)

	old := newBatchOrigin("old-")
	old.gate, old.started = make(chan struct{}), make(chan struct{}, 1)
	deadDone := make(chan []flightcache.KeyResult[string], 1)
	go func() { deadDone <- dead.cache.FetchMany(context.Background(), keys, old.load) }()
	select {
	case <-old.started: // it holds every key's lease and is loading
	case <-time.After(30 * time.Second):
		t.Fatal("the first instance never started loading")
	}
	hook.crashed.Store(true)

	fresh := newBatchOrigin("new-")
	rs := heir.cache.FetchMany(context.Background(), keys, fresh.load)
	for n, r := range rs {
		if r.Err != nil || r.Value != "new-"+keys[n] {
			t.Fatalf("key %s: %q %v %v; want the heir's value", keys[n], r.Value, r.Outcome, r.Err)
		}
		if got := fresh.loadsOf(keys[n]); got != 1 {
			t.Fatalf("key %s loaded %d times by the heir, want 1", keys[n], got)
		}
	}
	if n := heir.rec.count(driver.EventLeaseTakenOver); n != len(keys) {
		t.Fatalf("%d leases taken over, want %d", n, len(keys))
	}
	close(old.gate)
	select {
	case <-deadDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the dead instance's batch never returned")
	}
	// The reader only reads: a generous SharedTimeout, so that a read
	// a loaded host delays is not mistaken for a missing entry.
	readCfg := cfg
	readCfg.cache = func(o *flightcache.Options[string]) { o.SharedTimeout = 5 * time.Second }
	reader := newInstance(t, newClient(t, addr), prefix, readCfg)
	for n, r := range reader.cache.FetchMany(context.Background(), keys, nil) {
		if r.Value != "new-"+keys[n] || r.Outcome != flightcache.OutcomeHitShared {
			t.Fatalf("shared tier holds %q (%v, %v) for %s, want the heir's value", r.Value, r.Outcome, r.Err, keys[n])
		}
	}
}

// With Redis not answering, a batch pays one shared timeout: it asks no
// Coordinator (it lives on the same Redis), loads its keys within the
// process in one call, serves them, writes them to the local tier only and
// says so (OutcomeLoadedWriteFailed, a WriteErr matching
// ErrCoordinatorUnavailable's cause, the skipped write).
func TestBatchWithRedisPausedLoadsLocallyAndWritesNoSharedEntry(t *testing.T) {
	addr, prefix := sharedRedis(t)
	hook := &faultHook{}
	in := newInstance(t, newClient(t, addr, hook), prefix, instanceConfig{cache: func(o *flightcache.Options[string]) {
		o.SharedTimeout = 200 * time.Millisecond
	}})
	keys := batchKeys("paused", 5)
	o := newBatchOrigin("v-")
	hook.pauseNow()
	rs := in.cache.FetchMany(context.Background(), keys, o.load)
	hook.resume()
	for n, r := range rs {
		if r.Err != nil || r.Value != "v-"+keys[n] || r.Outcome != flightcache.OutcomeLoadedWriteFailed || r.WriteErr == nil {
			t.Fatalf("key %s: %q %v %v (write %v); want the value, loaded, its shared write skipped", keys[n], r.Value, r.Outcome, r.Err, r.WriteErr)
		}
	}
	if n := o.callCount(); n != 1 {
		t.Fatalf("%d loader calls, want 1", n)
	}
	for _, k := range keys {
		if _, found, err := in.store.Get(context.Background(), k); err != nil || found {
			t.Fatalf("shared tier after the paused batch: %s found=%v err=%v; want nothing", k, found, err)
		}
	}
}

// On a real three-master Redis Cluster, three instances batch the same
// keys at once: each key is loaded once. Each batch claims its keys in at
// most one round trip per master (a pipeline, split by node: never more
// than one per hash slot), counted on every node's client.
func TestBatchOnRedisClusterLoadsOnceAndClaimsOncePerNode(t *testing.T) {
	addrs := testenv.StartRedisCluster(t, 3)
	var mu sync.Mutex
	claims := map[string]int{} // per node: pipelines holding a claim script
	newCluster := func() redis.UniversalClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: addrs, ContextTimeoutEnabled: true, MaxRetries: -1,
			DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
			PoolSize: 32, PoolTimeout: 10 * time.Second,
		})
		c.OnNewNode(func(n *redis.Client) {
			addr := n.Options().Addr
			n.AddHook(pipelineCounter(func(cmds []redis.Cmder) {
				for _, cmd := range cmds {
					if a := cmd.Args(); len(a) > 1 && (a[1] == claimBatchScript.Hash() || a[1] == claimBatchLua) {
						mu.Lock()
						claims[addr]++
						mu.Unlock()
						return
					}
				}
			}))
		})
		t.Cleanup(func() { c.Close() })
		return c
	}
	prefix := testenv.UniqueName("batch:") + ":"
	cfg := instanceConfig{lease: Options{LeaseTTL: 15 * time.Second}}
	ins := newInstances(t, 3, newCluster, prefix, cfg)
	keys := batchKeys("cluster", 30)
	o := newBatchOrigin("v-")
	o.latency = 20 * time.Millisecond
	got := fetchManyAll(t, ins, keys, o.load)
	checkBatchLoadedOnce(t, o, keys, got)

	// One more batch, alone, of keys spread over the masters: its claim
	// pipelines, counted on the nodes.
	mu.Lock()
	clear(claims)
	mu.Unlock()
	spread := batchKeys("spread", 30)
	if rs := ins[0].cache.FetchMany(context.Background(), spread, o.load); rs[0].Err != nil {
		t.Fatal(rs[0].Err)
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for node, n := range claims {
		total += n
		if n != 1 {
			t.Fatalf("node %s got %d claim round trips for one batch, want 1", node, n)
		}
	}
	if len(claims) < 2 || total != len(claims) {
		t.Fatalf("claims per node %v: want the batch's keys spread over the masters, one round trip each", claims)
	}
	t.Logf("a batch of 30 keys on a 3-master Cluster: claim round trips per node %v", claims)
}

// pipelineCounter is a hook that hands every pipeline to f.
type pipelineCounter func([]redis.Cmder)

func (f pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (f pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (f pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		f(cmds)
		return next(ctx, cmds)
	}
}

// A Set on another instance while a batch loads one of its keys wins:
// the Set fences the batch's lease, the batch's write of that key is
// refused, and its callers get the Set's value, handed back by the
// refusing script; the other keys are written as loaded.
func TestSetDuringAClusterBatchLoadWins(t *testing.T) {
	addr, prefix := sharedRedis(t)
	cfg := instanceConfig{lease: Options{LeaseTTL: 15 * time.Second}}
	loader := newInstance(t, newClient(t, addr), prefix, cfg)
	writer := newInstance(t, newClient(t, addr), prefix, cfg)
	keys := batchKeys("fenced", 3)
	o := newBatchOrigin("old-")
	o.gate, o.started = make(chan struct{}), make(chan struct{}, 1)
	done := make(chan []flightcache.KeyResult[string], 1)
	go func() { done <- loader.cache.FetchMany(context.Background(), keys, o.load) }()
	select {
	case <-o.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the batch never started loading")
	}
	if err := writer.cache.Set(context.Background(), keys[1], "set"); err != nil {
		t.Fatal(err)
	}
	close(o.gate)
	var rs []flightcache.KeyResult[string]
	select {
	case rs = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the batch never returned")
	}
	want := []string{"old-" + keys[0], "set", "old-" + keys[2]}
	for n, r := range rs {
		if r.Err != nil || r.Value != want[n] {
			t.Fatalf("key %s: %q %v %v; want %q", keys[n], r.Value, r.Outcome, r.Err, want[n])
		}
	}
	if n := loader.rec.count(driver.EventFencedWriteRejected); n != 1 {
		t.Fatalf("%d fenced writes refused, want 1", n)
	}
	reader := newInstance(t, newClient(t, addr), prefix, cfg)
	for n, r := range reader.cache.FetchMany(context.Background(), keys, nil) {
		if r.Value != want[n] || r.Outcome != flightcache.OutcomeHitShared {
			t.Fatalf("shared tier: %s = %q (%v), want %q", keys[n], r.Value, r.Outcome, want[n])
		}
	}
}

// Per key, a cluster batch keeps the single key's rules: a key the loader
// leaves out is a tombstone in the shared tier (another instance reads
// ErrNotFound from it without loading), and a key the loader fails alone
// (a *BatchError with Keys) is a failure the other instances hear of
// within the failure window (ErrLeaderFailed), while the batch's other
// keys are stored.
func TestClusterBatchKeepsNegativeCachingAndPerKeyErrors(t *testing.T) {
	addr, prefix := sharedRedis(t)
	cfg := instanceConfig{lease: Options{LeaseTTL: 15 * time.Second, FailureWindow: time.Minute}}
	a := newInstance(t, newClient(t, addr), prefix, cfg)
	b := newInstance(t, newClient(t, addr), prefix, cfg)
	keys := []string{"rules:found", "rules:absent", "rules:broken"}
	errBroken := errors.New("row unreadable")
	rs := a.cache.FetchMany(context.Background(), keys, func(ctx context.Context, keys []string) (map[string]string, error) {
		return map[string]string{"rules:found": "v"}, &flightcache.BatchError{Keys: map[string]error{"rules:broken": errBroken}}
	})
	if rs[0].Err != nil || rs[0].Value != "v" || !errors.Is(rs[1].Err, flightcache.ErrNotFound) || !errors.Is(rs[2].Err, errBroken) {
		t.Fatalf("batch: %+v", rs)
	}
	calls := 0
	rs = b.cache.FetchMany(context.Background(), keys, func(ctx context.Context, keys []string) (map[string]string, error) {
		calls++
		return nil, errors.New("must not load")
	})
	if calls != 0 {
		t.Fatalf("the second instance called its loader %d times, want 0", calls)
	}
	if rs[0].Value != "v" || rs[0].Outcome != flightcache.OutcomeHitShared {
		t.Fatalf("found key on the second instance: %+v", rs[0])
	}
	if !errors.Is(rs[1].Err, flightcache.ErrNotFound) || rs[1].Outcome != flightcache.OutcomeNegativeHit {
		t.Fatalf("absent key on the second instance: %v %v, want the shared tombstone", rs[1].Outcome, rs[1].Err)
	}
	if !errors.Is(rs[2].Err, flightcache.ErrLeaderFailed) || strings.Contains(rs[2].Err.Error(), "unreadable") {
		t.Fatalf("broken key on the second instance: %v; want ErrLeaderFailed without the leader's error text", rs[2].Err)
	}
}

// A batch's load is not cut short when a key of the same chunk that
// another instance was loading arrives while it loads: that key's flight,
// followed in its own goroutine, completes (and its context ends) while
// the batch still loads its own keys, on a context of their own. (Its
// arrival before the load starts, which ended the load at once when the
// load ran on the chunk's first key's context, is too narrow a window to
// pin here; TestBatchOfThreeInstancesLoadsEachKeyOnce at -count=20 met it.)
func TestClusterBatchLoadOutlivesAFollowedKeyOfItsChunk(t *testing.T) {
	addr, prefix := sharedRedis(t)
	cfg := instanceConfig{lease: Options{LeaseTTL: 15 * time.Second}}
	a := newInstance(t, newClient(t, addr), prefix, cfg)
	b := newInstance(t, newClient(t, addr), prefix, cfg)
	first := newBatchOrigin("a-")
	first.gate, first.started = make(chan struct{}), make(chan struct{}, 1)
	aDone := make(chan []flightcache.KeyResult[string], 1)
	go func() { aDone <- a.cache.FetchMany(context.Background(), []string{"chunk:0"}, first.load) }()
	<-first.started // a holds chunk:0's lease

	second := newBatchOrigin("b-")
	second.gate, second.started = make(chan struct{}), make(chan struct{}, 1)
	bDone := make(chan []flightcache.KeyResult[string], 1)
	go func() { bDone <- b.cache.FetchMany(context.Background(), []string{"chunk:0", "chunk:1"}, second.load) }()
	<-second.started // b follows chunk:0 and loads chunk:1

	close(first.gate)
	if rs := <-aDone; rs[0].Err != nil {
		t.Fatal(rs[0].Err)
	}
	// b's flight of chunk:0 has ended once a Get of it on b returns: it
	// joins that flight, or hits what the flight stored.
	if r, err := b.cache.Fetch(context.Background(), "chunk:0", nil); err != nil || r.Value != "a-chunk:0" {
		t.Fatalf("chunk:0 on b: %q %v", r.Value, err)
	}
	close(second.gate)
	rs := <-bDone
	if rs[0].Err != nil || rs[0].Value != "a-chunk:0" || rs[1].Err != nil || rs[1].Value != "b-chunk:1" {
		t.Fatalf("b's batch: %q %v, %q %v; want a's chunk:0 and its own chunk:1", rs[0].Value, rs[0].Err, rs[1].Value, rs[1].Err)
	}
	if n := second.loadsOf("chunk:0"); n != 0 {
		t.Fatalf("b loaded chunk:0 %d times, want 0 (a was loading it)", n)
	}
}

// panicCodec is the JSON codec, except that decoding the value "boom"
// panics.
type panicCodec struct{ driver.JSONCodec[string] }

func (c panicCodec) Unmarshal(data []byte) (string, error) {
	if string(data) == `"boom"` {
		panic("panicCodec: boom")
	}
	return c.JSONCodec.Unmarshal(data)
}

// claimHook runs before, once, just ahead of the first pipeline that
// runs a script (a batch's ClaimMany).
type claimHook struct {
	once   sync.Once
	before func()
}

func (h *claimHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *claimHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *claimHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if n := cmd.Name(); n == "evalsha" || n == "eval" {
				h.once.Do(h.before)
				break
			}
		}
		return next(ctx, cmds)
	}
}

// A panic while a cluster batch sorts its grants (here the codec, on a
// shared entry ClaimMany read for one key) does not leave the leases
// granted to the batch's other keys held: they are ended at once, not
// kept alive by their heartbeats for as long as the process runs.
func TestClusterBatchPanicWhileClaimingEndsTheGrantedLeases(t *testing.T) {
	addr, prefix := sharedRedis(t)
	cfg := instanceConfig{lease: Options{LeaseTTL: 3 * time.Second}}
	writer := newInstance(t, newClient(t, addr), prefix, cfg)
	if err := writer.cache.Set(context.Background(), "panic:b", "boom"); err != nil {
		t.Fatal(err)
	}
	kb, err := writer.coord.keysFor("panic:b")
	if err != nil {
		t.Fatal(err)
	}
	// The entry is hidden from the batch's shared read and back in place
	// for its ClaimMany, which reads it along with the claims.
	admin := newClient(t, addr)
	stash := kb.value + "|stash"
	if err := admin.Rename(context.Background(), kb.value, stash).Err(); err != nil {
		t.Fatal(err)
	}
	hook := &claimHook{before: func() {
		if err := admin.Rename(context.Background(), stash, kb.value).Err(); err != nil {
			t.Error(err)
		}
	}}
	pcfg := cfg
	pcfg.cache = func(o *flightcache.Options[string]) { o.Codec = panicCodec{} }
	reader := newInstance(t, newClient(t, addr, hook), prefix, pcfg)
	o := newBatchOrigin("v-")
	rs := reader.cache.FetchMany(context.Background(), []string{"panic:a", "panic:b"}, o.load)
	if rs[1].Err == nil {
		t.Fatalf("panic:b: %+v; want the codec's panic as its error", rs[1])
	}
	ka, err := writer.coord.keysFor("panic:a")
	if err != nil {
		t.Fatal(err)
	}
	// Ended before the batch returned, as a lease whose load failed.
	n, err := admin.Exists(context.Background(), ka.lease).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("panic:a's lease is still held after the batch returned: it was granted and never ended")
	}
}
