package flightcache_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// scriptedCoordinator answers each Claim with the next of its answers and
// records what it was asked.
type scriptedCoordinator struct {
	mu      sync.Mutex
	answers []func(key string) driver.Grant
	asked   []driver.ClaimRequest
}

func (s *scriptedCoordinator) Claim(ctx context.Context, key string, req driver.ClaimRequest) (driver.Grant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, req)
	if len(s.answers) == 0 {
		return driver.Grant{}, errors.New("scriptedCoordinator: no answer left")
	}
	a := s.answers[0]
	s.answers = s.answers[1:]
	return a(key), nil
}

func (s *scriptedCoordinator) Invalidate(context.Context, string) error { return nil }

func (s *scriptedCoordinator) requests() []driver.ClaimRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]driver.ClaimRequest(nil), s.asked...)
}

// A Coordinator that does not read the shared tier in its Claim (Grant.Read
// unset) still gets the flight's double-check: once it holds the lease the
// Cache reads the tier, and a value another instance stored since this
// one missed is served without a load; the lease is completed with
// nothing, which wakes that key's followers.
func TestDoubleCheckAfterTheClaimOfACoordinatorThatDoesNotRead(t *testing.T) {
	shared := newMapShared(time.Now)
	other := newCache(t, flightcache.Options[*product]{Shared: shared})
	lease := &recordingLease{coord: &recordingCoordinator{}}
	coord := &scriptedCoordinator{answers: []func(string) driver.Grant{
		func(key string) driver.Grant {
			// Another instance fills the key between this one's miss and
			// its Claim.
			if err := other.Set(context.Background(), key, &product{ID: key, Name: "theirs"}); err != nil {
				t.Errorf("the other instance's Set: %v", err)
			}
			return driver.Grant{Lease: lease}
		},
	}}
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared, Coordinator: coord})
	r, err := c.Fetch(context.Background(), "p:1", func(context.Context) (*product, error) {
		return nil, errors.New("loaded: the value another instance stored was missed")
	})
	if err != nil || r.Value == nil || r.Value.Name != "theirs" {
		t.Fatalf("Fetch = %+v, %v; want the other instance's value", r, err)
	}
	if lease.completes.Load() != 1 || lease.fails.Load() != 0 || lease.stored.Load() {
		t.Fatalf("lease ended with %d completes (stored %v), %d fails; want one Complete storing nothing",
			lease.completes.Load(), lease.stored.Load(), lease.fails.Load())
	}
	if req := coord.requests(); len(req) != 1 || !req[0].Read {
		t.Fatalf("Claims %+v; want one, asking to read", req)
	}
}

// Read-or-claim: the first Claim asks the Coordinator to read the shared
// tier. A fresh entry in its answer is served as it is; one too old to
// serve (past FreshUntil) makes the Cache Claim again without reading, and
// load under the lease it then gets.
func TestReadOrClaimServesAFreshAnswerAndClaimsPastAStaleOne(t *testing.T) {
	entry := func(name string, fresh time.Duration) *driver.Entry {
		now := time.Now()
		return &driver.Entry{Value: []byte(`{"ID":"p:1","Name":"` + name + `"}`), Meta: driver.Meta{
			LoadedAt: now, FreshUntil: now.Add(fresh), StaleUntil: now.Add(time.Hour)}}
	}
	for _, c := range []struct {
		name    string
		current *driver.Entry
		want    string
		claims  int
	}{
		{"fresh", entry("shared", time.Minute), "shared", 1},
		{"stale", entry("shared", -time.Second), "loaded", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			lease := &recordingLease{coord: &recordingCoordinator{}}
			coord := &scriptedCoordinator{answers: []func(string) driver.Grant{
				func(string) driver.Grant { return driver.Grant{Read: true, Current: c.current} },
				func(string) driver.Grant { return driver.Grant{Lease: lease} },
			}}
			shared := newMapShared(time.Now)
			cache := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared, Coordinator: coord, StaleFor: time.Hour})
			// The shared tier itself is empty: the read before the flight
			// misses, and the Coordinator's answer is all there is.
			r, err := cache.Fetch(context.Background(), "p:1", func(context.Context) (*product, error) {
				return &product{ID: "p:1", Name: "loaded"}, nil
			})
			if err != nil || r.Value == nil || r.Value.Name != c.want {
				t.Fatalf("Fetch = %+v, %v; want %q", r, err, c.want)
			}
			req := coord.requests()
			if len(req) != c.claims || !req[0].Read || (len(req) > 1 && req[1].Read) {
				t.Fatalf("Claims %+v; want %d, the first reading and no other", req, c.claims)
			}
			// The Coordinator's answers stand in for the double-check: the
			// tier is read once, before the flight, and not again after
			// the second Claim.
			if n := shared.gets.Load(); n != 1 {
				t.Fatalf("the shared tier was read %d times, want once (before the flight)", n)
			}
			if c.claims == 2 && (lease.completes.Load() != 1 || !lease.stored.Load()) {
				t.Fatalf("the lease after a stale answer: %d completes, stored %v; want the load stored", lease.completes.Load(), lease.stored.Load())
			}
		})
	}
}

