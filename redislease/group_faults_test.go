package redislease

// Group commit under a slow Redis, a Ring, and callers that leave.

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/redis/go-redis/v9"
)

// latencyHook adds lat to every EVALSHA/EVAL round trip (alone or
// pipelined) while on: a Redis that answers each round trip in lat.
type latencyHook struct {
	on  atomic.Bool
	lat time.Duration
}

func (h *latencyHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *latencyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.on.Load() && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			time.Sleep(h.lat)
		}
		return err
	}
}
func (h *latencyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.on.Load() && (cmds[0].Name() == "evalsha" || cmds[0].Name() == "eval") {
			time.Sleep(h.lat)
		}
		return err
	}
}

// Every round trip answers within Timeout, so every heartbeat succeeds and
// no lease is lost. Grouped, as they once were, the heartbeats of leases
// taken together queued behind the one in progress and then waited for
// their own pipeline, past Timeout: their callers saw DeadlineExceeded
// although Redis extended the lease, and after a TTL of such "failures"
// Lost() was closed while Redis still held the lease.
func TestHeartbeatsOfLeasesTakenTogetherHoldOnASlowRedis(t *testing.T) {
	addr, prefix := sharedRedis(t)
	// Each round trip takes 200ms more than Redis does: within the 350ms
	// Timeout alone (150ms left for a loaded host), past it for a call
	// queued behind another (400ms), as grouped heartbeats were.
	h := &latencyHook{lat: 200 * time.Millisecond}
	in := newInstance(t, newClient(t, addr, h), prefix, instanceConfig{lease: Options{LeaseTTL: 1500 * time.Millisecond, Timeout: 350 * time.Millisecond}})
	c := in.coord
	ctx := context.Background()
	const n = 8
	names := make([]string, n)
	for i := range names {
		names[i] = "hb" + string(rune('a'+i))
	}
	grants, err := c.ClaimMany(ctx, names, false) // one pipeline: heartbeats tick together
	if err != nil {
		t.Fatal(err)
	}
	var ls []driver.Lease
	for _, g := range grants {
		if g.Err != nil || g.Lease == nil {
			t.Fatalf("grant %+v", g)
		}
		ls = append(ls, g.Lease)
	}
	h.on.Store(true)
	atLoss := make([]time.Duration, n)
	var lw sync.WaitGroup
	for i, l := range ls {
		lw.Add(1)
		go func() {
			defer lw.Done()
			select {
			case <-l.Lost():
				atLoss[i], _ = in.client.PTTL(ctx, mustKeys(t, c, names[i]).lease).Result()
			case <-time.After(3500 * time.Millisecond): // over two lease TTLs
			}
		}()
	}
	lw.Wait()
	h.on.Store(false)
	lost := 0
	for i, l := range ls {
		select {
		case <-l.Lost():
			k := mustKeys(t, c, names[i])
			v, _ := in.client.Get(ctx, k.lease).Result()
			pttl, _ := in.client.PTTL(ctx, k.lease).Result()
			t.Logf("lease %s: Lost() closed while Redis lease PTTL was %v (now lease=%q pttl=%v)", names[i], atLoss[i], v, pttl)
			lost++
		default:
		}
	}
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Add(1)
		go func() { defer wg.Done(); l.Complete(ctx, nil) }()
	}
	wg.Wait()
	if lost > 0 {
		t.Fatalf("%d of %d leases reported lost though every round trip answered within Timeout", lost, n)
	}
}

// Round trips 200ms slower than Redis, Timeout 350ms: concurrent Claims
// of distinct keys. The queued ones wait ~200ms for the lone one, then
// 200ms for their pipeline. Timed from their enqueue, as they once were,
// their callers got DeadlineExceeded while Redis granted them the lease,
// which nobody then held, heartbeated or released; timed from their send,
// each gets its lease.
func TestQueuedClaimsOnASlowRedisAreTimedFromTheirSend(t *testing.T) {
	addr, prefix := sharedRedis(t)
	h := &latencyHook{lat: 200 * time.Millisecond}
	in := newInstance(t, newClient(t, addr, h), prefix, instanceConfig{lease: Options{Timeout: 350 * time.Millisecond}})
	c := in.coord
	ctx := context.Background()
	if err := acquireScript.Load(ctx, in.client).Err(); err != nil {
		t.Fatal(err)
	}
	h.on.Store(true)
	const n = 8
	chs := make([]<-chan claimResult, n)
	for i := range chs {
		chs[i] = claimAsync(ctx, c, "oc"+string(rune('a'+i)))
	}
	orphans := 0
	for _, ch := range chs {
		r := awaitClaim(t, ch)
		if r.g.Lease != nil {
			r.g.Lease.Complete(ctx, nil)
			continue
		}
		pttl, _ := in.client.PTTL(ctx, mustKeys(t, c, r.key).lease).Result()
		t.Logf("Claim %s: err %v; Redis lease PTTL %v", r.key, r.err, pttl)
		if r.err != nil && pttl > 0 {
			orphans++
		}
	}
	h.on.Store(false)
	if orphans > 0 {
		t.Fatalf("%d Claims failed with a lease held for them in Redis", orphans)
	}
}

