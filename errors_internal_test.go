package flightcache

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/flightcache/flightcache/singleflight"
)

// The engine's ErrClosed does not match the Cache's (the Cache's wraps the
// engine's, not the reverse): every error out of the engine goes through
// fromEngine, after which a closing Cache is recognised, and a stale value
// is never served for it.
func TestEngineClosedErrorBecomesTheCachesErrClosed(t *testing.T) {
	ctx := context.Background()
	for _, err := range []error{singleflight.ErrClosed, fmt.Errorf("load cancelled: %w", singleflight.ErrClosed), ErrClosed} {
		if errors.Is(err, singleflight.ErrClosed) && err != ErrClosed && errors.Is(err, ErrClosed) {
			t.Fatalf("%v matches ErrClosed without fromEngine; the test premise is wrong", err)
		}
		got := fromEngine(err)
		if !errors.Is(got, ErrClosed) || !errors.Is(got, singleflight.ErrClosed) {
			t.Fatalf("fromEngine(%v) = %v, want ErrClosed", err, got)
		}
		if canServeStale(ctx, got) {
			t.Fatalf("canServeStale(%v) = true; a closing Cache serves nothing", got)
		}
	}
	other := errors.New("origin down")
	if got := fromEngine(other); got != other || !canServeStale(ctx, got) {
		t.Fatalf("fromEngine(%v) = %v (stale %v); want it unchanged and servable", other, got, canServeStale(ctx, got))
	}
}
