package redislease

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// slotCluster is a three-master Redis Cluster whose slots a test can move.
type slotCluster struct {
	t     *testing.T
	addrs []string
	admin map[string]*redis.Client // by address
}

func startSlotCluster(t *testing.T) *slotCluster {
	t.Helper()
	c := &slotCluster{t: t, addrs: testenv.StartRedisCluster(t, 3), admin: make(map[string]*redis.Client)}
	for _, a := range c.addrs {
		cl := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { cl.Close() })
		c.admin[a] = cl
	}
	return c
}

// client is a cluster client, as the other cluster tests build it, closed
// when the test ends.
func (c *slotCluster) client(hooks ...redis.Hook) *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: c.addrs, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
	})
	for _, h := range hooks {
		cl.AddHook(h)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// owner returns the address of the master serving slot, by asking a node.
func (c *slotCluster) owner(ctx context.Context, slot int64) string {
	c.t.Helper()
	shards, err := c.admin[c.addrs[0]].ClusterShards(ctx).Result()
	if err != nil {
		c.t.Fatal(err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if r.Start <= slot && slot <= r.End {
				for _, n := range sh.Nodes {
					if n.Role == "master" {
						return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
					}
				}
			}
		}
	}
	c.t.Fatalf("no master serves slot %d", slot)
	return ""
}

// move migrates slot, with its keys, from its master to another one, the
// way redis-cli --cluster reshard does, and returns the new master's
// address. When the old master gives the slot up, it ends its sharded
// subscriptions of the slot's channels with an SUNSUBSCRIBE push.
func (c *slotCluster) move(ctx context.Context, slot int64) string {
	c.t.Helper()
	from := c.owner(ctx, slot)
	var to string
	for _, a := range c.addrs {
		if a != from {
			to = a
			break
		}
	}
	src, dst := c.admin[from], c.admin[to]
	srcID, err := src.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		c.t.Fatal(err)
	}
	dstID, err := dst.Do(ctx, "cluster", "myid").Text()
	if err != nil {
		c.t.Fatal(err)
	}
	must := func(err error) {
		c.t.Helper()
		if err != nil {
			c.t.Fatal(err)
		}
	}
	must(dst.Do(ctx, "cluster", "setslot", slot, "importing", srcID).Err())
	must(src.Do(ctx, "cluster", "setslot", slot, "migrating", dstID).Err())
	host, port, _ := net.SplitHostPort(to)
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
		must(err)
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", host, port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(src.Do(ctx, args...).Err())
	}
	must(dst.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err())
	must(src.Do(ctx, "cluster", "setslot", slot, "node", dstID).Err())
	for _, a := range c.addrs {
		if a != from && a != to {
			must(c.admin[a].Do(ctx, "cluster", "setslot", slot, "node", dstID).Err())
		}
	}
	return to
}

// shardSubscribers is PUBSUB SHARDNUMSUB of channel on the master at addr.
func (c *slotCluster) shardSubscribers(ctx context.Context, addr, channel string) int64 {
	c.t.Helper()
	n, err := c.admin[addr].Do(ctx, "pubsub", "shardnumsub", channel).Slice()
	if err != nil || len(n) != 2 {
		c.t.Fatalf("PUBSUB SHARDNUMSUB = %v, %v", n, err)
	}
	return n[1].(int64)
}