// On a Ring, whose pipelines wait for every shard, calls are not grouped:
// Claims of keys on a healthy shard never wait behind a slow shard's.
func TestRingCallsAreNotGroupedSoASlowShardHoldsNoOther(t *testing.T) {
	addr, prefix := sharedRedis(t)
	_, port, _ := net.SplitHostPort(addr)
	slowAddr := "localhost:" + port
	fastAddr := "127.0.0.1:" + port
	h := &latencyHook{lat: 200 * time.Millisecond}
	o := clientOptions(addr)
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:                 map[string]string{"slow": slowAddr, "fast": fastAddr},
		ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		NewClient: func(opt *redis.Options) *redis.Client {
			c := redis.NewClient(opt)
			if opt.Addr == slowAddr {
				c.AddHook(h)
			}
			return c
		},
	})
	t.Cleanup(func() { ring.Close() })
	in := newInstance(t, ring, prefix, instanceConfig{lease: Options{Timeout: 300 * time.Millisecond}})
	c := in.coord
	ctx := context.Background()
	_ = ring.ForEachShard(ctx, func(ctx context.Context, s *redis.Client) error { return acquireScript.Load(ctx, s).Err() })
	var slow, fast []string
	for i := 0; len(slow) < 2 || len(fast) < 4; i++ {
		name := "rk" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		sc, err := ring.GetShardClientForKey(mustKeys(t, c, name).lease)
		if err != nil {
			t.Fatal(err)
		}
		if sc.Options().Addr == slowAddr {
			slow = append(slow, name)
		} else {
			fast = append(fast, name)
		}
	}
	h.on.Store(true)
	if g := c.groupFor(ctx, acquireScript, slow[0]); g != nil {
		t.Fatal("a Ring's calls are grouped")
	}
	s0 := claimAsync(ctx, c, slow[0])
	s1 := claimAsync(ctx, c, slow[1])
	var fs []<-chan claimResult
	for _, k := range fast[:4] {
		fs = append(fs, claimAsync(ctx, c, k))
	}
	failed := 0
	for _, ch := range fs {
		r := awaitClaim(t, ch)
		if r.g.Lease != nil {
			r.g.Lease.Complete(ctx, nil)
			continue
		}
		pttl, _ := ring.PTTL(ctx, mustKeys(t, c, r.key).lease).Result()
		t.Logf("healthy-shard Claim %s: %v; its Redis lease PTTL %v", r.key, r.err, pttl)
		failed++
	}
	for _, ch := range []<-chan claimResult{s0, s1} {
		if r := awaitClaim(t, ch); r.g.Lease != nil {
			r.g.Lease.Complete(ctx, nil)
		}
	}
	h.on.Store(false)
	if failed > 0 {
		t.Fatalf("%d of 4 Claims on the healthy shard failed behind the slow shard", failed)
	}
}

// holdHook holds the lone acquire (ProcessHook) until releaseLone is
// closed, and holds every pipeline's replies (after Redis ran it) until
// releasePipe is closed.
type holdHook struct {
	loneIn, releaseLone  chan struct{}
	pipeRan, releasePipe chan struct{}
	armed                bool
	once                 sync.Once
}

func (h *holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.armed && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			select {
			case h.loneIn <- struct{}{}:
			default:
			}
			<-h.releaseLone
		}
		return next(ctx, cmd)
	}
}
func (h *holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.armed && (cmds[0].Name() == "evalsha" || cmds[0].Name() == "eval") {
			h.once.Do(func() {
				close(h.pipeRan)
				<-h.releasePipe
			})
		}
		return err
	}
}

// A queued Claim whose caller leaves after its call was sent in the
// group's pipeline waits for its answer and returns the lease Redis
// granted, rather than ctx's error with the lease left in Redis, held by
// nobody, blocking the key for the whole lease TTL.
func TestGroupedClaimWhoseCallerLeavesAfterSendReturnsItsLease(t *testing.T) {
	addr, prefix := sharedRedis(t)
	h := &holdHook{loneIn: make(chan struct{}, 1), releaseLone: make(chan struct{}), pipeRan: make(chan struct{}), releasePipe: make(chan struct{})}
	in := newInstance(t, newClient(t, addr, h), prefix, instanceConfig{})
	c := in.coord
	ctx := context.Background()
	// warm the script cache
	if err := acquireScript.Load(ctx, in.client).Err(); err != nil {
		t.Fatal(err)
	}
	h.armed = true // set before any goroutine starts
	first := claimAsync(ctx, c, "first")
	<-h.loneIn
	lctx, leave := context.WithCancel(ctx)
	left := claimAsync(lctx, c, "left")
	g := c.groupFor(ctx, acquireScript, "any")
	eventually(t, time.Minute, "queued", func() bool { return g.queued() == 1 })
	close(h.releaseLone)
	<-h.pipeRan // Redis ran the queued acquire: "left" holds the lease in Redis
	leave()
	close(h.releasePipe)
	res := awaitClaim(t, left)
	if r := awaitClaim(t, first); r.g.Lease != nil {
		r.g.Lease.Complete(ctx, nil)
	}
	if res.err != nil || res.g.Lease == nil {
		pttl, _ := in.client.PTTL(ctx, mustKeys(t, c, "left").lease).Result()
		t.Fatalf("the Claim returned %+v, %v to its caller, and Redis holds its lease for another %v: orphaned", res.g, res.err, pttl)
	}
	if _, err := res.g.Lease.Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

func mustKeys(t *testing.T, c *Coordinator, key string) keys {
	k, err := c.keysFor(key)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
