package flightcache_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// downCoordinator is a Coordinator that cannot be reached until up is set;
// then it hands out leases that always write. It stands in for Redis in
// tests of the Cache's policies (Redis itself is exercised in package
// redislease).
type downCoordinator struct {
	up     atomic.Bool
	claims atomic.Int64
}

var errCoordinatorDown = errors.New("coordinator down")

func (d *downCoordinator) Claim(ctx context.Context, key string, req driver.ClaimRequest) (driver.Grant, error) {
	d.claims.Add(1)
	if !d.up.Load() {
		return driver.Grant{}, errCoordinatorDown
	}
	return driver.Grant{Lease: writeLease{}}, nil
}

func (d *downCoordinator) Invalidate(ctx context.Context, key string) error {
	if !d.up.Load() {
		return errCoordinatorDown
	}
	return nil
}

// writeLease reports every write as stored (the Cache writes the local
// tier itself).
type writeLease struct{}

func (writeLease) Token() uint64         { return 1 }
func (writeLease) TakenOver() bool       { return false }
func (writeLease) Lost() <-chan struct{} { return nil }
func (writeLease) Complete(context.Context, *driver.Entry) (driver.Completion, error) {
	return driver.Completion{Written: true}, nil
}
func (writeLease) Fail(context.Context, error) error { return nil }

func TestCoordinatorOptionsAreValidated(t *testing.T) {
	coord := &downCoordinator{}
	for _, c := range []struct {
		name, field string
		opts        flightcache.Options[int]
	}{
		{"no shared tier", "Coordinator", flightcache.Options[int]{Local: newLocal[int](t, nil), Coordinator: coord}},
		{"wait above LoaderTimeout", "CoalesceWait", flightcache.Options[int]{Shared: newMapShared(time.Now), Coordinator: coord, LoaderTimeout: time.Second, CoalesceWait: 2 * time.Second}},
		{"unknown wait policy", "OnCoalesceTimeout", flightcache.Options[int]{Shared: newMapShared(time.Now), Coordinator: coord, OnCoalesceTimeout: 9}},
		{"unknown failure policy", "OnCoordinatorFailure", flightcache.Options[int]{Shared: newMapShared(time.Now), Coordinator: coord, OnCoordinatorFailure: 9}},
	} {
		_, err := flightcache.New(c.opts)
		var ce *flightcache.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("%s: New = %v, want a ConfigError on %s", c.name, err, c.field)
		}
	}
}

// With the default policy a Coordinator that fails degrades the Cache to
// process-local coalescing, loudly (scope, event), and the next flight that
// reaches it brings cluster scope back; with FailOnCoordinatorError the Get
// fails with ErrCoordinatorUnavailable.
func TestCoordinatorFailureDegradesOrFailsPerPolicy(t *testing.T) {
	coord := &downCoordinator{}
	rec := newRecorder()
	c := newCache(t, flightcache.Options[*product]{Shared: newMapShared(time.Now), Coordinator: coord, Observer: rec})
	if s := c.Scope(); s != flightcache.ScopeCluster {
		t.Fatalf("Scope() = %v with a Coordinator, want cluster", s)
	}
	var o origin
	r, err := c.Fetch(context.Background(), "p:1", o.load("1"))
	if err != nil || r.Value == nil || r.Scope != flightcache.ScopeLocal {
		t.Fatalf("degraded Fetch = %+v, %v; want the origin's value, loaded locally", r, err)
	}
	if s := c.Scope(); s != flightcache.ScopeLocal || rec.count(driver.EventScopeChanged) != 1 {
		t.Fatalf("Scope() = %v after %d scope events, want local after 1", s, rec.count(driver.EventScopeChanged))
	}
	coord.up.Store(true)
	if _, err := c.Fetch(context.Background(), "p:2", o.load("2")); err != nil {
		t.Fatal(err)
	}
	if s := c.Scope(); s != flightcache.ScopeCluster || rec.count(driver.EventScopeChanged) != 2 || rec.count(driver.EventLeaseAcquired) != 1 {
		t.Fatalf("Scope() = %v after recovery (%d scope events, %d leases)", s, rec.count(driver.EventScopeChanged), rec.count(driver.EventLeaseAcquired))
	}

	strict := newCache(t, flightcache.Options[*product]{Shared: newMapShared(time.Now), Coordinator: &downCoordinator{}, OnCoordinatorFailure: flightcache.FailOnCoordinatorError})
	calls := o.calls.Load()
	if _, err := strict.Get(context.Background(), "p:1", o.load("1")); !errors.Is(err, flightcache.ErrCoordinatorUnavailable) || !errors.Is(err, errCoordinatorDown) || o.calls.Load() != calls {
		t.Fatalf("FailOnCoordinatorError Get = %v after %d loads; want ErrCoordinatorUnavailable wrapping the cause, no load", err, o.calls.Load()-calls)
	}
	// An explicit write still lands when fencing fails, and says so.
	if err := strict.Set(context.Background(), "p:1", &product{ID: "1"}); !errors.Is(err, flightcache.ErrCoordinatorUnavailable) {
		t.Fatalf("Set with the coordinator down = %v, want ErrCoordinatorUnavailable", err)
	}
	if r, err := strict.Fetch(context.Background(), "p:1", nil); err != nil || r.Outcome != flightcache.OutcomeHitShared {
		t.Fatalf("Fetch after that Set = %+v, %v; want the Set value from the shared tier", r, err)
	}
}

// A Get whose shared read timed out does not ask the Coordinator, which
// lives on the same Redis: it pays one shared timeout, not two, and
// coalesces within the process (DegradeToLocal).
func TestGetThatFoundTheSharedTierDownDoesNotAskTheCoordinator(t *testing.T) {
	coord := &downCoordinator{}
	coord.up.Store(true)
	shared := newMapShared(time.Now)
	shared.readErr = context.DeadlineExceeded
	c := newCache(t, flightcache.Options[*product]{Shared: shared, Coordinator: coord})
	var o origin
	r, err := c.Fetch(context.Background(), "p:1", o.load("1"))
	if err != nil || r.Value == nil || o.calls.Load() != 1 {
		t.Fatalf("Fetch = %+v, %v after %d loads; want the origin's value", r, err, o.calls.Load())
	}
	if n := coord.claims.Load(); n != 0 {
		t.Fatalf("the coordinator was asked %d times after the shared read timed out, want 0", n)
	}
	if s := c.Scope(); s != flightcache.ScopeLocal {
		t.Fatalf("Scope() = %v, want local while the shared tier is down", s)
	}
}
