// Package loaderlib holds loader factories, for the cross-package case.
package loaderlib

import "context"

func fetch(ctx context.Context, id string) (int, error) { return len(id), ctx.Err() }

// ByID returns a loader that uses ctx, its own argument, instead of the
// loader's context.
func ByID(ctx context.Context, id string) func(context.Context) (int, error) {
	return func(context.Context) (int, error) { return fetch(ctx, id) }
}

// Good returns a loader that uses its own context.
func Good(ctx context.Context, id string) func(context.Context) (int, error) {
	_ = ctx
	return func(lctx context.Context) (int, error) { return fetch(lctx, id) }
}
