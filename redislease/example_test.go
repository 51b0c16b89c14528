package redislease_test

import (
	"context"
	"log"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/redislease"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/redis/go-redis/v9"
)

type Product struct {
	ID   string
	Name string
}

// Cluster mode in a service: one load per key across every instance that
// shares the Redis. Process-local mode is the same Cache without
// Coordinator, chosen explicitly.
func Example() {
	ctx := context.Background()
	client := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:                 []string{"127.0.0.1:6379"}, // several addresses: a Redis Cluster
		ContextTimeoutEnabled: true,
	})
	defer client.Close()

	store, err := redisstore.New(client, redisstore.Options{Prefix: "product:", HashTag: true})
	if err != nil {
		log.Fatal(err)
	}
	coord, err := redislease.New(ctx, client, store, redislease.Options{LeaseTTL: 3 * time.Second})
	if err != nil {
		log.Fatal(err) // Redis unreachable: cluster mode was asked for, so refuse to start
	}
	defer coord.Close()
	local, err := memstore.New(memstore.Options[*Product]{MaxEntries: 100_000})
	if err != nil {
		log.Fatal(err)
	}
	defer local.Close()
	cache, err := flightcache.New(flightcache.Options[*Product]{
		Name: "product", Local: local, Shared: store, Coordinator: coord,
		OnCoordinatorFailure: flightcache.DegradeToLocal, // the default; FailOnCoordinatorError to fail instead
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()

	r, err := cache.Fetch(ctx, "t=acme|id=42", func(ctx context.Context) (*Product, error) {
		return &Product{ID: "42", Name: "Widget"}, nil // the origin
	})
	if err != nil {
		log.Fatal(err)
	}
	// Cache-Status style detail: coalesced across the cluster or locally.
	log.Printf("%s (scope %s, cache scope %s)", r.Outcome, r.Scope, cache.Scope())
}
