package redislease

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/redislease/internal/buswire"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/redis/go-redis/v9"
)

// busCall is one call to a handler: Invalidated(inv), or BusChanged(state)
// when state is set.
type busCall struct {
	inv   driver.Invalidation
	state driver.BusState
}

// busRecorder is a BusHandler that hands every call to the test, in order.
// Once stopped is set, any call counts as late. While hold is set, the
// first Invalidated waits for it to close, after telling held.
type busRecorder struct {
	calls   chan busCall
	stopped atomic.Bool
	late    atomic.Int64
	hold    chan struct{}
	held    chan struct{}
	once    sync.Once
	// replayed holds what subscribeUpAfter saw before BusChanged(up).
	replayed []driver.Invalidation
}

func newBusRecorder() *busRecorder { return &busRecorder{calls: make(chan busCall, 1<<14)} }

// holdFirst makes the first Invalidated wait until the returned release,
// which is idempotent, is called.
func (r *busRecorder) holdFirst() (release func()) {
	r.hold, r.held = make(chan struct{}), make(chan struct{})
	return sync.OnceFunc(func() { close(r.hold) })
}

func (r *busRecorder) Invalidated(inv driver.Invalidation) {
	if r.stopped.Load() {
		r.late.Add(1)
	}
	if r.hold != nil {
		r.once.Do(func() {
			close(r.held)
			<-r.hold
		})
	}
	r.calls <- busCall{inv: inv}
}

func (r *busRecorder) BusChanged(s driver.BusState) {
	if r.stopped.Load() {
		r.late.Add(1)
	}
	r.calls <- busCall{state: s}
}

// next returns the next call, failing the test if none comes within d.
func (r *busRecorder) next(t testing.TB, d time.Duration) busCall {
	t.Helper()
	select {
	case c := <-r.calls:
		return c
	case <-time.After(d):
		t.Fatalf("no call to the handler within %v", d)
		return busCall{}
	}
}

// waitState reads calls until BusChanged(s) and returns how long that
// took and the invalidations before it.
func (r *busRecorder) waitState(t testing.TB, s driver.BusState, d time.Duration) (time.Duration, []driver.Invalidation) {
	t.Helper()
	start := time.Now()
	deadline := time.After(d)
	var invs []driver.Invalidation
	for {
		select {
		case c := <-r.calls:
			if c.state == s {
				return time.Since(start), invs
			}
			if c.state == 0 {
				invs = append(invs, c.inv)
			}
		case <-deadline:
			t.Fatalf("no BusChanged(%v) within %v", s, d)
		}
	}
}

// nextInv returns the next invalidation, skipping state changes (a shared
// and slow test machine may make a heartbeat late).
func (r *busRecorder) nextInv(t testing.TB, d time.Duration) driver.Invalidation {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case c := <-r.calls:
			if c.state == 0 {
				return c.inv
			}
		case <-deadline:
			t.Fatalf("no invalidation within %v", d)
		}
	}
}

// quiet fails the test if the handler is called within d.
func (r *busRecorder) quiet(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case c := <-r.calls:
		t.Fatalf("unexpected call %+v", c)
	case <-time.After(d):
	}
}

