package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/leakcheck"
	"github.com/redis/go-redis/v9"
)

// Every test closes the clients it opens, so go-redis' pool goroutines must
// all be gone when the package finishes.
func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

const redisAddr = "127.0.0.1:6379"

// newRedisClient returns a client on the real Redis, closed when the test
// ends. Without a server the test is skipped, or fails when CI=true.
func newRedisClient(tb testing.TB, hooks ...redis.Hook) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		msg := "redis not reachable at " + redisAddr + " (" + err.Error() +
			"): start it with redis-server --daemonize yes --port 6379 --save '' --appendonly no"
		if os.Getenv("CI") == "true" {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	for _, h := range hooks {
		c.AddHook(h)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

var unsafeKeyChars = regexp.MustCompile(`[^A-Za-z0-9_]`)

// testPrefix is unique per test and run, free of glob metacharacters, and its
// keys are deleted when the test ends (through a client of its own, so a
// fault-injecting hook cannot get in the way of the clean-up).
func testPrefix(tb testing.TB) string {
	tb.Helper()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	prefix := "fctest:" + unsafeKeyChars.ReplaceAllString(tb.Name(), "_") + ":" + hex.EncodeToString(rnd[:]) + ":"
	tb.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			tb.Errorf("clean-up SCAN %s*: %v", prefix, err)
			return
		}
		if len(keys) > 0 {
			if err := c.Del(ctx, keys...).Err(); err != nil {
				tb.Errorf("clean-up DEL: %v", err)
			}
		}
	})
	return prefix
}

// newTestStore returns a Store on the real Redis with a unique prefix.
func newTestStore(tb testing.TB, opts Options, hooks ...redis.Hook) (*Store, *redis.Client) {
	tb.Helper()
	c := newRedisClient(tb, hooks...)
	if opts.Prefix == "" {
		opts.Prefix = testPrefix(tb)
	}
	s, err := New(c, opts)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return s, c
}
