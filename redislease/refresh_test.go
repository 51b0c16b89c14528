package redislease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
)

// withBusFor is the instance configuration of the Refresh tests: cluster
// mode with the Coordinator as the Bus too, and a TTL long enough that a
// copy left behind would be served for the whole test.
var withBusFor = instanceConfig{cache: func(o *flightcache.Options[string]) {
	o.Bus = o.Coordinator.(*Coordinator)
	o.TTL = time.Hour
}}

func busUp(t *testing.T, ins ...*instance) {
	t.Helper()
	for _, in := range ins {
		eventually(t, 10*time.Second, "bus up", func() bool { return in.cache.BusState() == driver.BusUp })
	}
}

// A Refresh on one instance loads once, and the other instance, which
// held the old value in its local tier, serves the new one from the
// shared tier at its next Get: no stale local copy, no second load.
func TestRefreshOnOneInstanceReplacesTheOtherInstancesCopy(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newInstance(t, newClient(t, addr), prefix, withBusFor)
	b := newInstance(t, newClient(t, addr), prefix, withBusFor)
	busUp(t, a, b)
	ctx := context.Background()
	old := &origin{value: "v1"}
	for _, in := range []*instance{b, a, b} {
		if r, err := in.cache.Fetch(ctx, "product:42", old.load); err != nil || r.Value != "v1" {
			t.Fatalf("read before the Refresh = %+v, %v", r, err)
		}
	}
	if r, _ := b.cache.Fetch(ctx, "product:42", old.load); r.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("b's read = %v; the test needs b to hold a local copy", r.Outcome)
	}
	applied := b.rec.count(driver.EventInvalidationApplied)
	fresh := &origin{value: "v2"}
	if v, err := a.cache.Refresh(ctx, "product:42", fresh.load); err != nil || v != "v2" {
		t.Fatalf("a's Refresh = %q, %v", v, err)
	}
	eventually(t, 10*time.Second, "b applied a's invalidation", func() bool {
		return b.rec.count(driver.EventInvalidationApplied) > applied
	})
	r, err := b.cache.Fetch(ctx, "product:42", old.load)
	if err != nil || r.Value != "v2" || r.Outcome != flightcache.OutcomeHitShared {
		t.Fatalf("b's read after a's Refresh = %+v, %v; want v2 from the shared tier", r, err)
	}
	if r, _ := a.cache.Fetch(ctx, "product:42", old.load); r.Value != "v2" || r.Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("a's read after its Refresh = %+v", r)
	}
	if n, m := old.calls.Load(), fresh.calls.Load(); n != 1 || m != 1 {
		t.Fatalf("origin called %d times before the Refresh and %d by it, want 1 and 1", n, m)
	}
}

