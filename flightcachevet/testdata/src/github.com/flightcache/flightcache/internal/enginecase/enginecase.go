// Package enginecase calls the engine behind singleflight directly, as only
// the module itself can: its Group is recognised too.
package enginecase

import (
	"context"

	"github.com/flightcache/flightcache/internal/flightgroup"
)

func load(ctx context.Context) (int, error) { return 1, ctx.Err() }

func Engine(ctx context.Context, g *flightgroup.Group[string, int]) {
	_, _, _ = g.Do(ctx, "k", func(context.Context) (int, error) {
		return load(ctx) // want `loader passed to Group.Do uses ctx from the enclosing function`
	})
}
