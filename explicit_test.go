package flightcache_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

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
			// The load's own callers asked before the write: they get its
			// value, stored in no tier (OutcomeLoadedUncached).
			if r.Value.Name != "old" || r.Outcome != flightcache.OutcomeLoadedUncached {
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

// A load that began before a Set is older than it, whatever instant it
// read the origin: here the Set finishes after the load's flight took its
// ticket (during its double-check) but before the loader runs, so the load
// reads the origin after the Set. Its callers get its value; the Set stays
// in both tiers, and the next Get serves it, without a second load
// overwriting it.
func TestSetWinsOverALoadThatBeganBeforeItAndReadTheOriginAfterIt(t *testing.T) {
	shared := newMapShared(time.Now)
	local := newLocal[*product](t, nil)
	c := newCache(t, flightcache.Options[*product]{Local: local, Shared: shared})
	ctx := context.Background()
	shared.afterGet = func(n int64) {
		if n != 2 { // 1: the read before the flight; 2: the flight's double-check
			return
		}
		done := make(chan error)
		go func() { done <- c.Set(ctx, "p:1", &product{ID: "p:1", Name: "set"}) }()
		if err := <-done; err != nil {
			t.Errorf("Set: %v", err)
		}
	}
	var loads atomic.Int64
	load := func(context.Context) (*product, error) {
		n := loads.Add(1)
		return &product{ID: "p:1", Name: "loaded " + strconv.FormatInt(n, 10)}, nil
	}
	r, err := c.Fetch(ctx, "p:1", load)
	if err != nil || r.Value.Name != "loaded 1" {
		t.Fatalf("the load's own caller got %+v, %v; want its value", r.Value, err)
	}
	shared.afterGet = nil
	for tier, name := range map[string]func() string{
		"local": func() string {
			it, ok := local.Get("p:1")
			if !ok {
				return "<none>"
			}
			return it.Value.Name
		},
		"shared": func() string {
			e, ok := shared.peek("p:1")
			if !ok {
				return "<none>"
			}
			var p product
			if err := json.Unmarshal(e.Value, &p); err != nil {
				return "<undecodable>"
			}
			return p.Name
		},
	} {
		if got := name(); got != "set" {
			t.Errorf("the %s tier holds %q after the load, want the Set's value", tier, got)
		}
	}
	// The next Get, on this instance and on another that shares the
	// tier, serves the Set.
	other := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared})
	for name, cache := range map[string]*flightcache.Cache[*product]{"this": c, "another": other} {
		if r, err := cache.Fetch(ctx, "p:1", load); err != nil || r.Value.Name != "set" {
			t.Errorf("%s instance's next Get = %+v (%v), %v; want the Set's value", name, r.Value, r.Outcome, err)
		}
	}
	if n := loads.Load(); n != 1 {
		t.Fatalf("%d loads, want 1: a later load overwrote the Set", n)
	}
}
