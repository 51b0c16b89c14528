package redislease

import (
	"context"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// The herd and the leader crash on a real three-master Redis Cluster,
// through redis.UniversalClient (a ClusterClient, hence SSUBSCRIBE and
// SPUBLISH), and every key a script touches, for keys with and without
// braces, hashes to one slot.
func TestRedisClusterCoalescesAndTakesOverInOneSlotPerKey(t *testing.T) {
	addrs := testenv.StartRedisCluster(t, 3)
	newCluster := func(hooks ...redis.Hook) redis.UniversalClient {
		c := redis.NewUniversalClient(&redis.UniversalOptions{
			Addrs: addrs, IsClusterMode: true, ContextTimeoutEnabled: true, MaxRetries: -1,
			// As clientOptions: a herd queues for 32 connections per node
			// rather than dial hundreds at once, and a loaded machine gets
			// room before a call times out.
			DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
			PoolSize: 32, PoolTimeout: 10 * time.Second,
			DialerRetries: 5, DialerRetryTimeout: 20 * time.Millisecond, // see clientOptions
		})
		if _, ok := c.(*redis.ClusterClient); !ok {
			t.Fatalf("UniversalClient is a %T, want a ClusterClient", c)
		}
		for _, h := range hooks {
			c.AddHook(h)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	t.Run("OneSlotPerKey", func(t *testing.T) {
		c := newCluster()
		in := newInstance(t, c, testenv.UniqueName("slots:")+":", instanceConfig{})
		node := redis.NewClient(&redis.Options{Addr: addrs[0]})
		defer node.Close()
		ctx := context.Background()
		slots := map[int64]bool{}
		for _, key := range []string{"plain", "a{b}c", "{tenant}:1", "}{", "{}", "{", "}", "x{}y{z}", "user:{42}:cart"} {
			k, err := in.coord.keysFor(key)
			if err != nil {
				t.Fatal(err)
			}
			var slot int64 = -1
			for _, name := range k.all() {
				s, err := node.ClusterKeySlot(ctx, name).Result()
				if err != nil {
					t.Fatal(err)
				}
				if slot >= 0 && s != slot {
					t.Fatalf("key %q: %q hashes to slot %d, its value to %d", key, name, s, slot)
				}
				slot = s
			}
			slots[slot] = true
		}
		if len(slots) < 2 {
			t.Fatalf("all keys landed in %d slot(s): the tag must spread keys over the cluster", len(slots))
		}
	})

	t.Run("Herd", func(t *testing.T) {
		// A long lease: under -race on a loaded machine a heartbeat can come
		// late, and this test is about coalescing, not takeover.
		ins := newInstances(t, herdInstances, func() redis.UniversalClient { return newCluster() }, testenv.UniqueName("herd:")+":", instanceConfig{lease: Options{Timeout: 10 * time.Second, LeaseTTL: 15 * time.Second}})
		results, calls := herd(t, ins, "product:42")
		if calls != 1 {
			for i, in := range ins {
				t.Logf("instance %d: events %v", i, in.rec.counts)
			}
			t.Fatalf("origin called %d times on Redis Cluster, want exactly 1", calls)
		}
		checkHerd(t, results)
	})

	t.Run("LeaderCrash", func(t *testing.T) {
		crashedLeaderIsTakenOver(t, newCluster, "crash:")
	})
}
