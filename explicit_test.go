package flightcache_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/flightcache/flightcache"
)

// TestExplicitWriteDuringLoadWins pins "explicit writes win": a Set or
// Delete made while a load of the same key is in flight must make that
// load's write-back a no-op in both tiers, or the load would resurrect the
// value the explicit write replaced or removed.
func TestExplicitWriteDuringLoadWins(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(c *flightcache.Cache[*product]) error
		// wantAfter is the Name a later Get must see; "" means the key
		// must be gone (the later Get loads).
		wantAfter string
	}{
		{"Set", func(c *flightcache.Cache[*product]) error {
			return c.Set(context.Background(), "p:1", &product{Name: "explicit"})
		}, "explicit"},
		{"Delete", func(c *flightcache.Cache[*product]) error {
			return c.Delete(context.Background(), "p:1")
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			shared := newMapShared(clock.Now)
			c := clocked(t, clock, flightcache.Options[*product]{Shared: shared})
			entered, release := make(chan struct{}), make(chan struct{})
			oldLoad := func(ctx context.Context) (*product, error) {
				close(entered)
				<-release // barrier: the explicit write happens here
				return &product{Name: "old"}, nil
			}
			done := make(chan flightcache.Result[*product])
			go func() {
				r, _ := c.Fetch(context.Background(), "p:1", oldLoad)
				done <- r
			}()
			<-entered
			if err := tc.write(c); err != nil {
				t.Fatal(err)
			}
			close(release)
			r := <-done
			// The load's own callers asked before the write: they get its value.
			if r.Value.Name != "old" || r.Outcome != flightcache.OutcomeLoaded {
				t.Fatalf("in-flight caller got %v %+v", r.Outcome, r.Value)
			}

			// Neither tier holds the old value.
			shared.mu.Lock()
			e, inShared := shared.m["p:1"]
			shared.mu.Unlock()
			if inShared {
				var p product
				json.Unmarshal(e.Value, &p)
				if p.Name != tc.wantAfter {
					t.Fatalf("shared tier holds %q, want %q", p.Name, tc.wantAfter)
				}
			} else if tc.wantAfter != "" {
				t.Fatal("shared tier lost the explicit Set")
			}
			fresh := func(ctx context.Context) (*product, error) { return &product{Name: "reloaded"}, nil }
			got := mustFetch(t, c, "p:1", fresh)
			want := tc.wantAfter
			if want == "" {
				want = "reloaded"
			}
			if got.Value.Name != want {
				t.Fatalf("after the load returned, Get = %q (%v), want %q", got.Value.Name, got.Outcome, want)
			}
		})
	}
}

// TestLoadWithoutExplicitWriteIsWrittenBack is the control of the test
// above: the guard must not drop ordinary write-backs.
func TestLoadWithoutExplicitWriteIsWrittenBack(t *testing.T) {
	clock := newFakeClock()
	shared := newMapShared(clock.Now)
	c := clocked(t, clock, flightcache.Options[*product]{Shared: shared})
	// A Set and Delete of another key while loading do not interfere.
	load := func(ctx context.Context) (*product, error) {
		if err := c.Set(context.Background(), "p:2", &product{}); err != nil {
			return nil, err
		}
		return &product{Name: "loaded"}, nil
	}
	mustFetch(t, c, "p:1", load)
	if shared.sets.Load() != 2 {
		t.Fatalf("shared sets = %d, want 2 (the Set of p:2 and the write-back of p:1)", shared.sets.Load())
	}
	r := mustFetch(t, c, "p:1", load)
	if r.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("outcome %v: the load was not written back", r.Outcome)
	}
}

// TestGetAfterDeleteDoesNotJoinOlderLoad pins the usual invalidation
// pattern ("update the origin, then Delete the key"): a Get that starts
// after Delete returned must not receive the value of a load that read the
// origin before the update.
func TestGetAfterDeleteDoesNotJoinOlderLoad(t *testing.T) {
	clock := newFakeClock()
	c := clocked(t, clock, flightcache.Options[*product]{})
	entered, release := make(chan struct{}), make(chan struct{})
	oldDone := make(chan flightcache.Result[*product])
	go func() {
		r, _ := c.Fetch(context.Background(), "p:1", func(ctx context.Context) (*product, error) {
			close(entered)
			<-release // the origin was read before the update
			return &product{Name: "old"}, nil
		})
		oldDone <- r
	}()
	<-entered
	if err := c.Delete(context.Background(), "p:1"); err != nil {
		t.Fatal(err)
	}
	r, err := c.Fetch(context.Background(), "p:1", func(ctx context.Context) (*product, error) {
		return &product{Name: "new"}, nil
	})
	if err != nil || r.Value.Name != "new" || r.Outcome != flightcache.OutcomeLoaded {
		t.Fatalf("Get after Delete got %v %+v, %v; want a new load of \"new\"", r.Outcome, r.Value, err)
	}
	close(release)
	if r := <-oldDone; r.Value.Name != "old" {
		t.Fatalf("the old load's own caller got %+v", r.Value)
	}
}
