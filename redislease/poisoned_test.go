package redislease

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

// In cluster mode the read-or-claim script reads the value key: a planted
// 64 MiB value, or a key of another type at the value, lease, token or
// marker keys, must neither be copied into its reply nor fail it. The Get
// is a miss, the tier is never reported failing, the load repairs the
// key, and the next instance hits it.
func TestPoisonedKeysInClusterModeAreBoundedMissesAndAreRepaired(t *testing.T) {
	for _, tc := range []struct {
		name   string
		suffix string // the key planted: the value key plus this
		plant  func(ctx context.Context, c *redis.Client, rk string) error
	}{
		{"64 MiB value", "", func(ctx context.Context, c *redis.Client, rk string) error {
			return c.Set(ctx, rk, strings.Repeat("x", 64<<20), 0).Err()
		}},
		{"list at the value", "", func(ctx context.Context, c *redis.Client, rk string) error {
			return c.RPush(ctx, rk, "a").Err()
		}},
		{"list at the lease", "|lease", func(ctx context.Context, c *redis.Client, rk string) error {
			return c.RPush(ctx, rk, "a").Err()
		}},
		{"hash at the token", "|token", func(ctx context.Context, c *redis.Client, rk string) error {
			return c.HSet(ctx, rk, "a", "b").Err()
		}},
		{"garbage done marker", "|done", func(ctx context.Context, c *redis.Client, rk string) error {
			return c.Set(ctx, rk, "not a token", 0).Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t)
			var read atomic.Int64
			opts := clientOptions(srv.Addr)
			opts.Dialer = testenv.CountingDialer(&read)
			client := redis.NewClient(opts)
			t.Cleanup(func() { client.Close() })
			var failures atomic.Int64
			breaker := failureBreaker{&failures}
			cfg := instanceConfig{cache: func(o *flightcache.Options[string]) { o.SharedBreaker = breaker }}
			a := newInstance(t, client, "poison:", cfg)
			ctx := context.Background()
			rk, err := a.store.RedisKey("k")
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.plant(ctx, client, rk+tc.suffix); err != nil {
				t.Fatal(err)
			}
			read.Store(0)
			o := &origin{value: "v"}
			r, err := a.cache.Fetch(ctx, "k", o.load)
			if err != nil || r.Value != "v" || r.Outcome != flightcache.OutcomeLoaded {
				t.Fatalf("Fetch over a poisoned key: %v %v %v", r.Value, r.Outcome, err)
			}
			if n := read.Load(); n > 2*redisstore.DefaultMaxPayload {
				t.Fatalf("the client read %d bytes from Redis, want at most %d: the poisoned value was copied", n, 2*redisstore.DefaultMaxPayload)
			}
			if n := failures.Load(); n != 0 {
				t.Fatalf("the breaker was told of %d failures, want 0", n)
			}
			if tc.suffix == "" {
				var ce *redisstore.CorruptError
				a.rec.mu.Lock()
				errs := append([]error(nil), a.rec.errs...)
				a.rec.mu.Unlock()
				if n := a.rec.count(driver.EventReadFailed); n != 1 || len(errs) != 1 || !errors.As(errs[0], &ce) {
					t.Fatalf("EventReadFailed = %d (%v), want one *redisstore.CorruptError (the repair, counted)", n, errs)
				}
			}
			b := newInstance(t, client, "poison:", cfg)
			if r, err := b.cache.Fetch(ctx, "k", o.load); err != nil || r.Outcome != flightcache.OutcomeHitShared {
				t.Fatalf("another instance after the repair: %v %v, want a shared hit", r.Outcome, err)
			}
			t.Logf("%s: %d bytes read", tc.name, read.Load())
		})
	}
}

// failureBreaker is a SharedBreaker that never opens and counts the calls
// reported as failures of the tier.
type failureBreaker struct{ failures *atomic.Int64 }

func (b failureBreaker) Allow() (func(failed bool), error) {
	return func(failed bool) {
		if failed {
			b.failures.Add(1)
		}
	}, nil
}

func (b failureBreaker) State() driver.BreakerState { return driver.BreakerClosed }
