package singleflight

import (
	"context"

	"github.com/flightcache/flightcache/internal/flightgroup"
)

// Group deduplicates concurrent calls per key. The zero value is ready to use
// (no limits, no timeout, no observer); New configures one. A Group must not
// be copied after first use.
type Group[K comparable, V any] struct {
	// g is the engine. Held by value, so a Group is one allocation and its
	// zero value is the engine's ready-to-use zero value.
	g flightgroup.Group[K, V]
}

// Result is what DoChan delivers: Val, Shared and Err are what Do would have
// returned.
type Result[V any] = flightgroup.Result[V]

// New returns a Group configured by opts. See Option for how invalid
// arguments are reported.
func New[K comparable, V any](opts ...Option) *Group[K, V] {
	g := new(Group[K, V])
	g.g.Init(opts...)
	return g
}

// Do runs fn once per key at a time; duplicates wait for and share its
// result.
//
// fn receives a context that carries ctx's values but not its cancellation.
// A caller whose ctx ends stops waiting at once with ctx.Err(); the loader
// goes on for the others (see WithCancelWhenAbandoned). shared reports
// whether the result went to more than one caller, this one included.
//
// When ctx can never be cancelled and no loader timeout is set, fn runs in
// the calling goroutine, as in golang.org/x/sync/singleflight; otherwise it
// runs in a new goroutine so that this caller can leave early.
//
// A call made from inside fn with fn's context for the same key runs its own
// function directly instead of waiting for itself (shared is false).
// A key that is not equal to itself (a NaN, or a struct or array holding
// one) matches no execution, as in a Go map: each such call runs its own,
// unshared, and it is never registered (InFlight and Forget do not see it;
// WithMaxInFlight, the loader timeout and Close still apply).
// A nil ctx is treated as context.Background().
func (g *Group[K, V]) Do(ctx context.Context, key K, fn func(context.Context) (V, error)) (v V, shared bool, err error) {
	return g.g.Do(ctx, key, fn)
}

// DoChan is Do delivering one Result on a buffered channel; an unread
// channel leaks nothing. The call runs in a new goroutine, which ends when Do
// would have returned.
func (g *Group[K, V]) DoChan(ctx context.Context, key K, fn func(context.Context) (V, error)) <-chan Result[V] {
	return g.g.DoChan(ctx, key, fn)
}

// Forget makes later calls for key start a new execution. The running one is
// not disturbed: its callers still get its result, its completion will not
// remove the newer execution, and its loader counts against WithMaxInFlight
// until it returns.
func (g *Group[K, V]) Forget(key K) { g.g.Forget(key) }

// InFlight returns the number of keys whose execution is still registered,
// that is, that a new caller would join. It is not what WithMaxInFlight
// bounds: a loader that outlived its timeout, or whose key was forgotten,
// still holds its slot until it returns, but its key is no longer counted
// here.
func (g *Group[K, V]) InFlight() int { return g.g.InFlight() }

// Close cancels every running loader's context with cause ErrClosed, releases
// their waiters with ErrClosed, and makes every later call return ErrClosed
// without running fn. It does not wait for loaders to return. Close is
// idempotent and always returns nil.
func (g *Group[K, V]) Close() error { return g.g.Close() }
