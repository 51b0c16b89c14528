package redislease

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// Redis dies while a leader loads and followers on other instances wait
// for it, then comes back on the same port. Under DegradeToLocal every
// Get is served; under FailOnCoordinatorError a follower fails with
// ErrCoordinatorUnavailable. Nothing hangs either way, and once Redis is
// back a load is stored and coalesced across the cluster again.
func TestRedisRestartMidFlightServesOrFailsClearly(t *testing.T) {
	for _, policy := range []flightcache.FailurePolicy{flightcache.DegradeToLocal, flightcache.FailOnCoordinatorError} {
		name := "degrade"
		if policy == flightcache.FailOnCoordinatorError {
			name = "fail"
		}
		t.Run(name, func(t *testing.T) {
			srv := testenv.StartRedis(t)
			cfg := instanceConfig{
				lease: Options{LeaseTTL: time.Second},
				cache: func(o *flightcache.Options[string]) { o.OnCoordinatorFailure = policy },
			}
			prefix := "restart:"
			leader := newInstance(t, newClient(t, srv.Addr), prefix, cfg)
			follow := &faultHook{following: make(chan struct{}, 16)}
			followers := newInstances(t, 3, func() redis.UniversalClient { return newClient(t, srv.Addr, follow) }, prefix, cfg)
			ctx := context.Background()

			o := &origin{value: "v", gate: make(chan struct{}), started: make(chan int64, 1)}
			leaderGet := fetchAsync(ctx, leader.cache, "k", o.load)
			<-o.started
			var waits []<-chan getResult
			for _, f := range followers {
				waits = append(waits, fetchAsync(ctx, f.cache, "k", o.load))
			}
			for range followers {
				<-follow.following
			}
			srv.Kill()
			close(o.gate)

			// Bounds with room for a loaded machine: a call on a connection the
			// kill left hanging ends at SharedTimeout (10s in these tests).
			if r := await(t, leaderGet, 30*time.Second); r.err != nil || r.r.Value != "v" {
				t.Fatalf("leader's Get = %q, %v; want its loaded value", r.r.Value, r.err)
			}
			for i, w := range waits {
				r := await(t, w, 30*time.Second)
				switch {
				case r.err == nil && r.r.Value == "v":
				case policy == flightcache.FailOnCoordinatorError && errors.Is(r.err, flightcache.ErrCoordinatorUnavailable):
				default:
					t.Fatalf("follower %d = %q, %v with Redis down", i, r.r.Value, r.err)
				}
				if policy == flightcache.DegradeToLocal {
					if s := followers[i].cache.Scope(); s != flightcache.ScopeLocal {
						t.Fatalf("follower %d Scope() = %v with Redis down, want local", i, s)
					}
					if ch := followers[i].rec.scopeChanges(); len(ch) == 0 || ch[0] != flightcache.ScopeLocal {
						t.Fatalf("follower %d scope changes %v, want a move to local", i, ch)
					}
				}
			}

			srv.Start()
			// Back: a load is stored for everyone and coalescing is
			// cluster-wide again. A connection the restart broke may fail
			// one call, so a few keys are tried.
			back := &origin{value: "back"}
			var key string
			for i := range 5 {
				key = "after-" + strconv.Itoa(i)
				r, err := followers[0].cache.Fetch(ctx, key, back.load)
				if err == nil && r.Outcome == flightcache.OutcomeLoaded && followers[0].cache.Scope() == flightcache.ScopeCluster {
					break
				}
				if i == 4 {
					t.Fatalf("after the restart: %+v, %v, scope %v", r, err, followers[0].cache.Scope())
				}
			}
			calls := back.calls.Load()
			r, err := followers[1].cache.Fetch(ctx, key, back.load)
			if err != nil || r.Value != "back" || back.calls.Load() != calls {
				t.Fatalf("another instance's Get after the restart = %+v, %v, %d loads; want the stored value", r, err, back.calls.Load()-calls)
			}
		})
	}
}
