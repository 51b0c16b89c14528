package redislease

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/redislease/internal/buswire"
	"github.com/redis/go-redis/v9"
)

// untilUp reads r's calls until BusChanged(up) and returns the
// invalidations before it, failing on a BusChanged(down) meanwhile.
func untilUp(t *testing.T, r *busRecorder) []driver.Invalidation {
	t.Helper()
	var invs []driver.Invalidation
	for {
		c := r.next(t, 10*time.Second)
		switch c.state {
		case driver.BusUp:
			return invs
		case driver.BusDown:
			t.Fatalf("BusChanged(down) after %d invalidations, before BusChanged(up)", len(invs))
		default:
			invs = append(invs, c.inv)
		}
	}
}

// sameInvs fails the test unless got and want hold the same
// invalidations, in order.
func sameInvs(t *testing.T, what string, got, want []driver.Invalidation) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = sameInv(got[i], want[i])
	}
	if !ok {
		t.Fatalf("%s: %+v, want %+v", what, got, want)
	}
}

// at returns an invalidation of kind and target with Version v.
func at(kind driver.InvalidationKind, target string, v time.Time) driver.Invalidation {
	return driver.Invalidation{Kind: kind, Target: target, Version: v}
}

// An instance that subscribes after bulk invalidations were published
// gets them before its first BusChanged(up), oldest first, each target
// once with its newest Version (tag invalidations and expiries too, each
// with the Version it was published with); key invalidations and other
// caches' are not retained.
func TestBusReplaysBulkInvalidationsToLateSubscribers(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	ctx := context.Background()
	base := time.Now().Add(-time.Minute)
	for _, p := range []struct {
		cache string
		inv   driver.Invalidation
	}{
		{"c", at(driver.InvalidationPrefix, "tenant-a:", base)},
		{"c", at(driver.InvalidationKey, "k", base.Add(time.Second))},
		{"c", at(driver.InvalidationAll, "", base.Add(2*time.Second))},
		{"c", at(driver.InvalidationPrefix, "tenant-a:", base.Add(3*time.Second))},
		{"c", at(driver.InvalidationPrefix, "tenant-b:", base.Add(time.Second))},
		{"c", at(driver.InvalidationPrefix, "tenant-b:", base.Add(-time.Second))}, // older: kept at its newest
		{"c", at(driver.InvalidationTag, "tenant-a:", base.Add(4*time.Second))},   // a tag is not a prefix of the same name
		{"c", at(driver.InvalidationTagExpire, "product:1", base.Add(5*time.Second))},
		{"c", at(driver.InvalidationTag, "product:1", base.Add(6*time.Second))},
		{"c", at(driver.InvalidationTag, "product:1", base.Add(time.Second))}, // older: kept at its newest
		{"other", at(driver.InvalidationPrefix, "tenant-o:", base)},
	} {
		if err := a.Publish(ctx, p.cache, p.inv); err != nil {
			t.Fatal(err)
		}
	}
	b := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	rb := newBusRecorder()
	stop, err := b.Subscribe("c", rb)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	sameInvs(t, "before the first BusChanged(up)", untilUp(t, rb), []driver.Invalidation{
		at(driver.InvalidationPrefix, "tenant-b:", base.Add(time.Second)),
		at(driver.InvalidationAll, "", base.Add(2*time.Second)),
		at(driver.InvalidationPrefix, "tenant-a:", base.Add(3*time.Second)),
		at(driver.InvalidationTag, "tenant-a:", base.Add(4*time.Second)),
		at(driver.InvalidationTagExpire, "product:1", base.Add(5*time.Second)),
		at(driver.InvalidationTag, "product:1", base.Add(6*time.Second)),
	})
	if s := b.BusStats(); s.Replayed != 6 {
		t.Fatalf("stats %+v, want 6 replayed", s)
	}
	// Live invalidations follow as usual.
	publishArrives(t, a, b, rb, "live")
}

// An instance whose bus was down while a bulk invalidation was published,
// and whose connection lost it, gets it before it is up again.
func TestBusReplaysWhatWasMissedWhileDown(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	p := startProxy(t, addr)
	b := newBusCoordinator(t, newClient(t, p.ln.Addr().String()), prefix, busFaultOptions)
	rb := newBusRecorder()
	subscribeUp(t, b, "c", rb)

	// Nothing comes back on b's subscription connection: its heartbeats
	// are late, so its bus goes down.
	p.down.shut()
	rb.waitState(t, driver.BusDown, 10*time.Second)
	missed := inv(driver.InvalidationPrefix, "tenant-a:")
	if err := a.Publish(context.Background(), "c", missed); err != nil {
		t.Fatal(err)
	}
	// The connection dies with the message in it; go-redis reconnects.
	p.cutSubscriptions()
	p.down.lift()
	sameInvs(t, "before BusChanged(up) again", untilUp(t, rb), []driver.Invalidation{missed})
	if s := b.BusStats(); s.Replayed != 1 || s.Resubscribed == 0 {
		t.Fatalf("stats %+v, want 1 replayed after a resubscription", s)
	}
	// The replay was the only way: the message itself is gone.
	publishArrives(t, a, b, rb, "live")
}

