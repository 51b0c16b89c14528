package redislease

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// scriptTrips counts a client's round trips (a command, or a pipeline)
// that carry at least one EVALSHA of a script, per script; while held,
// a lone EVALSHA of the script hold waits for release (its ctx ends the
// wait).
type scriptTrips struct {
	mu    sync.Mutex
	trips map[string]int // by SHA
	calls map[string]int // by SHA: the scripts those trips carried
	hold  string         // the SHA whose lone calls wait while held
	held  chan struct{}  // non-nil while held; closed by release
}

func newScriptTrips() *scriptTrips {
	return &scriptTrips{trips: map[string]int{}, calls: map[string]int{}}
}

func (h *scriptTrips) record(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	for _, c := range cmds {
		if args := c.Args(); c.Name() == "evalsha" && len(args) > 1 {
			sha, _ := args[1].(string)
			h.calls[sha]++
			seen[sha] = true
		}
	}
	for sha := range seen {
		h.trips[sha]++
	}
}

// of returns the round trips and calls of s so far, and starts counting
// afresh.
func (h *scriptTrips) of(s *redis.Script) (trips, calls int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	trips, calls = h.trips[s.Hash()], h.calls[s.Hash()]
	delete(h.trips, s.Hash())
	delete(h.calls, s.Hash())
	return trips, calls
}

func (h *scriptTrips) holdLone(s *redis.Script) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hold, h.held = s.Hash(), make(chan struct{})
}

func (h *scriptTrips) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.held)
	h.hold, h.held = "", nil
}

func (h *scriptTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		h.mu.Lock()
		held := h.held
		hold := held != nil && cmd.Name() == "evalsha" && len(cmd.Args()) > 1 && cmd.Args()[1] == h.hold
		h.mu.Unlock()
		if hold {
			select {
			case <-held:
			case <-ctx.Done():
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}
func (h *scriptTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds...)
		return next(ctx, cmds)
	}
}

// loadCounter is a batch loader that counts the loads of each key.
type loadCounter struct {
	mu    sync.Mutex
	loads map[string]int
	calls int
}

func (o *loadCounter) load(_ context.Context, keys []string) (map[string]string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		o.loads[k]++
		out[k] = "v:" + k
	}
	return out, nil
}

// fetchAll fetches keys from each instance through its Batcher, all at
// once, and fails the test on any wrong answer.
func fetchAll(t *testing.T, ins []*instance, bs []*flightcache.Batcher[string], keys []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(ins)*len(keys))
	for i, in := range ins {
		for _, k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := in.cache.Fetch(context.Background(), k, bs[i].Load(k))
				if err == nil && r.Value != "v:"+k {
					err = fmt.Errorf("%q = %q", k, r.Value)
				}
				if err != nil {
					errs <- fmt.Errorf("instance %d: %w", i, err)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// A Batcher in cluster mode, on three instances, loads each key once in
// the whole cluster, and its misses claim their leases together: N misses
// of one instance cost two claim round trips (the first alone, the others
// in one pipeline behind it), not N.
func TestBatcherMissesClaimTogetherAndLoadOncePerCluster(t *testing.T) {
	const n = 30
	addr, prefix := sharedRedis(t)
	cfg := instanceConfig{lease: Options{LeaseTTL: 15 * time.Second}}
	hooks := make([]*scriptTrips, 3)
	ins := make([]*instance, 3)
	bs := make([]*flightcache.Batcher[string], 3)
	o := &loadCounter{loads: map[string]int{}}
	for i := range ins {
		hooks[i] = newScriptTrips()
		ins[i] = newInstance(t, newClient(t, addr, hooks[i]), prefix, cfg)
		b, err := flightcache.NewBatcher(o.load, flightcache.BatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		bs[i] = b
		fetchAll(t, ins[i:i+1], bs[i:i+1], []string{fmt.Sprintf("warm-up-%d", i)}) // scripts loaded
	}
	for _, h := range hooks {
		h.of(acquireScript)
		h.of(completeScript)
	}
	keysOf := func(set string) []string {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s-%d", set, i)
		}
		return keys
	}

	// One instance's n misses: the first claim is held in flight until
	// the n-1 others queue behind it.
	hooks[0].holdLone(acquireScript)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fetchAll(t, ins[:1], bs[:1], keysOf("one"))
	}()
	g := ins[0].coord.groupFor(context.Background(), acquireScript, "any")
	eventually(t, time.Minute, "the claims queued", func() bool { return g.queued() == n-1 })
	hooks[0].release()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the Fetches did not return within a minute")
	}
	trips, calls := hooks[0].of(acquireScript)
	ctrips, ccalls := hooks[0].of(completeScript)
	if trips != 2 || calls != n {
		t.Fatalf("%d misses through a Batcher claimed in %d round trips (%d scripts), want 2 (%d scripts)", n, trips, calls, n)
	}
	if ccalls != n || ctrips >= n {
		t.Fatalf("%d misses completed in %d round trips (%d scripts), want fewer than %d round trips", n, ctrips, ccalls, n)
	}
	t.Logf("%d misses of one instance: claims %d round trips, completions %d round trips", n, trips, ctrips)

	// Three instances miss the same n keys at once.
	fetchAll(t, ins, bs, keysOf("all"))
	o.mu.Lock()
	for k, c := range o.loads {
		if c != 1 {
			t.Errorf("key %q loaded %d times in the cluster, want once", k, c)
		}
	}
	if len(o.loads) != 3+2*n {
		t.Errorf("%d keys loaded, want %d", len(o.loads), 3+2*n)
	}
	t.Logf("origin calls: %d for %d keys", o.calls, len(o.loads))
	o.mu.Unlock()
	for i, h := range hooks {
		trips, calls := h.of(acquireScript)
		ctrips, ccalls := h.of(completeScript)
		t.Logf("instance %d, %d keys missed by 3 instances: acquire %d round trips (%d scripts), complete %d round trips (%d scripts)", i, n, trips, calls, ctrips, ccalls)
	}
}

