// Package singleflight is a stub of github.com/flightcache/flightcache/singleflight
// for the analyzer tests (TestStubsMatchRealPackages checks its signatures).
package singleflight

import (
	"context"
	"time"

	"github.com/flightcache/flightcache/internal/flightgroup"
)

type Option = flightgroup.Option

type Result[V any] = flightgroup.Result[V]

type Group[K comparable, V any] struct{ g flightgroup.Group[K, V] }

func New[K comparable, V any](opts ...Option) *Group[K, V] { return new(Group[K, V]) }

func WithLoaderTimeout(d time.Duration) Option { return nil }

func (g *Group[K, V]) Do(ctx context.Context, key K, fn func(context.Context) (V, error)) (v V, shared bool, err error) {
	return g.g.Do(ctx, key, fn)
}

func (g *Group[K, V]) DoChan(ctx context.Context, key K, fn func(context.Context) (V, error)) <-chan Result[V] {
	return g.g.DoChan(ctx, key, fn)
}

func (g *Group[K, V]) Forget(key K) { g.g.Forget(key) }

func (g *Group[K, V]) InFlight() int { return 0 }

func (g *Group[K, V]) Close() error { return g.g.Close() }