// A handler that overflowed gets the retained invalidations before its
// BusUp too: the queue it lost may have held bulk invalidations.
func TestBusReplaysAfterAnOverflow(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	b := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	rb := newBusRecorder()
	release := rb.holdFirst()
	defer release()
	subscribeUp(t, b, "c", rb)
	raw := newClient(t, addr)
	rawBurst(t, raw, b.bus.channel, "c", "", 0, 1)
	<-rb.held
	bulk := inv(driver.InvalidationPrefix, "tenant-a:")
	if err := a.Publish(context.Background(), "c", bulk); err != nil {
		t.Fatal(err)
	}
	rawBurst(t, raw, b.bus.channel, "c", "", 1, busQueueLen+10)
	eventually(t, 10*time.Second, "an overflow", func() bool { return b.BusStats().Overflowed > 0 })
	release()
	rb.waitState(t, driver.BusDown, 10*time.Second)
	invs := untilUp(t, rb)
	if len(invs) == 0 || !sameInv(invs[len(invs)-1], bulk) {
		t.Fatalf("the last invalidation before BusChanged(up) is not the retained one: %d delivered", len(invs))
	}
	if s := b.BusStats(); s.Replayed != 1 {
		t.Fatalf("stats %+v, want 1 replayed", s)
	}
}

// The retained set is trimmed by age (at the publisher, and the reader
// leaves out what is older than its window) and by size: the oldest
// members make way for one InvalidationAll as new as the newest of them.
// It expires with the retention window.
func TestBusTrimsRetainedInvalidations(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newBusCoordinator(t, newClient(t, addr), prefix, Options{BulkRetention: time.Hour})
	admin := newClient(t, addr)
	ctx := context.Background()
	key := a.bus.bulkKey("c")
	members := func() []string {
		t.Helper()
		m, err := admin.ZRange(ctx, key, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	now := time.Now()
	a.bus.now = func() time.Time { return now }

	// By age, at the publisher.
	if err := a.Publish(ctx, "c", at(driver.InvalidationPrefix, "old:", now.Add(-50*time.Minute))); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctx, "c", at(driver.InvalidationPrefix, "older:", now.Add(-61*time.Minute))); err != nil {
		t.Fatal(err)
	}
	if m := members(); strings.Join(m, ",") != "pold:" {
		t.Fatalf("members %q, want only pold: (older: is past the window)", m)
	}
	if ttl, err := admin.PTTL(ctx, key).Result(); err != nil || ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("the set's TTL is %v, %v; want the retention window", ttl, err)
	}
	now = now.Add(15 * time.Minute)
	if err := a.Publish(ctx, "c", at(driver.InvalidationPrefix, "new:", now)); err != nil {
		t.Fatal(err)
	}
	if m := members(); strings.Join(m, ",") != "pnew:" {
		t.Fatalf("members %q, want only pnew: (old: is 65 minutes old)", m)
	}

	// By age, at the reader: a member its window excludes is not
	// replayed; nor is one that does not decode (counted as dropped).
	if err := admin.ZAdd(ctx, key,
		redis.Z{Member: "pstale:", Score: float64(time.Now().Add(-2 * time.Hour).UnixMicro())},
		redis.Z{Member: "xjunk", Score: float64(time.Now().UnixMicro())},
	).Err(); err != nil {
		t.Fatal(err)
	}
	b := newBusCoordinator(t, newClient(t, addr), prefix, Options{BulkRetention: time.Hour})
	rb := newBusRecorder()
	stop := subscribeUpAfter(t, b, "c", rb)
	sameInvs(t, "replayed", rb.replayed, []driver.Invalidation{at(driver.InvalidationPrefix, "new:", now)})
	if s := b.BusStats(); s.Dropped != 1 {
		t.Fatalf("stats %+v, want the junk member dropped", s)
	}
	stop()

	// By size.
	a.bus.bulkCap = 5
	if err := admin.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	var versions []time.Time
	for i := range 8 {
		v := now.Add(time.Duration(i) * time.Second)
		versions = append(versions, v)
		if err := a.Publish(ctx, "c", at(driver.InvalidationPrefix, "p"+strconv.Itoa(i)+":", v)); err != nil {
			t.Fatal(err)
		}
		if n := len(members()); n > 5 {
			t.Fatalf("%d members after %d publishes, want at most 5", n, i+1)
		}
	}
	rb = newBusRecorder()
	subscribeUpAfter(t, b, "c", rb)
	sameInvs(t, "replayed after trimming by size", rb.replayed, []driver.Invalidation{
		at(driver.InvalidationAll, "", versions[3]), // covers p0: to p3:
		at(driver.InvalidationPrefix, "p4:", versions[4]),
		at(driver.InvalidationPrefix, "p5:", versions[5]),
		at(driver.InvalidationPrefix, "p6:", versions[6]),
		at(driver.InvalidationPrefix, "p7:", versions[7]),
	})
}

