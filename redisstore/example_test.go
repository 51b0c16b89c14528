package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/redis/go-redis/v9"
)

// Example compiles but does not run under go test: it needs a Redis server.
func Example() {
	// Any UniversalClient without client-side caching works: NewClient,
	// NewFailoverClient (Sentinel) or NewClusterClient.
	// ContextTimeoutEnabled lets ctx (the Cache's SharedTimeout) bound a
	// stuck socket; see "Timeouts and retries".
	client := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:                 []string{"127.0.0.1:6379"},
		ContextTimeoutEnabled: true,
		DialTimeout:           500 * time.Millisecond,
		ReadTimeout:           500 * time.Millisecond,
		WriteTimeout:          500 * time.Millisecond,
		MaxRetries:            -1, // no retry on the hot path: a failed read is a miss
	})
	defer client.Close()

	store, err := redisstore.New(client, redisstore.Options{Prefix: "myapp:users:v1:"})
	if err != nil {
		panic(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	now := time.Now()
	err = store.Set(ctx, "42", driver.Entry{
		Value: []byte(`{"name":"Ada"}`),
		Meta:  driver.Meta{FreshUntil: now.Add(time.Minute), StaleUntil: now.Add(time.Hour)},
	})
	if errors.Is(err, redisstore.ErrPayloadTooLarge) {
		slog.Warn("value too large for the shared tier", "err", err)
	}

	e, ok, err := store.Get(ctx, "42")
	switch {
	case errors.Is(err, redisstore.ErrCorrupt):
		slog.Warn("foreign payload in the shared tier, treated as a miss", "err", err)
	case err != nil:
		slog.Warn("shared tier unavailable, treated as a miss", "err", err)
	case ok:
		fmt.Printf("%s fresh=%v\n", e.Value, now.Before(e.FreshUntil))
	}
}

// A client with go-redis client-side caching on is refused: its GETs would
// be answered by a second cache underneath the Cache's, without versions
// or fences. Building the client does not talk to Redis, nor does New.
func ExampleCheckClient() {
	client := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:6379",
		Protocol:              3,
		ClientSideCacheConfig: &redis.ClientSideCacheConfig{},
	})
	defer client.Close()

	_, err := redisstore.New(client, redisstore.Options{Prefix: "myapp:users:v1:"})
	fmt.Println(errors.Is(err, redisstore.ErrClientSideCaching))
	// Output: true
}