// newBusCoordinator returns a Coordinator on client for prefix, closed
// when the test ends.
func newBusCoordinator(t testing.TB, client redis.UniversalClient, prefix string, opts Options) *Coordinator {
	t.Helper()
	store, err := redisstore.New(client, redisstore.Options{Prefix: prefix, HashTag: true})
	if err != nil {
		t.Fatal(err)
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second // a shared machine under -race
	}
	quietBus(&opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := New(ctx, client, store, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// subscribeUp subscribes r to cache on c and waits until it is up, which
// must be the first call.
func subscribeUp(t testing.TB, c *Coordinator, cache string, r *busRecorder) func() {
	t.Helper()
	stop, err := c.Subscribe(cache, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	if first := r.next(t, 10*time.Second); first.state != driver.BusUp {
		t.Fatalf("first call %+v, want BusChanged(up)", first)
	}
	return stop
}

func inv(kind driver.InvalidationKind, target string) driver.Invalidation {
	return driver.Invalidation{Kind: kind, Target: target, Version: time.Now()}
}

func sameInv(a, b driver.Invalidation) bool {
	return a.Kind == b.Kind && a.Target == b.Target && a.Version.Equal(b.Version.Truncate(time.Microsecond))
}

// eventually polls cond until it holds, failing the test after d.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond) // polling a condition, not synchronising
	}
}

// Two Coordinators, each with its own client, deliver to each other, per
// cache name, but never to themselves; every subscription starts with
// BusChanged(up).
func TestBusDeliversToOtherInstancesOnly(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	b := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	ra, rb, rbOther := newBusRecorder(), newBusRecorder(), newBusRecorder()
	subscribeUp(t, a, "c", ra)
	subscribeUp(t, b, "c", rb)
	subscribeUp(t, b, "other", rbOther)
	ctx := context.Background()

	sent := []driver.Invalidation{
		inv(driver.InvalidationKey, "user:42"),
		inv(driver.InvalidationPrefix, "tenant-a:"),
		inv(driver.InvalidationAll, ""),
	}
	for _, i := range sent {
		if err := a.Publish(ctx, "c", i); err != nil {
			t.Fatal(err)
		}
	}
	fromB := inv(driver.InvalidationKey, "k2")
	if err := b.Publish(ctx, "c", fromB); err != nil {
		t.Fatal(err)
	}
	toOther := inv(driver.InvalidationKey, "x")
	if err := a.Publish(ctx, "other", toOther); err != nil {
		t.Fatal(err)
	}
	for i, want := range sent {
		if got := rb.nextInv(t, 5*time.Second); !sameInv(got, want) {
			t.Fatalf("b's invalidation %d = %+v, want %+v", i, got, want)
		}
	}
	// a published its three before b published: had a heard itself, those
	// would come first.
	if got := ra.nextInv(t, 5*time.Second); !sameInv(got, fromB) {
		t.Fatalf("a's first invalidation = %+v, want b's %+v (never its own)", got, fromB)
	}
	if got := rbOther.nextInv(t, 5*time.Second); !sameInv(got, toOther) {
		t.Fatalf("other's first invalidation = %+v, want %+v (never another cache's)", got, toOther)
	}
	sa, sb := a.BusStats(), b.BusStats()
	if sa.Published != 4 || sb.Published != 1 || sa.Received != 1 || sb.Received != 4 || sa.Dropped+sb.Dropped != 0 {
		t.Fatalf("stats a %+v, b %+v", sa, sb)
	}
	if sa.State != driver.BusUp || sa.LastMessage.IsZero() {
		t.Fatalf("a's state %v, last message %v", sa.State, sa.LastMessage)
	}

	// A subscription added while the bus is up starts with BusChanged(up)
	// at once.
	subscribeUp(t, a, "c2", newBusRecorder())

	// Both listen on the one bus channel, a classic one outside Cluster.
	n, err := newClient(t, addr).PubSubNumSub(ctx, a.bus.channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n[a.bus.channel] != 2 {
		t.Fatalf("%d subscribers of the bus channel, want 2", n[a.bus.channel])
	}
}

// The bus channel, the heartbeat channel and the lease channels share one
// subscription connection per Coordinator.
func TestBusSharesTheLeaseSubscriptionConnection(t *testing.T) {
	srv := testenv.StartRedis(t)
	leader := newBusCoordinator(t, newClient(t, srv.Addr), "conn:", Options{})
	follower := newBusCoordinator(t, newClient(t, srv.Addr, heldHook{}), "conn:", Options{})
	subscribeUp(t, follower, "c", newBusRecorder())
	ctx := context.Background()
	lc, err := leader.Claim(ctx, "k", driver.ClaimRequest{Wait: time.Minute})
	if err != nil || lc.Lease == nil {
		t.Fatalf("leader Claim = %+v, %v", lc, err)
	}
	held := make(chan struct{}, 2)
	res := make(chan error, 1)
	go func() {
		_, err := follower.Claim(context.WithValue(ctx, heldKey{}, held), "k", driver.ClaimRequest{Wait: time.Minute})
		res <- err
	}()
	for _, what := range []string{"it found the lease held", "it subscribed and looked again"} {
		select {
		case <-held:
		case err := <-res:
			t.Fatalf("the follower's Claim ended (%v) before %s", err, what)
		}
	}

	admin := newClient(t, srv.Addr)
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	pubsub := 0
	for _, line := range splitLines(list) {
		if containsField(line, "flags=P") {
			pubsub++
		}
	}
	if pubsub != 1 {
		t.Fatalf("%d subscription connections on the server, want 1 (the follower's, carrying the bus and the lease):\n%s", pubsub, list)
	}
	k, _ := follower.keysFor("k")
	n, err := admin.PubSubNumSub(ctx, follower.bus.channel, follower.bus.hbChannel, k.channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	for ch, c := range n {
		if c != 1 {
			t.Fatalf("%d subscribers of a channel, want 1 (%v)", c, n)
		}
		_ = ch
	}
	if _, err := lc.Lease.Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}

func containsField(line, field string) bool {
	for len(line) > 0 {
		i := 0
		for i < len(line) && line[i] != ' ' {
			i++
		}
		if line[:i] == field {
			return true
		}
		if i < len(line) {
			i++
		}
		line = line[i:]
	}
	return false
}

// One publisher's invalidations arrive in the order it published them.
func TestBusKeepsOrder(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	b := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	rb := newBusRecorder()
	subscribeUp(t, b, "c", rb)
	ctx := context.Background()
	const n = 500
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if err := a.Publish(ctx, "c", inv(driver.InvalidationKey, strconv.Itoa(i))); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := range n {
		if got := rb.nextInv(t, 10*time.Second); got.Target != strconv.Itoa(i) {
			t.Fatalf("invalidation %d is for %q", i, got.Target)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Whatever does not decode is dropped and counted, and never reaches a
// handler; a message claiming the receiver's own origin is ignored.
func TestBusDropsGarbage(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	b := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	rb := newBusRecorder()
	subscribeUp(t, b, "c", rb)
	ctx := context.Background()
	raw := newClient(t, addr)
	own, err := buswire.Append(nil, b.bus.origin, "c", inv(driver.InvalidationKey, "own"))
	if err != nil {
		t.Fatal(err)
	}
	garbage := []string{
		"", "hello", "fc1", "fc2 0000000000000001 k 1 1:ck",
		"fc1 0000000000000001 k 1 1:c",  // key without target
		"fc1 0000000000000001 a 1 1:cx", // all with target
		"fc1 0000000000000001 k 1 1:c" + string(make([]byte, buswire.MaxMessage)),
	}
	for _, g := range garbage {
		if err := raw.Publish(ctx, b.bus.channel, g).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := raw.Publish(ctx, b.bus.channel, own).Err(); err != nil {
		t.Fatal(err)
	}
	// Garbage on the heartbeat channel is no heartbeat either: nor is a
	// number of 20 digits, which would wrap around a uint64 (2^64 + 1
	// would read as heartbeat 1).
	hbGarbage := []string{"not a number", "18446744073709551617", "99999999999999999999", "01"}
	for _, g := range hbGarbage {
		if err := raw.Publish(ctx, b.bus.hbChannel, g).Err(); err != nil {
			t.Fatal(err)
		}
	}
	good := inv(driver.InvalidationKey, "good")
	if err := a.Publish(ctx, "c", good); err != nil {
		t.Fatal(err)
	}
	if got := rb.next(t, 5*time.Second); got.state != 0 || !sameInv(got.inv, good) {
		t.Fatalf("first call after the garbage %+v, want %+v", got, good)
	}
	if s := b.BusStats(); s.Dropped != uint64(len(garbage)+len(hbGarbage)) || s.Received != 1 {
		t.Fatalf("b's stats %+v, want %d dropped, 1 received", s, len(garbage)+len(hbGarbage))
	}
}

// busFaultOptions detect faults fast.
var busFaultOptions = Options{HeartbeatInterval: 50 * time.Millisecond, DownAfter: 300 * time.Millisecond}

// busDetectionSlack is what a shared two-core machine under -race may add
// to a detection time.
const busDetectionSlack = 500 * time.Millisecond

// publishArrives checks from publishes an invalidation that to receives.
func publishArrives(t *testing.T, from, to *Coordinator, r *busRecorder, target string) {
	t.Helper()
	want := inv(driver.InvalidationKey, target)
	if err := from.Publish(context.Background(), "c", want); err != nil {
		t.Fatal(err)
	}
	if got := r.nextInv(t, 5*time.Second); !sameInv(got, want) {
		t.Fatalf("received %+v, want %+v", got, want)
	}
}

// Redis dies: the bus is down within DownAfter plus a heartbeat; it comes
// back on the same port: the bus is up again (go-redis subscribed again,
// and a heartbeat sent since came back) and invalidations flow.
func TestBusDownWhenRedisDiesUpWhenItReturns(t *testing.T) {
	srv := testenv.StartRedis(t)
	a := newBusCoordinator(t, newClient(t, srv.Addr), "fault:", busFaultOptions)
	b := newBusCoordinator(t, newClient(t, srv.Addr), "fault:", busFaultOptions)
	ra, rb := newBusRecorder(), newBusRecorder()
	subscribeUp(t, a, "c", ra)
	subscribeUp(t, b, "c", rb)

	srv.Kill()
	took, _ := ra.waitState(t, driver.BusDown, 10*time.Second)
	t.Logf("down %v after the kill", took)
	if limit := busFaultOptions.DownAfter + busFaultOptions.HeartbeatInterval + busDetectionSlack; took > limit {
		t.Fatalf("down %v after the kill, want within %v", took, limit)
	}
	if s := a.BusStats(); s.State != driver.BusDown || s.Disconnects == 0 {
		t.Fatalf("stats after the kill %+v", s)
	}
	rb.waitState(t, driver.BusDown, 10*time.Second)

	srv.Start()
	took, _ = ra.waitState(t, driver.BusUp, 10*time.Second)
	t.Logf("up %v after the restart", took)
	rb.waitState(t, driver.BusUp, 10*time.Second)
	if s := a.BusStats(); s.Resubscribed < 1 {
		t.Fatalf("stats after the restart %+v, want a resubscription", s)
	}
	publishArrives(t, b, a, ra, "after")
	publishArrives(t, a, b, rb, "after")
}

// Redis stops answering (SIGSTOP) without closing anything. With a long
// Timeout no heartbeat comes back, so the bus is down within DownAfter
// plus a heartbeat; with a short one, the heartbeat's PUBLISH times out
// first, within a heartbeat plus Timeout. Once Redis answers again
// (SIGCONT) the bus is up, without a resubscription: the connection
// survived.
func TestBusDownWhileRedisIsPausedUpWhenResumed(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  Options
		limit time.Duration
	}{
		{"late", busFaultOptions, busFaultOptions.DownAfter + busFaultOptions.HeartbeatInterval},
		{"timeout", Options{HeartbeatInterval: 50 * time.Millisecond, DownAfter: 2 * time.Second, Timeout: 100 * time.Millisecond}, 150 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := testenv.StartRedis(t)
			a := newBusCoordinator(t, newClient(t, srv.Addr), "pause:", c.opts)
			b := newBusCoordinator(t, newClient(t, srv.Addr), "pause:", Options{})
			ra := newBusRecorder()
			subscribeUp(t, a, "c", ra)

			srv.Pause()
			paused := true
			defer func() {
				if paused {
					srv.Resume()
				}
			}()
			took, _ := ra.waitState(t, driver.BusDown, 10*time.Second)
			t.Logf("down %v after SIGSTOP", took)
			if limit := c.limit + busDetectionSlack; took > limit {
				t.Fatalf("down %v after SIGSTOP, want within %v", took, limit)
			}
			srv.Resume()
			paused = false
			took, _ = ra.waitState(t, driver.BusUp, 10*time.Second)
			t.Logf("up %v after SIGCONT", took)
			if s := a.BusStats(); s.Resubscribed != 0 {
				t.Fatalf("stats %+v: the connection survived, nothing to resubscribe", s)
			}
			publishArrives(t, b, a, ra, "after")
		})
	}
}

// The server closes the subscription connections (CLIENT KILL TYPE
// pubsub); go-redis reconnects and subscribes again at once, silently: the
// new confirmation alone tells the bus that messages may have been lost,
// so it goes down, then up with the next heartbeat.
func TestBusDownAndUpWhenTheSubscriptionIsReestablished(t *testing.T) {
	srv := testenv.StartRedis(t)
	a := newBusCoordinator(t, newClient(t, srv.Addr), "kill:", busFaultOptions)
	b := newBusCoordinator(t, newClient(t, srv.Addr), "kill:", busFaultOptions)
	ra := newBusRecorder()
	subscribeUp(t, a, "c", ra)
	admin := newClient(t, srv.Addr)
	ctx := context.Background()
	if err := admin.Do(ctx, "client", "kill", "type", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	ra.waitState(t, driver.BusDown, 10*time.Second)
	took, _ := ra.waitState(t, driver.BusUp, 10*time.Second)
	t.Logf("up %v after down", took)
	if s := a.BusStats(); s.Resubscribed == 0 || s.Disconnects == 0 {
		t.Fatalf("stats %+v, want a resubscription and a disconnect", s)
	}
	publishArrives(t, b, a, ra, "after")
}

// On a Redis Cluster the bus is one sharded channel, on the master of
// its slot, and invalidations cross between Coordinators on cluster
// clients; the lease channels of keys on other masters use those masters'
// connections.
func TestBusOnRedisCluster(t *testing.T) {
	addrs := testenv.StartRedisCluster(t, 3)
	newCluster := func() redis.UniversalClient {
		c := redis.NewUniversalClient(&redis.UniversalOptions{
			Addrs: addrs, IsClusterMode: true, ContextTimeoutEnabled: true, MaxRetries: -1,
			DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		})
		t.Cleanup(func() { c.Close() })
		return c
	}
	a := newBusCoordinator(t, newCluster(), "cluster:", Options{})
	b := newBusCoordinator(t, newCluster(), "cluster:", Options{})
	ra, rb := newBusRecorder(), newBusRecorder()
	subscribeUp(t, a, "c", ra)
	subscribeUp(t, b, "c", rb)
	publishArrives(t, a, b, rb, "from-a")
	publishArrives(t, b, a, ra, "from-b")

	ctx := context.Background()
	master, err := a.cluster.MasterForKey(ctx, a.bus.channel)
	if err != nil {
		t.Fatal(err)
	}
	n, err := master.Do(ctx, "pubsub", "shardnumsub", a.bus.channel).Slice()
	if err != nil || len(n) != 2 || n[1] != int64(2) {
		t.Fatalf("PUBSUB SHARDNUMSUB on the bus channel's master = %v, %v; want 2 sharded subscribers", n, err)
	}
	a.mu.Lock()
	s := a.subs[master.Options().Addr]
	nsubs := len(a.subs)
	a.mu.Unlock()
	if s == nil || nsubs != 1 {
		t.Fatalf("a has %d subscription connections, want 1, on the bus's master", nsubs)
	}
}

// The master of the bus channel's slot dies and its replica takes over:
// the bus goes down, and comes back up on the new master within seconds
// of the failover, without waiting for go-redis's periodic reload of the
// slot map (every minute by default), on each Coordinator.
func TestBusUpAgainAfterAClusterFailover(t *testing.T) {
	nodes := testenv.StartRedisClusterNodes(t, 3, 1)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	newCluster := func() redis.UniversalClient {
		c := redis.NewUniversalClient(&redis.UniversalOptions{
			Addrs: addrs, IsClusterMode: true, ContextTimeoutEnabled: true, MaxRetries: -1,
			DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		})
		t.Cleanup(func() { c.Close() })
		return c
	}
	a := newBusCoordinator(t, newCluster(), "failover:", Options{})
	b := newBusCoordinator(t, newCluster(), "failover:", Options{})
	ra, rb := newBusRecorder(), newBusRecorder()
	subscribeUp(t, a, "c", ra)
	subscribeUp(t, b, "c", rb)
	publishArrives(t, a, b, rb, "before")

	ctx := context.Background()
	master, err := a.cluster.MasterForKey(ctx, a.bus.channel)
	if err != nil {
		t.Fatal(err)
	}
	dead := master.Options().Addr
	var survivor string
	for _, n := range nodes {
		if n.Addr != dead {
			survivor = n.Addr
			break
		}
	}
	admin := newClient(t, survivor)
	slot, err := admin.ClusterKeySlot(ctx, a.bus.channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Addr == dead {
			n.Kill()
		}
	}
	killed := time.Now()

	// The Cluster's own failover, observed on a surviving node: a replica
	// is the slot's master now.
	var promoted string
	eventually(t, time.Minute, "a replica takes over the bus channel's slot", func() bool {
		slots, err := admin.ClusterSlots(ctx).Result()
		if err != nil {
			return false
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 && s.Nodes[0].Addr != dead {
				promoted = s.Nodes[0].Addr
				return true
			}
		}
		return false
	})
	failedOver := time.Now()
	t.Logf("a replica took over %v after the kill", failedOver.Sub(killed).Round(time.Millisecond))

	// Each bus went down when the master died, and is up again well before
	// go-redis's next periodic reload of its slot map.
	const within = 20 * time.Second
	for name, r := range map[string]*busRecorder{"a": ra, "b": rb} {
		down := false
		for up := false; !up; {
			c := r.next(t, time.Until(failedOver.Add(within)))
			switch c.state {
			case driver.BusDown:
				down = true
			case driver.BusUp:
				if !down {
					t.Fatalf("%s: BusChanged(up) before BusChanged(down)", name)
				}
				up = true
			}
		}
		t.Logf("%s: bus up again %v after the failover was seen", name, time.Since(failedOver).Round(time.Millisecond))
	}
	for name, c := range map[string]*Coordinator{"a": a, "b": b} {
		m, err := c.cluster.MasterForKey(ctx, c.bus.channel)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Options().Addr; got != promoted {
			t.Fatalf("%s: the bus channel's master is %s, want the promoted replica %s", name, got, promoted)
		}
	}
	publishArrives(t, a, b, rb, "after-a")
	publishArrives(t, b, a, ra, "after-b")
}

// A handler that falls 4096 invalidations behind loses all that waited
// for it, is told BusDown next, and BusUp once it caught up; the
// connection's reader never waits for it, so the bus stays up meanwhile.
func TestBusOverflowGoesDownThenUp(t *testing.T) {
	addr, prefix := sharedRedis(t)
	b := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	rb := newBusRecorder()
	release := rb.holdFirst()
	defer release() // a failed test must not leave stop waiting for the handler
	subscribeUp(t, b, "c", rb)
	ctx := context.Background()
	raw := newClient(t, addr)
	publishBurst := func(from, n int) {
		t.Helper()
		p := raw.Pipeline()
		for i := from; i < from+n; i++ {
			msg, err := buswire.Append(nil, 1, "c", inv(driver.InvalidationKey, strconv.Itoa(i)))
			if err != nil {
				t.Fatal(err)
			}
			p.Publish(ctx, b.bus.channel, msg)
		}
		if _, err := p.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	const total = busQueueLen + 200
	publishBurst(0, 1)
	<-rb.held // the handler is stuck in its first call
	publishBurst(1, total-1)
	eventually(t, 10*time.Second, "overflow while the handler is stuck", func() bool { return b.BusStats().Received == total })
	if s := b.BusStats(); s.Overflowed == 0 || s.State != driver.BusUp {
		t.Fatalf("stats with the handler stuck %+v, want an overflow and the bus up", s)
	}
	release()

	if got := rb.next(t, 5*time.Second); got.state != 0 || got.inv.Target != "0" {
		t.Fatalf("first call %+v, want the invalidation it was stuck on", got)
	}
	delivered, last := 1, 0
	sawDown := false
	for up := false; !up; {
		c := rb.next(t, 10*time.Second)
		switch c.state {
		case driver.BusDown:
			sawDown = true
		case driver.BusUp:
			if !sawDown {
				t.Fatal("BusChanged(up) before BusChanged(down)")
			}
			up = true
		case 0:
			if !sawDown {
				t.Fatalf("invalidation %q delivered before BusChanged(down): the queue overflowed", c.inv.Target)
			}
			i, _ := strconv.Atoi(c.inv.Target)
			if i <= last {
				t.Fatalf("invalidation %d after %d", i, last)
			}
			last = i
			delivered++
		}
	}
	if s := b.BusStats(); uint64(delivered)+s.Overflowed != total {
		t.Fatalf("%d delivered + %d overflowed, want %d", delivered, s.Overflowed, total)
	}
	if last != total-1 {
		t.Fatalf("the last invalidation delivered is %d, want %d", last, total-1)
	}
	publishBurst(total, 1)
	if got := rb.nextInv(t, 5*time.Second); got.Target != strconv.Itoa(total) {
		t.Fatalf("after catching up: %+v", got)
	}
}

// rawBurst publishes n invalidations for cache, of origin 1, with targets
// prefix+i for i from from, in one pipeline on raw.
func rawBurst(t *testing.T, raw redis.UniversalClient, channel, cache, prefix string, from, n int) {
	t.Helper()
	ctx := context.Background()
	p := raw.Pipeline()
	for i := from; i < from+n; i++ {
		msg, err := buswire.Append(nil, 1, cache, inv(driver.InvalidationKey, prefix+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		p.Publish(ctx, channel, msg)
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
}

// When the bus goes down, a slow handler hears BusDown as soon as its call
// in progress returns, not after the invalidations queued for it: they are
// dropped (the move back to BusUp makes up for them), and BusUp follows.
func TestBusDownDoesNotWaitForQueuedInvalidations(t *testing.T) {
	srv := testenv.StartRedis(t)
	// The bus goes down when the killed subscription is confirmed again,
	// not for want of heartbeats: a DownAfter of a minute keeps a loaded
	// machine's late heartbeat from taking it down (and up) once more
	// while the handler is held, which delivered queued invalidations
	// after that earlier down.
	b := newBusCoordinator(t, newClient(t, srv.Addr), "slow:", Options{HeartbeatInterval: busFaultOptions.HeartbeatInterval, DownAfter: time.Minute})
	rb := newBusRecorder()
	release := rb.holdFirst()
	defer release() // a failed test must not leave stop waiting for the handler
	subscribeUp(t, b, "c", rb)
	raw := newClient(t, srv.Addr)
	const queued = busQueueLen - 100
	rawBurst(t, raw, b.bus.channel, "c", "", 0, 1)
	<-rb.held // the handler is stuck in its first call
	rawBurst(t, raw, b.bus.channel, "c", "", 1, queued)
	eventually(t, 10*time.Second, "the invalidations are queued", func() bool { return b.BusStats().Received == queued+1 })

	// The server drops the subscription connection; go-redis reconnects,
	// and the new confirmation takes the bus down.
	if err := raw.Do(context.Background(), "client", "kill", "type", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the bus went down", func() bool { return b.BusStats().Disconnects > 0 })
	release()
	if got := rb.next(t, 5*time.Second); got.state != 0 || got.inv.Target != "0" {
		t.Fatalf("first call %+v, want the invalidation in progress", got)
	}
	if got := rb.next(t, 5*time.Second); got.state != driver.BusDown {
		t.Fatalf("call after the one in progress: %+v, want BusChanged(down) before the %d queued invalidations", got, queued)
	}
	_, invs := rb.waitState(t, driver.BusUp, 10*time.Second)
	if len(invs) != 0 {
		t.Fatalf("%d queued invalidations delivered after BusChanged(down), want them dropped", len(invs))
	}
	if s := b.BusStats(); s.Overflowed != 0 {
		t.Fatalf("stats %+v: nothing overflowed", s)
	}
	publishArrives(t, newBusCoordinator(t, raw, "slow:", Options{}), b, rb, "after")
}

// The queue is bounded in bytes too: large targets overflow it well
// before 4096 of them wait. Messages for other caches are never queued.
func TestBusQueueIsBoundedInBytes(t *testing.T) {
	// Megabytes of targets, whose Lua replay blocks a Redis for half a
	// second: a private server, so that other tests sharing one never stall.
	srv := testenv.StartRedis(t)
	addr, prefix := srv.Addr, "fctest:lease:"
	b := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	rb := newBusRecorder()
	release := rb.holdFirst()
	defer release() // a failed test must not leave stop waiting for the handler
	subscribeUp(t, b, "c", rb)
	raw := newClient(t, addr)
	rawBurst(t, raw, b.bus.channel, "c", "", 0, 1)
	<-rb.held

	// More invalidations than the queue holds, all for another cache.
	rawBurst(t, raw, b.bus.channel, "other", "", 0, busQueueLen+100)
	eventually(t, 10*time.Second, "the other cache's burst arrived", func() bool { return b.BusStats().Received == busQueueLen+101 })
	if s := b.BusStats(); s.Overflowed != 0 {
		t.Fatalf("stats %+v: another cache's messages overflowed c's queue", s)
	}

	// 64 KiB targets: 16 MiB of them is 256, far below 4096.
	big := strings.Repeat("x", buswire.MaxTarget-8)
	const n = 300
	rawBurst(t, raw, b.bus.channel, "c", big, 1, n)
	eventually(t, 10*time.Second, "the big burst arrived", func() bool { return b.BusStats().Received == busQueueLen+101+n })
	s := b.BusStats()
	if s.Overflowed == 0 {
		t.Fatalf("stats %+v: %d MiB of targets queued without an overflow", s, n*len(big)>>20)
	}
	release()
	if got := rb.next(t, 5*time.Second); got.state != 0 || got.inv.Target != "0" {
		t.Fatalf("first call %+v, want the invalidation in progress", got)
	}
	if got := rb.next(t, 5*time.Second); got.state != driver.BusDown {
		t.Fatalf("call after the overflow %+v, want BusChanged(down)", got)
	}
	_, invs := rb.waitState(t, driver.BusUp, 10*time.Second)
	if uint64(len(invs))+s.Overflowed != n {
		t.Fatalf("%d delivered + %d overflowed, want %d", len(invs), s.Overflowed, n)
	}
	for _, i := range invs {
		if !strings.HasPrefix(i.Target, big) {
			t.Fatalf("delivered an invalidation of another burst")
		}
	}
}

// stop is idempotent and safe to call concurrently; once it returned the
// handler is never called, though the bus keeps delivering to the other
// subscriptions; the last stop unsubscribes, and a new Subscribe starts
// the bus again.
func TestBusStopEndsDelivery(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	b := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	rb, witness := newBusRecorder(), newBusRecorder()
	stop := subscribeUp(t, b, "c", rb)
	stopWitness := subscribeUp(t, b, "w", witness)
	stream := startStream(t, a, "w", "c")
	witness.nextInv(t, 5*time.Second) // the stream flows
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); stop() }()
	}
	wg.Wait()
	rb.stopped.Store(true)
	// The witness hears what was published after the stop returned.
	stream.heardAfter(t, witness)
	stream.end()
	stop()
	if late := rb.late.Load(); late != 0 {
		t.Fatalf("%d calls to a handler after its stop returned", late)
	}

	// The last stop ends the run and unsubscribes.
	stopWitness()
	if s := b.BusStats(); s.State != driver.BusNone {
		t.Fatalf("state with nothing subscribed %v, want none", s.State)
	}
	admin := newClient(t, addr)
	eventually(t, 5*time.Second, "bus channel unsubscribed", func() bool {
		n, err := admin.PubSubNumSub(context.Background(), b.bus.channel, b.bus.hbChannel).Result()
		return err == nil && n[b.bus.channel] == 0 && n[b.bus.hbChannel] == 0
	})

	// And it starts again.
	again := newBusRecorder()
	subscribeUp(t, b, "c", again)
	publishArrives(t, a, b, again, "again")
}

// stream publishes invalidations, numbered, to caches in turn until end.
type stream struct {
	sent   atomic.Int64
	caches int
	cancel context.CancelFunc
	done   chan struct{}
}

func startStream(t *testing.T, c *Coordinator, caches ...string) *stream {
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{caches: len(caches), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for i := 0; ctx.Err() == nil; i++ {
			if c.Publish(context.Background(), caches[i%len(caches)], inv(driver.InvalidationKey, strconv.Itoa(i))) != nil {
				return
			}
			s.sent.Store(int64(i + 1))
		}
	}()
	t.Cleanup(s.end)
	return s
}

// heardAfter waits until r, subscribed to the stream's first cache, heard
// an invalidation published after the call.
func (s *stream) heardAfter(t *testing.T, r *busRecorder) {
	t.Helper()
	mark := s.sent.Load()
	for {
		i, _ := strconv.Atoi(r.nextInv(t, 5*time.Second).Target)
		if int64(i) > mark {
			return
		}
	}
}

func (s *stream) end() {
	s.cancel()
	<-s.done
}

// Close ends every subscription: no handler is called once it returned,
// stop still works, and the closed Coordinator refuses Subscribe and
// Publish.
func TestBusCloseEndsEverything(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	b := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	w := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	witness := newBusRecorder()
	subscribeUp(t, w, "c0", witness)
	var recs []*busRecorder
	var stops []func()
	for i := range 3 {
		r := newBusRecorder()
		recs = append(recs, r)
		stops = append(stops, subscribeUp(t, b, "c"+strconv.Itoa(i), r))
	}
	stream := startStream(t, a, "c0", "c1", "c2")
	recs[0].nextInv(t, 5*time.Second)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		r.stopped.Store(true)
	}
	stream.heardAfter(t, witness)
	stream.end()
	for _, s := range stops {
		s()
	}
	for i, r := range recs {
		if late := r.late.Load(); late != 0 {
			t.Fatalf("subscription %d: %d calls after Close returned", i, late)
		}
	}
	if _, err := b.Subscribe("c", newBusRecorder()); !errors.Is(err, errClosed) {
		t.Fatalf("Subscribe after Close = %v, want errClosed", err)
	}
	if err := b.Publish(context.Background(), "c", inv(driver.InvalidationAll, "")); !errors.Is(err, errClosed) {
		t.Fatalf("Publish after Close = %v, want errClosed", err)
	}
	if s := b.BusStats(); s.State != driver.BusNone {
		t.Fatalf("state after Close %v", s.State)
	}
}

// One Coordinator takes one subscription per cache name at a time: a
// second would never hear the first's invalidations. Once the first is
// stopped, the name is free again; of concurrent Subscribes, one wins.
func TestBusRefusesASecondSubscriptionOfACache(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	b := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	stop := subscribeUp(t, b, "c", newBusRecorder())
	second := newBusRecorder()
	if s, err := b.Subscribe("c", second); !errors.Is(err, ErrAlreadySubscribed) {
		if s != nil {
			s()
		}
		t.Fatalf("second Subscribe of c = %v, want ErrAlreadySubscribed", err)
	}
	subscribeUp(t, b, "other", newBusRecorder()) // another name is fine
	stop()
	subscribeUp(t, b, "c", second)
	publishArrives(t, a, b, second, "to the second")

	var wg sync.WaitGroup
	var won, refused atomic.Int64
	stops := make(chan func(), 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := b.Subscribe("race", newBusRecorder())
			switch {
			case err == nil:
				won.Add(1)
				stops <- s
			case errors.Is(err, ErrAlreadySubscribed):
				refused.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	close(stops)
	for s := range stops {
		s()
	}
	if won.Load() != 1 || refused.Load() != 7 {
		t.Fatalf("of 8 concurrent Subscribes, %d won and %d were refused; want 1 and 7", won.Load(), refused.Load())
	}
}

// Subscribe and Publish refuse bad arguments, without quoting keys.
func TestBusRefusesBadArguments(t *testing.T) {
	addr, prefix := sharedRedis(t)
	c := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	if _, err := c.Subscribe("c", nil); err == nil {
		t.Error("Subscribe with a nil handler")
	}
	if _, err := c.Subscribe("", newBusRecorder()); err == nil {
		t.Error("Subscribe with an empty cache name")
	}
	if _, err := c.Subscribe(string(make([]byte, buswire.MaxCache+1)), newBusRecorder()); err == nil {
		t.Error("Subscribe with a long cache name")
	}
	ctx := context.Background()
	for _, bad := range []driver.Invalidation{
		{Kind: driver.InvalidationKey, Version: time.Now()},
		{Kind: driver.InvalidationAll, Target: "secret-key", Version: time.Now()},
		{Kind: driver.InvalidationKey, Target: "secret-key"},
		{Kind: 0, Target: "secret-key", Version: time.Now()},
	} {
		err := c.Publish(ctx, "c", bad)
		if err == nil {
			t.Errorf("published %+v", bad)
		} else if strings.Contains(err.Error(), "secret-key") {
			t.Errorf("error %q quotes the key", err)
		}
	}
	if s := c.BusStats(); s.Published != 0 || s.State != driver.BusNone {
		t.Fatalf("stats %+v", s)
	}
}

// The heartbeat options are checked by New.
func TestBusOptionsAreChecked(t *testing.T) {
	addr, prefix := sharedRedis(t)
	client := newClient(t, addr)
	store, err := redisstore.New(client, redisstore.Options{Prefix: prefix, HashTag: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		opts  Options
		field string
	}{
		{Options{HeartbeatInterval: 9 * time.Millisecond}, "HeartbeatInterval"},
		{Options{HeartbeatInterval: 11 * time.Second}, "HeartbeatInterval"},
		{Options{HeartbeatInterval: -time.Second}, "HeartbeatInterval"},
		{Options{DownAfter: 499 * time.Millisecond}, "DownAfter"},
		{Options{HeartbeatInterval: time.Second, DownAfter: 1999 * time.Millisecond}, "DownAfter"},
		{Options{DownAfter: time.Minute + 1}, "DownAfter"},
		{Options{HeartbeatInterval: 10 * time.Second, DownAfter: 10 * time.Second}, "DownAfter"},
		{Options{BulkRetention: 59 * time.Second}, "BulkRetention"},
		{Options{BulkRetention: 721 * time.Hour}, "BulkRetention"},
		{Options{BulkRetention: -time.Hour}, "BulkRetention"},
	} {
		_, err := New(ctx, client, store, c.opts)
		var ce *flightcache.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("New(%+v) = %v, want a ConfigError on %s", c.opts, err, c.field)
		}
	}
	for _, c := range []struct {
		opts                           Options
		interval, downAfter, retention time.Duration
	}{
		{Options{}, DefaultHeartbeatInterval, DefaultDownAfter, 25 * time.Hour},
		{Options{HeartbeatInterval: time.Second}, time.Second, 4 * time.Second, DefaultBulkRetention},
		{Options{HeartbeatInterval: 10 * time.Second}, 10 * time.Second, 40 * time.Second, DefaultBulkRetention},
		{Options{HeartbeatInterval: 10 * time.Millisecond, DownAfter: 20 * time.Millisecond}, 10 * time.Millisecond, 20 * time.Millisecond, DefaultBulkRetention},
		{Options{BulkRetention: time.Minute}, DefaultHeartbeatInterval, DefaultDownAfter, time.Minute},
		{Options{BulkRetention: 720 * time.Hour}, DefaultHeartbeatInterval, DefaultDownAfter, 720 * time.Hour},
	} {
		co, err := New(ctx, client, store, c.opts)
		if err != nil {
			t.Fatalf("New(%+v) = %v", c.opts, err)
		}
		if co.bus.interval != c.interval || co.bus.downAfter != c.downAfter || co.bus.retention != c.retention {
			t.Errorf("New(%+v): interval %v, down after %v, retention %v; want %v, %v, %v", c.opts, co.bus.interval, co.bus.downAfter, co.bus.retention, c.interval, c.downAfter, c.retention)
		}
		co.Close()
	}
}

// Subscriptions that come and go concurrently start and stop the bus's
// run over and over; whatever the interleaving, a subscription that stays
// comes up and receives, and nothing leaks.
func TestBusSubscribeStopChurn(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	b := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				stop, err := b.Subscribe("c"+strconv.Itoa(g), newBusRecorder())
				if err != nil {
					t.Error(err)
					return
				}
				stop()
			}
		}()
	}
	wg.Wait()
	if s := b.BusStats(); s.State != driver.BusNone {
		t.Fatalf("state after the churn %v, want none", s.State)
	}
	r := newBusRecorder()
	subscribeUp(t, b, "c", r)
	publishArrives(t, a, b, r, "after the churn")
}