// subscribeUpAfter subscribes r to cache on c and waits until it is up,
// keeping the invalidations replayed before in r.replayed.
func subscribeUpAfter(t *testing.T, c *Coordinator, cache string, r *busRecorder) func() {
	t.Helper()
	stop, err := c.Subscribe(cache, r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	r.replayed = untilUp(t, r)
	return stop
}

// Retained targets beyond the replay's byte budget are replayed as one
// InvalidationAll as new as the newest of them.
func TestBusReplayIsBoundedInBytes(t *testing.T) {
	// Megabytes of targets, whose Lua replay blocks a Redis for half a
	// second: a private server, so that other tests sharing one never stall.
	srv := testenv.StartRedis(t)
	addr, prefix := srv.Addr, "fctest:lease:"
	b := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	admin := newClient(t, addr)
	ctx := context.Background()
	big := strings.Repeat("x", buswire.MaxTarget-16)
	now := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	var newest time.Time
	pipe := admin.Pipeline()
	for i := range maxReplayBytes/len(big) + 2 {
		newest = now.Add(time.Duration(i) * time.Millisecond)
		pipe.ZAdd(ctx, b.bus.bulkKey("c"), redis.Z{Member: "p" + big + strconv.Itoa(i), Score: float64(newest.UnixMicro())})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	rb := newBusRecorder()
	subscribeUpAfter(t, b, "c", rb)
	sameInvs(t, "replayed", rb.replayed, []driver.Invalidation{at(driver.InvalidationAll, "", newest)})
}

// A subscription whose replay cannot read the retained invalidations
// stays down, though the bus is up, and tries again with the next
// heartbeats. A bulk invalidation that cannot be retained is not
// published.
func TestBusStaysDownUntilTheReplayReads(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	b := newBusCoordinator(t, newClient(t, addr), prefix, busFaultOptions)
	admin := newClient(t, addr)
	ctx := context.Background()
	key := b.bus.bulkKey("c")
	if err := admin.Set(ctx, key, "not a sorted set", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctx, "c", inv(driver.InvalidationAll, "")); err == nil {
		t.Fatal("published a bulk invalidation that could not be retained")
	}
	rb := newBusRecorder()
	stop, err := b.Subscribe("c", rb)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	eventually(t, 10*time.Second, "the bus up", func() bool { return b.BusStats().State == driver.BusUp })
	rb.quiet(t, 10*busFaultOptions.HeartbeatInterval) // ten heartbeats: ten failed replays
	if err := admin.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if got := rb.next(t, 10*time.Second); got.state != driver.BusUp {
		t.Fatalf("first call %+v, want BusChanged(up) once the replay could read", got)
	}
	publishArrives(t, a, b, rb, "live")
}

// On a Redis Cluster, the retained set lives in the bus's slot and the
// script that records a bulk invalidation publishes it with SPUBLISH.
func TestBusReplaysOnRedisCluster(t *testing.T) {
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
	rb := newBusRecorder()
	subscribeUp(t, b, "c", rb)
	bulk := inv(driver.InvalidationPrefix, "tenant-a:")
	if err := a.Publish(context.Background(), "c", bulk); err != nil {
		t.Fatal(err)
	}
	if got := rb.nextInv(t, 5*time.Second); !sameInv(got, bulk) {
		t.Fatalf("live: %+v, want %+v", got, bulk)
	}
	late := newBusCoordinator(t, newCluster(), "cluster:", Options{})
	rl := newBusRecorder()
	subscribeUpAfter(t, late, "c", rl)
	sameInvs(t, "replayed on the cluster", rl.replayed, []driver.Invalidation{bulk})
	if a.cluster.ClusterKeySlot(context.Background(), a.bus.bulkKey("c")).Val() != a.cluster.ClusterKeySlot(context.Background(), a.bus.channel).Val() {
		t.Fatal("the retained set is not in the bus channel's slot")
	}
}
