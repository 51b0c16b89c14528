package redislease

import (
	"context"
	"errors"
	"testing"

	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/redis/go-redis/v9"
)

// New refuses a client with go-redis client-side caching on: a standalone
// client, and a Cluster whose node clients have it (visible only once the
// Cluster is reached, which New does), on real servers.
func TestNewRefusesClientSideCaching(t *testing.T) {
	ctx := context.Background()
	addr, prefix := sharedRedis(t)
	store := func(c redis.UniversalClient) *redisstore.Store {
		s, err := redisstore.New(c, redisstore.Options{Prefix: prefix, HashTag: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	plain := newClient(t, addr)

	o := clientOptions(addr)
	o.Protocol, o.ClientSideCacheConfig = 3, &redis.ClientSideCacheConfig{}
	csc := redis.NewClient(o)
	defer csc.Close()
	if _, err := New(ctx, csc, store(plain), Options{}); !errors.Is(err, redisstore.ErrClientSideCaching) {
		t.Errorf("standalone client with client-side caching: New = %v, want ErrClientSideCaching", err)
	}

	t.Run("ClusterNodes", func(t *testing.T) {
		addrs := testenv.StartRedisCluster(t, 3)
		cluster := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: addrs,
			NewClient: func(o *redis.Options) *redis.Client {
				o.Protocol, o.ClientSideCacheConfig = 3, &redis.ClientSideCacheConfig{}
				return redis.NewClient(o)
			},
		})
		defer cluster.Close()
		plainCluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		defer plainCluster.Close()
		_, err := New(ctx, cluster, store(plainCluster), Options{})
		if !errors.Is(err, redisstore.ErrClientSideCaching) {
			t.Fatalf("Cluster whose nodes cache client-side: New = %v, want ErrClientSideCaching", err)
		}
		c, err := New(ctx, plainCluster, store(plainCluster), Options{})
		if err != nil {
			t.Fatalf("Cluster without client-side caching: New = %v", err)
		}
		c.Close()
	})
}
