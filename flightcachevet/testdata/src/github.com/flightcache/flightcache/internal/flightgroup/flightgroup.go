// Package flightgroup is a stub of the engine behind singleflight, for the
// analyzer tests (TestStubsMatchRealPackages checks its signatures).
package flightgroup

import "context"

type config struct{}

type Option func(*config)

type Result[V any] struct {
	Val    V
	Shared bool
	Err    error
}

type Group[K comparable, V any] struct{}

func New[K comparable, V any](opts ...Option) *Group[K, V] { return new(Group[K, V]) }

func (g *Group[K, V]) Do(ctx context.Context, key K, fn func(context.Context) (V, error)) (v V, shared bool, err error) {
	v, err = fn(ctx)
	return v, false, err
}

func (g *Group[K, V]) DoChan(ctx context.Context, key K, fn func(context.Context) (V, error)) <-chan Result[V] {
	return nil
}

func (g *Group[K, V]) Forget(key K) {}

func (g *Group[K, V]) Close() error { return nil }
