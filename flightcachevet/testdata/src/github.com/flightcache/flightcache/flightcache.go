// Package flightcache is a stub of github.com/flightcache/flightcache for the
// analyzer tests: the declarations the analyzers look at, with the real
// signatures (TestStubsMatchRealPackages checks them).
package flightcache

import (
	"context"
	"time"
)

type LoadFunc[V any] func(ctx context.Context) (V, error)

type BatchLoadFunc[V any] func(ctx context.Context, keys []string) (map[string]V, error)

type Options[V any] struct {
	Name  string
	TTL   time.Duration
	Clone func(V) V
}

type Result[V any] struct {
	Value V
	Age   time.Duration
}

type KeyResult[V any] struct {
	Result[V]
	Err error
}

type Cache[V any] struct{ opts Options[V] }

func New[V any](opts Options[V]) (*Cache[V], error) { return &Cache[V]{opts: opts}, nil }

func (c *Cache[V]) Get(ctx context.Context, key string, load LoadFunc[V]) (V, error) {
	return load(ctx)
}

func (c *Cache[V]) Fetch(ctx context.Context, key string, load LoadFunc[V]) (Result[V], error) {
	v, err := load(ctx)
	return Result[V]{Value: v}, err
}

func (c *Cache[V]) GetMany(ctx context.Context, keys []string, load BatchLoadFunc[V]) (map[string]V, error) {
	return load(ctx, keys)
}

func (c *Cache[V]) FetchMany(ctx context.Context, keys []string, load BatchLoadFunc[V]) []KeyResult[V] {
	return nil
}

func (c *Cache[V]) Refresh(ctx context.Context, key string, load LoadFunc[V]) (V, error) {
	return load(ctx)
}

func (c *Cache[V]) Peek(ctx context.Context, key string) (V, bool) {
	var v V
	return v, false
}

func (c *Cache[V]) Set(ctx context.Context, key string, v V) error { return nil }

func (c *Cache[V]) Delete(ctx context.Context, key string) error { return nil }

func (c *Cache[V]) InvalidatePrefix(ctx context.Context, prefix string) error { return nil }

func (c *Cache[V]) Close() error { return nil }
