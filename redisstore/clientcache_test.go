package redisstore

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// cscOptions are the options of a client on the real Redis with go-redis
// client-side caching on (RESP3 CLIENT TRACKING).
func cscOptions(tb testing.TB) *redis.Options {
	newRedisClient(tb) // skips, or fails under CI, without a server
	return &redis.Options{Addr: redisAddr, Protocol: 3, ClientSideCacheConfig: &redis.ClientSideCacheConfig{}}
}

// TestNewRefusesClientSideCaching pins the refusal on each kind of client
// where the option can be seen without talking to Redis, after showing on
// the real server that such a client does answer a repeated GET from its
// own cache: the second cache the refusal keeps out.
func TestNewRefusesClientSideCaching(t *testing.T) {
	ctx := context.Background()
	key := testPrefix(t) + "csc"
	csc := redis.NewClient(cscOptions(t))
	defer csc.Close()
	if err := csc.Set(ctx, key, "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := csc.Get(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if st := csc.CSCStats(); st.Hits == 0 {
		t.Fatalf("the client under test does not cache: %+v", st)
	}

	explicit := redis.NewClient(&redis.Options{Addr: redisAddr, Protocol: 3, ClientSideCache: redis.NewLocalCache(redis.CacheConfig{})})
	defer explicit.Close()
	universal := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{redisAddr}, Protocol: 3, ClientSideCacheConfig: &redis.ClientSideCacheConfig{}})
	defer universal.Close()
	ring := redis.NewRing(&redis.RingOptions{
		Addrs: map[string]string{"a": redisAddr},
		NewClient: func(o *redis.Options) *redis.Client {
			o.Protocol, o.ClientSideCacheConfig = 3, &redis.ClientSideCacheConfig{}
			return redis.NewClient(o)
		},
	})
	defer ring.Close()
	for name, c := range map[string]redis.UniversalClient{
		"Options.ClientSideCacheConfig": csc,
		"Options.ClientSideCache":       explicit,
		"NewUniversalClient":            universal,
		"Ring shard":                    ring,
	} {
		_, err := New(c, Options{Prefix: key})
		if !errors.Is(err, ErrClientSideCaching) {
			t.Errorf("%s: New = %v, want ErrClientSideCaching", name, err)
		}
	}

	plain := newRedisClient(t)
	plainRing := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": redisAddr}})
	defer plainRing.Close()
	for name, c := range map[string]redis.UniversalClient{"Client": plain, "Ring": plainRing} {
		if _, err := New(c, Options{Prefix: key}); err != nil {
			t.Errorf("%s without client-side caching: New = %v", name, err)
		}
	}
}
