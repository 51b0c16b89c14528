package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ErrClientSideCaching is matched (errors.Is) by the error of New, and of
// redislease.New, for a go-redis client that has client-side caching on
// (Options.ClientSideCacheConfig or Options.ClientSideCache). Such a
// client answers GET and MGET from a cache of its own, underneath the
// Cache's: one without versions, that serves a value no fence has checked,
// with no staleness bound by default, and whose reads go-redis documents
// as not monotonic. Build the client without those two options; the
// Cache's memory tier with a Bus is the local cache over Redis.
var ErrClientSideCaching = errors.New("redisstore: the go-redis client has client-side caching on")

// CheckClient returns an error matching ErrClientSideCaching if client has
// go-redis client-side caching on, nil otherwise. New and redislease.New
// call it. It looks only where it can without talking to Redis: a Client
// (standalone, failover or from NewUniversalClient) and the shards of a
// Ring. The nodes of a ClusterClient are known only once it has
// connected: redislease.New checks each master when it first reaches it.
func CheckClient(client redis.UniversalClient) error {
	switch c := client.(type) {
	case *redis.Client:
		return checkNode(c)
	case *redis.Ring:
		// ForEachShard does no I/O: a Ring's shards are fixed by its
		// options. A shard marked down is skipped, which is harmless
		// here: no shard is down before the Ring has been used.
		return c.ForEachShard(context.Background(), func(_ context.Context, shard *redis.Client) error {
			return checkNode(shard)
		})
	}
	return nil
}

// checkNode refuses a Client with either switch of client-side caching:
// go-redis turns the feature on when either is set.
func checkNode(c *redis.Client) error {
	o := c.Options()
	if o.ClientSideCacheConfig == nil && o.ClientSideCache == nil {
		return nil
	}
	return fmt.Errorf("%w (client of %s): its GETs would be answered by a second cache underneath the Cache's, "+
		"one without versions, unchecked by fences, with no staleness bound by default and non-monotonic reads; "+
		"build the client without ClientSideCacheConfig and ClientSideCache, and use the Cache's memory tier with a Bus for local hits",
		ErrClientSideCaching, o.Addr)
}