// Refreshes of one key on two instances at once share one load through
// the Coordinator: the second waits for the first's lease and takes its
// value, newer than the one it meant to replace.
func TestConcurrentRefreshesOnTwoInstancesLoadOnce(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newInstance(t, newClient(t, addr), prefix, withBusFor)
	follow := &faultHook{following: make(chan struct{}, 16)}
	b := newInstance(t, newClient(t, addr, follow), prefix, withBusFor)
	busUp(t, a, b)
	ctx := context.Background()
	old := &origin{value: "v1"}
	for _, in := range []*instance{a, b} {
		if _, err := in.cache.Get(ctx, "product:42", old.load); err != nil {
			t.Fatal(err)
		}
	}
	fresh := &origin{value: "v2", gate: make(chan struct{}), started: make(chan int64, 1)}
	type answer struct {
		v   string
		err error
	}
	refresh := func(in *instance) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			v, err := in.cache.Refresh(ctx, "product:42", fresh.load)
			ch <- answer{v, err}
		}()
		return ch
	}
	fromA := refresh(a)
	<-fresh.started // a holds the lease and loads
	fromB := refresh(b)
	<-follow.following // b saw a's lease held and waits for it
	// Gets on both instances meanwhile are served the held value.
	for _, in := range []*instance{a, b} {
		if r, err := in.cache.Fetch(ctx, "product:42", old.load); err != nil || r.Value != "v1" || !r.Outcome.Hit() {
			t.Fatalf("Get during the Refreshes = %+v, %v; want the held v1 at once", r, err)
		}
	}
	close(fresh.gate)
	for _, ch := range []<-chan answer{fromA, fromB} {
		select {
		case got := <-ch:
			if got.err != nil || got.v != "v2" {
				t.Fatalf("Refresh = %q, %v", got.v, got.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a Refresh did not return")
		}
	}
	if n := fresh.calls.Load(); n != 1 {
		t.Fatalf("the two Refreshes called the origin %d times, want 1", n)
	}
	for _, in := range []*instance{a, b} {
		eventually(t, 10*time.Second, "the new value served", func() bool {
			r, err := in.cache.Fetch(ctx, "product:42", old.load)
			return err == nil && r.Value == "v2"
		})
	}
	if n := old.calls.Load(); n != 1 {
		t.Fatalf("origin called %d times for v1, want 1", n)
	}
}

// Peek on an instance whose Redis is frozen reads absent within about
// SharedTimeout: it neither waits on the frozen tier nor loads.
func TestPeekWithAFrozenRedisReadsAbsentWithinSharedTimeout(t *testing.T) {
	srv := testenv.StartRedis(t)
	const sharedTimeout = 200 * time.Millisecond
	cfg := instanceConfig{local: true, cache: func(o *flightcache.Options[string]) {
		o.SharedTimeout = sharedTimeout
	}}
	writer := newInstance(t, newClient(t, srv.Addr), "peek:", cfg)
	reader := newInstance(t, newClient(t, srv.Addr), "peek:", cfg)
	ctx := context.Background()
	o := &origin{value: "v1"}
	if _, err := writer.cache.Get(ctx, "product:42", o.load); err != nil {
		t.Fatal(err)
	}
	if v, ok := reader.cache.Peek(ctx, "product:43"); ok {
		t.Fatalf("Peek of a key never loaded = %q", v)
	}
	srv.Pause()
	t.Cleanup(srv.Resume)
	start := time.Now()
	v, ok := reader.cache.Peek(ctx, "product:42")
	took := time.Since(start)
	if ok {
		t.Fatalf("Peek with Redis frozen = %q, want absent", v)
	}
	if took > sharedTimeout+2*time.Second {
		t.Fatalf("Peek with Redis frozen took %v, want about SharedTimeout %v", took, sharedTimeout)
	}
	// The writer's own local copy is still a Get's fresh hit, so Peek's.
	if v, ok := writer.cache.Peek(ctx, "product:42"); !ok || v != "v1" {
		t.Fatalf("Peek of a local copy with Redis frozen = %q, %v", v, ok)
	}
	srv.Resume()
	if v, ok := reader.cache.Peek(ctx, "product:42"); !ok || v != "v1" {
		t.Fatalf("Peek after Redis thawed = %q, %v", v, ok)
	}
	if n := o.calls.Load(); n != 1 {
		t.Fatalf("origin called %d times, want 1", n)
	}
}

// A Refresh whose load fails in cluster mode keeps the held value on every
// instance: both go on serving it, and the shared entry is untouched.
func TestFailedRefreshKeepsTheValueOnEveryInstance(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newInstance(t, newClient(t, addr), prefix, withBusFor)
	b := newInstance(t, newClient(t, addr), prefix, withBusFor)
	busUp(t, a, b)
	ctx := context.Background()
	old := &origin{value: "v1"}
	for _, in := range []*instance{a, b} {
		if _, err := in.cache.Get(ctx, "product:42", old.load); err != nil {
			t.Fatal(err)
		}
	}
	failing := &origin{err: errOriginDown}
	if _, err := a.cache.Refresh(ctx, "product:42", failing.load); !errors.Is(err, errOriginDown) {
		t.Fatalf("failed Refresh = %v, want the loader's error", err)
	}
	for _, in := range []*instance{a, b} {
		if r, err := in.cache.Fetch(ctx, "product:42", old.load); err != nil || r.Value != "v1" || !r.Outcome.Hit() {
			t.Fatalf("Get after a failed Refresh = %+v, %v; want the held v1", r, err)
		}
	}
	fresh := newInstance(t, newClient(t, addr), prefix, withBusFor)
	if v, ok := fresh.cache.Peek(ctx, "product:42"); !ok || v != "v1" {
		t.Fatalf("a new instance's Peek after a failed Refresh = %q, %v; want the shared v1", v, ok)
	}
	if n := old.calls.Load(); n != 1 {
		t.Fatalf("origin called %d times for v1, want 1", n)
	}
}

var errOriginDown = errors.New("origin down")

// A Refresh whose caller leaves while it loads goes on: the new value is
// stored, and the other instance still hears of it and drops its copy.
func TestRefreshWhoseCallerLeftStillReplacesTheOtherInstancesCopy(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newInstance(t, newClient(t, addr), prefix, withBusFor)
	b := newInstance(t, newClient(t, addr), prefix, withBusFor)
	busUp(t, a, b)
	ctx := context.Background()
	old := &origin{value: "v1"}
	for _, in := range []*instance{b, b} {
		if _, err := in.cache.Get(ctx, "product:42", old.load); err != nil {
			t.Fatal(err)
		}
	}
	applied := b.rec.count(driver.EventInvalidationApplied)
	fresh := &origin{value: "v2", gate: make(chan struct{}), started: make(chan int64, 1)}
	rctx, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() {
		_, err := a.cache.Refresh(rctx, "product:42", fresh.load)
		left <- err
	}()
	<-fresh.started
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("Refresh whose caller left = %v, want context.Canceled", err)
	}
	close(fresh.gate)
	eventually(t, 10*time.Second, "b applied a's invalidation", func() bool {
		return b.rec.count(driver.EventInvalidationApplied) > applied
	})
	if r, err := b.cache.Fetch(ctx, "product:42", old.load); err != nil || r.Value != "v2" {
		t.Fatalf("b's read after the Refresh = %+v, %v; want v2", r, err)
	}
	if n, m := old.calls.Load(), fresh.calls.Load(); n != 1 || m != 1 {
		t.Fatalf("origin called %d and %d times, want 1 and 1", n, m)
	}
}

