package redislease

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/singleflight"
	"github.com/redis/go-redis/v9"
)

// The follower wake-up curves of make perf-report (bench/perfreport): the
// time from the leader's complete script (the fenced write and the
// PUBLISH) returning to each waiting caller's Get returning, against
// follower instances and against waiters per instance, on the shared
// Redis. Each point runs twice: impl=flightcache, the real instances, and
// impl=floor, the loopback floor on the same Redis: a PUBLISH heard by
// one subscription connection per instance, which then sends one GET and
// wakes the same number of waiting goroutines. p50-ms and p99-ms are over
// every waiting caller of every iteration (one key each).

// curveFollowerInstances is the waiters curve's number of follower
// instances.
const curveFollowerInstances = 2

// BenchmarkCurveFollowerInstances: 1 to 16 follower instances, one
// waiting caller each, and a leader instance.
func BenchmarkCurveFollowerInstances(b *testing.B) {
	for _, n := range testenv.CurvePoints(4, 1, 2, 4, 8, 16) {
		b.Run("instances="+strconv.Itoa(n)+"/impl=flightcache", func(b *testing.B) { benchFollowers(b, n, 1) })
		b.Run("instances="+strconv.Itoa(n)+"/impl=floor", func(b *testing.B) { benchFloor(b, n, 1) })
	}
}

// BenchmarkCurveFollowerWaiters: 1 to 1,000 waiting callers in each of
// curveFollowerInstances follower instances, and a leader instance.
func BenchmarkCurveFollowerWaiters(b *testing.B) {
	for _, w := range testenv.CurvePoints(100, 1, 10, 100, 1_000) {
		b.Run("waiters="+strconv.Itoa(w)+"/impl=flightcache", func(b *testing.B) { benchFollowers(b, curveFollowerInstances, w) })
		b.Run("waiters="+strconv.Itoa(w)+"/impl=floor", func(b *testing.B) { benchFloor(b, curveFollowerInstances, w) })
	}
}

// followerProbe tells when one follower instance's callers all wait for
// the leader: its coordinator's acquire answered "held by another" twice
// (before it subscribed to the key's channel, and after: from then on it
// waits for the broadcast), and every other caller of the instance joined
// its in-process flight (the engine's EventShared).
type followerProbe struct {
	held, shared atomic.Int64
	wantShared   atomic.Int64
	subscribed   chan struct{} // the second "held by another"
	allJoined    chan struct{} // the wantShared-th EventShared
}

func newFollowerProbe() *followerProbe {
	return &followerProbe{subscribed: make(chan struct{}, 1), allJoined: make(chan struct{}, 1)}
}

// reset prepares the probe for a key that waiters callers will ask for.
func (p *followerProbe) reset(waiters int) {
	p.held.Store(0)
	p.shared.Store(0)
	p.wantShared.Store(int64(waiters - 1))
}

// wait returns once the instance's callers all wait.
func (p *followerProbe) wait() {
	<-p.subscribed
	if p.wantShared.Load() > 0 {
		<-p.allJoined
	}
}

func (p *followerProbe) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *followerProbe) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (p *followerProbe) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); len(args) > 1 && (args[0] == "evalsha" || args[0] == "eval") {
			if c, ok := cmd.(*redis.Cmd); ok {
				// acquireScript's "held by another": {1, token, pttl}.
				if v, err := c.Slice(); err == nil && len(v) >= 3 && v[0] == int64(1) && p.held.Add(1) == 2 {
					p.subscribed <- struct{}{}
				}
			}
		}
		return err
	}
}

func (p *followerProbe) ObserveCache(driver.Event) {}

func (p *followerProbe) ObserveFlight(e singleflight.Event) {
	if e.Kind == singleflight.EventShared && p.shared.Add(1) == p.wantShared.Load() {
		p.allJoined <- struct{}{}
	}
}