// When a Cluster moves the bus's slot to another master, the old master
// ends the bus channel's sharded subscription: the bus goes down (the
// Cache resynchronises on the way back up), moves its subscription to the
// new master, comes back up, and invalidations flow again, both ways.
func TestBusFollowsItsSlotToAnotherMaster(t *testing.T) {
	cl := startSlotCluster(t)
	ctx := context.Background()
	opts := Options{HeartbeatInterval: 50 * time.Millisecond, DownAfter: 300 * time.Millisecond}
	a := newBusCoordinator(t, cl.client(), "move:", opts)
	b := newBusCoordinator(t, cl.client(), "move:", opts)
	ra, rb := newBusRecorder(), newBusRecorder()
	subscribeUp(t, a, "c", ra)
	subscribeUp(t, b, "c", rb)
	publishArrives(t, a, b, rb, "before")

	slot, err := cl.admin[cl.addrs[0]].ClusterKeySlot(ctx, a.bus.channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	to := cl.move(ctx, slot)
	ra.waitState(t, driver.BusDown, 10*time.Second)
	rb.waitState(t, driver.BusDown, 10*time.Second)
	ra.waitState(t, driver.BusUp, 10*time.Second)
	rb.waitState(t, driver.BusUp, 10*time.Second)
	if n := cl.shardSubscribers(ctx, to, a.bus.channel); n != 2 {
		t.Fatalf("the bus channel has %d sharded subscribers on its new master, want 2", n)
	}
	publishArrives(t, a, b, rb, "after")
	publishArrives(t, b, a, ra, "after")
}

// When a Cluster moves a key's slot while followers wait on its lease
// channel, the old master ends their subscription (SUNSUBSCRIBE push):
// they look at the lease again at once, subscribe on the new master, and
// the leader's completion there still wakes them, long before the
// lease's expiry.
func TestFollowersFollowTheirKeysSlotToAnotherMaster(t *testing.T) {
	cl := startSlotCluster(t)
	ctx := context.Background()
	lease := Options{LeaseTTL: 30 * time.Second, Timeout: 5 * time.Second}
	leader := newBusCoordinator(t, cl.client(), "move:", lease)
	follow := &faultHook{following: make(chan struct{}, 16)}
	follower := newBusCoordinator(t, cl.client(follow), "move:", lease)

	lc, err := leader.Claim(ctx, "k", driver.ClaimRequest{Wait: time.Minute})
	if err != nil || lc.Lease == nil {
		t.Fatalf("leader Claim = %+v, %v; want a lease", lc, err)
	}
	res := make(chan error, 1)
	var done uint64
	go func() {
		cl, err := follower.Claim(ctx, "k", driver.ClaimRequest{Wait: time.Minute})
		done = cl.Done
		res <- err
	}()
	<-follow.following // held by another: it subscribes
	<-follow.following // subscribed, held still: it waits
	k, err := leader.keysFor("k")
	if err != nil {
		t.Fatal(err)
	}
	slot, err := cl.admin[cl.addrs[0]].ClusterKeySlot(ctx, k.channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	from := cl.owner(ctx, slot)
	if n := cl.shardSubscribers(ctx, from, k.channel); n != 1 {
		t.Fatalf("the key's channel has %d sharded subscribers, want the follower's", n)
	}
	to := cl.move(ctx, slot)
	eventually(t, 10*time.Second, "the follower subscribed on the new master", func() bool {
		return cl.shardSubscribers(ctx, to, k.channel) == 1
	})
	completed := time.Now()
	if done, err := lc.Lease.Complete(ctx, nil); err != nil || !done.Written {
		t.Fatalf("Complete = %+v, %v", done, err)
	}
	select {
	case err := <-res:
		if err != nil || done != lc.Lease.Token() {
			t.Fatalf("follower Claim = done %d, %v; want the leader's completion %d", done, err, lc.Lease.Token())
		}
		t.Logf("follower woken %v after the completion", time.Since(completed))
	case <-time.After(10 * time.Second):
		t.Fatal("the follower was not woken within 10s of the completion")
	}
}

// A sharded subscription connection that carries channels of several
// slots (the bus's and waiting followers' lease channels on the same
// master) is cut. go-redis subscribes them all again with one SSUBSCRIBE
// when it reconnects, which the Cluster refuses whole (CROSSSLOT), and no
// confirmation comes: the bus, seeing no heartbeat come back, subscribes
// its own channels again and comes back up; a follower waiting meanwhile
// is still woken, by its safety-net re-check at worst.
func TestShardedSubscriptionOfSeveralSlotsSurvivesAReconnect(t *testing.T) {
	cl := startSlotCluster(t)
	ctx := context.Background()
	opts := Options{HeartbeatInterval: 50 * time.Millisecond, DownAfter: 300 * time.Millisecond, LeaseTTL: 30 * time.Second, Timeout: 5 * time.Second}
	leader := newBusCoordinator(t, cl.client(), "cut:", opts)
	follow := &faultHook{following: make(chan struct{}, 16)}
	follower := newBusCoordinator(t, cl.client(follow), "cut:", opts)
	rf := newBusRecorder()
	subscribeUp(t, follower, "c", rf)
	busSlot, err := cl.admin[cl.addrs[0]].ClusterKeySlot(ctx, follower.bus.channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	master := cl.owner(ctx, busSlot)
	// A key in another slot of the bus's master.
	var key string
	for i := 0; key == ""; i++ {
		k, err := leader.keysFor("k" + strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		slot, err := cl.admin[cl.addrs[0]].ClusterKeySlot(ctx, k.channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		if slot != busSlot && cl.owner(ctx, slot) == master {
			key = "k" + strconv.Itoa(i)
		}
	}
	lc, err := leader.Claim(ctx, key, driver.ClaimRequest{Wait: time.Minute})
	if err != nil || lc.Lease == nil {
		t.Fatalf("leader Claim = %+v, %v; want a lease", lc, err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := follower.Claim(ctx, key, driver.ClaimRequest{Wait: time.Minute})
		res <- err
	}()
	<-follow.following
	<-follow.following // subscribed and waiting
	if err := cl.admin[master].Do(ctx, "client", "kill", "type", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	rf.waitState(t, driver.BusDown, 10*time.Second)
	rf.waitState(t, driver.BusUp, 10*time.Second)
	completed := time.Now()
	if done, err := lc.Lease.Complete(ctx, nil); err != nil || !done.Written {
		t.Fatalf("Complete = %+v, %v", done, err)
	}
	select {
	case err := <-res:
		if err != nil {
			t.Fatalf("follower Claim = %v", err)
		}
		t.Logf("follower woken %v after the completion", time.Since(completed))
	case <-time.After(10 * time.Second):
		t.Fatal("the follower was not woken within 10s of the completion")
	}
}