// A first read-or-claim that finds a load which had ended before the Claim
// began (Grant.Done with Waited 0: the Coordinator saw no lease held) is a
// read of the shared tier, not a follower woken by a load it waited for:
// no EventFollowerWoken, no cluster scope. One that did wait is.
func TestReadOrClaimThatFindsAFinishedLoadIsNoWakeUp(t *testing.T) {
	fresh := func() *driver.Entry {
		now := time.Now()
		return &driver.Entry{Value: []byte(`{"ID":"p:1","Name":"theirs"}`), Meta: driver.Meta{
			LoadedAt: now, FreshUntil: now.Add(time.Minute), StaleUntil: now.Add(time.Minute)}}
	}
	for _, c := range []struct {
		name      string
		waited    time.Duration
		wantScope flightcache.Scope
		wantWoken int
	}{
		{"ended before the Claim", 0, flightcache.ScopeNone, 0},
		{"waited for", time.Millisecond, flightcache.ScopeCluster, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			coord := &scriptedCoordinator{answers: []func(string) driver.Grant{
				func(string) driver.Grant {
					return driver.Grant{Done: 7, Waited: c.waited, Read: true, Current: fresh()}
				},
			}}
			rec := newRecorder()
			cache := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: newMapShared(time.Now),
				Coordinator: coord, Observer: rec})
			r, err := cache.Fetch(context.Background(), "p:1", func(context.Context) (*product, error) {
				return nil, errors.New("loaded: the value the Claim handed back was missed")
			})
			if err != nil || r.Value == nil || r.Value.Name != "theirs" {
				t.Fatalf("Fetch = %+v, %v; want the value the Claim handed back", r, err)
			}
			if r.Outcome != flightcache.OutcomeCoalesced || r.Scope != c.wantScope {
				t.Fatalf("Fetch = %v, scope %v; want %v, scope %v", r.Outcome, r.Scope, flightcache.OutcomeCoalesced, c.wantScope)
			}
			if n := rec.count(driver.EventFollowerWoken); n != c.wantWoken {
				t.Fatalf("%d EventFollowerWoken, want %d", n, c.wantWoken)
			}
		})
	}
}

// sayingCoordinator is a scriptedCoordinator that says at New whether
// Gets leave their shared read to the flight's Claim: redislease's says
// no by default, yes with its ReadInClaim option.
type sayingCoordinator struct {
	*scriptedCoordinator
	reads bool
}

func (c sayingCoordinator) ClaimReads() bool { return c.reads }

// A Coordinator that says nothing about reading is learnt from its Grants:
// once one showed Read, a Get that misses its local tier leaves its shared
// read to the flight, whose first Claim is then a look (Wait 0, Read) and
// the shared tier is not read by the Cache at all; its fresh answer is a
// shared hit. A Coordinator that says no (ClaimReads false) is never
// asked so, whatever its Grants show: the Cache reads the tier before the
// flight, and the Claim's find is its double-check's. One that says yes
// gets the look from the first Get on: the Cache never reads the tier.
func TestALookReplacesTheSharedReadOnceTheCoordinatorReads(t *testing.T) {
	entry := func() *driver.Entry {
		now := time.Now()
		return &driver.Entry{Value: []byte(`{"ID":"p:2","Name":"shared"}`), Meta: driver.Meta{
			LoadedAt: now, FreshUntil: now.Add(time.Minute), StaleUntil: now.Add(time.Hour)}}
	}
	answers := func() []func(string) driver.Grant {
		lease := &recordingLease{coord: &recordingCoordinator{}}
		return []func(string) driver.Grant{
			func(string) driver.Grant { return driver.Grant{Lease: lease, Read: true} },
			func(string) driver.Grant { return driver.Grant{Read: true, Current: entry()} },
		}
	}
	load := func(context.Context) (*product, error) { return &product{ID: "p", Name: "loaded"}, nil }
	for _, c := range []struct {
		name      string
		says      string // "": no ClaimReads method; "no", "yes": what it returns
		wantWait0 bool
		wantGets  int64
		want      flightcache.Outcome // the double-check's find is a coalesced answer
	}{
		{"learnt", "", true, 1, flightcache.OutcomeHitShared},
		{"plain", "no", false, 2, flightcache.OutcomeCoalesced},
		{"said", "yes", true, 0, flightcache.OutcomeHitShared},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc := &scriptedCoordinator{answers: answers()}
			var coord driver.Coordinator = sc
			if c.says != "" {
				coord = sayingCoordinator{sc, c.says == "yes"}
			}
			shared := newMapShared(time.Now)
			cache := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: shared, Coordinator: coord})
			if _, err := cache.Fetch(context.Background(), "p:1", load); err != nil {
				t.Fatal(err)
			}
			r, err := cache.Fetch(context.Background(), "p:2", load)
			if err != nil || r.Value == nil || r.Value.Name != "shared" || r.Outcome != c.want {
				t.Fatalf("second Fetch = %+v, %v; want the Coordinator's entry, %v", r, err, c.want)
			}
			req := sc.requests()
			if len(req) != 2 || !req[1].Read || (req[1].Wait == 0) != c.wantWait0 {
				t.Fatalf("Claims %+v; want the second reading, with Wait 0: %v", req, c.wantWait0)
			}
			if n := shared.gets.Load(); n != c.wantGets {
				t.Fatalf("the Cache read the shared tier %d times, want %d", n, c.wantGets)
			}
		})
	}
}