// benchFollowers measures flightcache: a leader instance and n follower
// instances, each its own client, coordinator and Cache, with waiters
// callers each. Per iteration one key: the leader's load is held until
// every caller waits, then released.
func benchFollowers(b *testing.B, n, waiters int) {
	addr, prefix := sharedRedis(b)
	clock := &writeClock{}
	leader := newInstance(b, newClient(b, addr, clock), prefix, instanceConfig{})
	probes := make([]*followerProbe, n)
	followers := make([]*instance, n)
	for i := range followers {
		p := newFollowerProbe()
		probes[i] = p
		followers[i] = newInstance(b, newClient(b, addr, p), prefix, instanceConfig{
			cache: func(o *flightcache.Options[string]) { o.Observer = p },
		})
	}
	ctx := context.Background()
	// Loaded up front, so that the leader's write is always an EVALSHA.
	if err := completeScript.Load(ctx, leader.client).Err(); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N*n*waiters)
	done := make([]time.Time, n*waiters)
	errs := make([]error, n*waiters)
	i := 0
	for b.Loop() {
		key := "curve:" + strconv.Itoa(i)
		i++
		o := &origin{value: "v", gate: make(chan struct{}), started: make(chan int64, 1)}
		lg := fetchAsync(ctx, leader.cache, key, o.load)
		<-o.started // the leader holds the lease
		for _, p := range probes {
			p.reset(waiters)
		}
		var wg sync.WaitGroup
		for f, in := range followers {
			for w := range waiters {
				j := f*waiters + w
				wg.Go(func() {
					r, err := in.cache.Fetch(ctx, key, o.load)
					done[j] = time.Now()
					if err == nil && (r.Value != "v" || r.Scope != flightcache.ScopeCluster) {
						err = errors.New("got " + strconv.Quote(r.Value) + " in scope " + r.Scope.String() + ", want v from the cluster")
					}
					errs[j] = err
				})
			}
		}
		for _, p := range probes {
			p.wait()
		}
		close(o.gate)
		if r := <-lg; r.err != nil {
			b.Fatal(r.err)
		}
		wrote := time.Unix(0, clock.at.Load())
		wg.Wait()
		for j, t := range done {
			if errs[j] != nil {
				b.Fatalf("caller %d: %v", j, errs[j])
			}
			lat = append(lat, t.Sub(wrote))
		}
		if c := o.calls.Load(); c != 1 {
			b.Fatalf("%d origin calls for one key, want 1", c)
		}
	}
	testenv.ReportLatencies(b, lat)
}

// floorInstance stands in for a follower instance at the loopback floor:
// one subscription connection and one client. For each round it is given,
// it waits for a message, sends one GET and closes the round, which wakes
// its waiting goroutines.
type floorInstance struct {
	ps     *redis.PubSub
	client *redis.Client
	rounds chan chan struct{}
	done   chan struct{}
	err    atomic.Pointer[error]
}

func (f *floorInstance) run(valueKey string) {
	defer close(f.done)
	ctx := context.Background()
	for r := range f.rounds {
		_, err := f.ps.ReceiveMessage(ctx)
		if err == nil {
			err = f.client.Get(ctx, valueKey).Err()
		}
		if err != nil {
			f.err.Store(&err)
		}
		close(r)
	}
}

// benchFloor measures the loopback floor with n instances of waiters
// goroutines each: from a PUBLISH returning to each goroutine woken after
// its instance heard the message and read the value with one GET.
func benchFloor(b *testing.B, n, waiters int) {
	addr, prefix := sharedRedis(b)
	ctx := context.Background()
	publisher := newClient(b, addr)
	valueKey, channel := prefix+"floor:value", prefix+"floor"
	if err := publisher.Set(ctx, valueKey, "v", time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
	floors := make([]*floorInstance, n)
	for i := range floors {
		client := newClient(b, addr)
		ps := client.Subscribe(ctx, channel)
		if _, err := ps.Receive(ctx); err != nil { // the confirmation
			b.Fatal(err)
		}
		f := &floorInstance{ps: ps, client: client, rounds: make(chan chan struct{}, 1), done: make(chan struct{})}
		floors[i] = f
		go f.run(valueKey)
		// Before the client's own cleanup (last in, first out). Closing
		// the subscription first ends a ReceiveMessage left waiting by a
		// failed iteration.
		b.Cleanup(func() {
			ps.Close()
			close(f.rounds)
			<-f.done
		})
	}
	lat := make([]time.Duration, 0, b.N*n*waiters)
	woken := make([]time.Time, n*waiters)
	for b.Loop() {
		var ready, wg sync.WaitGroup
		ready.Add(n * waiters)
		for i, f := range floors {
			r := make(chan struct{})
			f.rounds <- r
			for w := range waiters {
				j := i*waiters + w
				wg.Go(func() {
					ready.Done()
					<-r
					woken[j] = time.Now()
				})
			}
		}
		ready.Wait()
		if err := publisher.Publish(ctx, channel, "done").Err(); err != nil {
			b.Fatal(err)
		}
		published := time.Now()
		wg.Wait()
		for _, f := range floors {
			if err := f.err.Load(); err != nil {
				b.Fatal(*err)
			}
		}
		for _, t := range woken {
			lat = append(lat, t.Sub(published))
		}
	}
	testenv.ReportLatencies(b, lat)
}