// On a three-master Redis Cluster, N misses of one instance through a
// Batcher claim their leases in one round trip per master behind the
// master's first claim (which goes alone): the groups are per master, and
// a pipeline goes to its master alone. Round trips are counted on the
// masters' own clients.
func TestRedisClusterBatcherMissesClaimPerMaster(t *testing.T) {
	const n = 30
	addrs := testenv.StartRedisCluster(t, 3)
	h := newScriptTrips()
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		PoolSize: 32, PoolTimeout: 10 * time.Second,
		DialerRetries: 5, DialerRetryTimeout: 20 * time.Millisecond, // see clientOptions
	})
	client.OnNewNode(func(node *redis.Client) { node.AddHook(h) })
	t.Cleanup(func() { client.Close() })
	in := newInstance(t, client, testenv.UniqueName("batchslots:")+":", instanceConfig{})
	o := &loadCounter{loads: map[string]int{}}
	b, err := flightcache.NewBatcher(o.load, flightcache.BatcherOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keysOf := func(set string) []string {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s-%d", set, i)
		}
		return keys
	}
	// The scripts loaded on every master.
	fetchAll(t, []*instance{in}, []*flightcache.Batcher[string]{b}, keysOf("warm-up"))
	h.of(acquireScript)

	keys := keysOf("cold")
	perMaster := map[string]int{}
	for _, key := range keys {
		k, err := in.coord.keysFor(key)
		if err != nil {
			t.Fatal(err)
		}
		m, err := client.MasterForKey(ctx, k.lease)
		if err != nil {
			t.Fatal(err)
		}
		perMaster[m.Options().Addr]++
	}
	want := 0
	for _, c := range perMaster {
		want += min(c, 2) // the first alone, the others in one pipeline
	}
	queued := func() int {
		in.coord.groupMu.Lock()
		defer in.coord.groupMu.Unlock()
		q := 0
		for gk, g := range in.coord.groups {
			if gk.s == acquireScript {
				q += g.queued()
			}
		}
		return q
	}
	h.holdLone(acquireScript)
	done := make(chan struct{})
	go func() {
		defer close(done)
		fetchAll(t, []*instance{in}, []*flightcache.Batcher[string]{b}, keys)
	}()
	eventually(t, time.Minute, "the claims queued behind each master's first", func() bool { return queued() == n-len(perMaster) })
	h.release()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the Fetches did not return within a minute")
	}
	trips, calls := h.of(acquireScript)
	if trips != want || calls != n {
		t.Fatalf("%d misses over %d masters (%v) claimed in %d round trips (%d scripts), want %d", n, len(perMaster), perMaster, trips, calls, want)
	}
	for k, c := range o.loads {
		if c != 1 {
			t.Fatalf("key %q loaded %d times", k, c)
		}
	}
	t.Logf("%d misses over %d masters %v: %d claim round trips", n, len(perMaster), perMaster, trips)
}