// Peek on another instance honours what a Get honours: after a Delete or
// an InvalidatePrefix made elsewhere (applied through the Bus), the key
// reads absent, though the shared tier still holds the prefix's entry.
func TestPeekOnAnotherInstanceIsAbsentAfterDeleteOrInvalidatePrefix(t *testing.T) {
	addr, prefix := sharedRedis(t)
	a := newInstance(t, newClient(t, addr), prefix, withBusFor)
	b := newInstance(t, newClient(t, addr), prefix, withBusFor)
	busUp(t, a, b)
	ctx := context.Background()
	o := &origin{value: "v1"}
	for _, k := range []string{"product:1|en", "product:2|en"} {
		if _, err := b.cache.Get(ctx, k, o.load); err != nil {
			t.Fatal(err)
		}
		if v, ok := b.cache.Peek(ctx, k); !ok || v != "v1" {
			t.Fatalf("b's Peek of %s = %q, %v", k, v, ok)
		}
	}
	applied := b.rec.count(driver.EventInvalidationApplied)
	if err := a.cache.Delete(ctx, "product:1|en"); err != nil {
		t.Fatal(err)
	}
	if err := a.cache.InvalidatePrefix(ctx, "product:2|"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "b applied both invalidations", func() bool {
		return b.rec.count(driver.EventInvalidationApplied) >= applied+2
	})
	if _, ok, err := a.store.Get(ctx, "product:2|en"); err != nil || !ok {
		t.Fatalf("the shared entry of product:2|en: %v, %v; the test needs it to outlive the invalidation", ok, err)
	}
	for _, k := range []string{"product:1|en", "product:2|en"} {
		if v, ok := b.cache.Peek(ctx, k); ok {
			t.Fatalf("b's Peek of %s after the invalidation = %q, want absent", k, v)
		}
	}
	if n := o.calls.Load(); n != 2 {
		t.Fatalf("origin called %d times, want 2 (Peek never loads)", n)
	}
}
