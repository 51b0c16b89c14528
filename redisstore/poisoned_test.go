package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/redis/go-redis/v9"
)

// countingClient is a client of the Redis at addr whose connections add
// the bytes they read to read.
func countingClient(t *testing.T, addr string, read *atomic.Int64) *redis.Client {
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, Dialer: testenv.CountingDialer(read)})
	t.Cleanup(func() { client.Close() })
	return client
}

// failureCounter is a SharedBreaker that never opens and counts the calls
// the Cache reports as failures of the tier.
type failureCounter struct{ failures atomic.Int64 }

func (b *failureCounter) Allow() (func(failed bool), error) {
	return func(failed bool) {
		if failed {
			b.failures.Add(1)
		}
	}, nil
}

func (b *failureCounter) State() driver.BreakerState { return driver.BreakerClosed }

// A key planted with a 64 MiB value, or with another Redis type than a
// string, is one key's problem: the Cache reads it as a miss without
// copying the value (bytes read stay far below its size), never reports a
// failure of the tier to its breaker, keeps serving the other keys from
// Redis, and the key is repaired: deleted by the read, then written by
// the load, so the next instance hits it.
func TestPoisonedKeyIsABoundedMissAndIsRepaired(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(ctx context.Context, c *redis.Client, rk string) error
		kind  error
	}{
		{"64 MiB value", func(ctx context.Context, c *redis.Client, rk string) error {
			return c.Set(ctx, rk, strings.Repeat("x", 64<<20), 0).Err()
		}, redisstore.ErrPayloadTooLarge},
		{"list", func(ctx context.Context, c *redis.Client, rk string) error {
			return c.RPush(ctx, rk, "a", "b").Err()
		}, redisstore.ErrWrongType},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t)
			var read atomic.Int64
			client := countingClient(t, srv.Addr, &read)
			store := newRedisStore(t, client, uniquePrefix(t))
			ctx := context.Background()
			rk, err := store.RedisKey("p:poisoned")
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.plant(ctx, client, rk); err != nil {
				t.Fatal(err)
			}
			// Another instance wrote the healthy keys.
			var o origin
			writer := newCache(t, flightcache.Options[*product]{Shared: store})
			for _, id := range []string{"1", "2", "3"} {
				mustFetch(t, writer, "p:"+id, o.load(id))
			}

			var b failureCounter
			rec := newRecorder()
			c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: store, SharedBreaker: &b, Observer: rec})
			read.Store(0)
			wantOutcome(t, mustFetch(t, c, "p:poisoned", o.load("poisoned")).Outcome, flightcache.OutcomeLoaded)
			for _, id := range []string{"1", "2", "3"} {
				wantOutcome(t, mustFetch(t, c, "p:"+id, o.load(id)).Outcome, flightcache.OutcomeHitShared)
			}
			if n := read.Load(); n > 2*redisstore.DefaultMaxPayload {
				t.Fatalf("the client read %d bytes from Redis, want at most %d (MaxPayload twice): the poisoned value was copied", n, 2*redisstore.DefaultMaxPayload)
			}
			if n := b.failures.Load(); n != 0 {
				t.Fatalf("the breaker was told of %d failures, want 0: a poisoned key is not the tier's failure", n)
			}
			var ce *redisstore.CorruptError
			if n := rec.count(driver.EventReadFailed); n != 1 || !errors.As(rec.errs[0], &ce) || !errors.Is(rec.errs[0], tc.kind) {
				t.Fatalf("EventReadFailed = %d (%v), want 1 *CorruptError matching %v", n, rec.errs, tc.kind)
			}
			// Repaired: the load wrote a valid entry over it.
			if e, ok, err := store.Get(ctx, "p:poisoned"); err != nil || !ok || len(e.Value) == 0 {
				t.Fatalf("after the read, Get = %v, %v: the key was not repaired", ok, err)
			}
			t.Logf("%s: %d bytes read for 4 keys", tc.name, read.Load())
		})
	}
}

// A batch read meets the same poisoned keys as Get does: the 64 MiB value
// and the list are their own keys' misses, read without copying the value
// and repaired, and the batch's other keys are served.
func TestPoisonedKeysInABatchAreBoundedMissesAndAreRepaired(t *testing.T) {
	srv := testenv.StartRedis(t)
	var read atomic.Int64
	client := countingClient(t, srv.Addr, &read)
	store := newRedisStore(t, client, uniquePrefix(t))
	ctx := context.Background()
	huge, err := store.RedisKey("p:huge")
	if err != nil {
		t.Fatal(err)
	}
	list, err := store.RedisKey("p:list")
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Set(ctx, huge, strings.Repeat("x", 64<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.RPush(ctx, list, "a", "b").Err(); err != nil {
		t.Fatal(err)
	}
	var o origin
	writer := newCache(t, flightcache.Options[*product]{Shared: store})
	mustFetch(t, writer, "p:1", o.load("1"))

	read.Store(0)
	got, err := store.GetMany(ctx, []string{"p:huge", "p:1", "p:list"})
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	if n := read.Load(); n > 2*redisstore.DefaultMaxPayload {
		t.Fatalf("the client read %d bytes from Redis, want at most %d: the poisoned value was copied", n, 2*redisstore.DefaultMaxPayload)
	}
	var ce *redisstore.CorruptError
	if got[0].Found || !errors.As(got[0].Err, &ce) || !errors.Is(got[0].Err, redisstore.ErrPayloadTooLarge) {
		t.Errorf("the 64 MiB key: found %v, err %v; want a *CorruptError matching ErrPayloadTooLarge", got[0].Found, got[0].Err)
	}
	if !got[1].Found || got[1].Err != nil {
		t.Errorf("the healthy key: found %v, err %v; want it served", got[1].Found, got[1].Err)
	}
	if got[2].Found || !errors.Is(got[2].Err, redisstore.ErrWrongType) {
		t.Errorf("the list: found %v, err %v; want ErrWrongType", got[2].Found, got[2].Err)
	}
	for _, rk := range []string{huge, list} {
		if n, err := client.Exists(ctx, rk).Result(); err != nil || n != 0 {
			t.Errorf("%s still exists (%d, %v): not repaired", rk, n, err)
		}
	}
}
