package redislease

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
)

// Read-or-claim (driver.ClaimRequest.Read): one script reads the value or
// takes the lease. A key that holds a value is answered with it and no
// lease; an empty one is claimed; garbage under the value key is no
// answer, so the key is claimed and the Cache reads the tier itself.
func TestReadOrClaimAnswersWithTheValueOrTheLease(t *testing.T) {
	addr, prefix := sharedRedis(t)
	c := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	ctx := context.Background()

	// Empty: the lease, and Read set (the tier held nothing).
	cl, err := c.Claim(ctx, "empty", driver.ClaimRequest{Wait: time.Second, Read: true})
	if err != nil || cl.Lease == nil || !cl.Read || cl.Current != nil {
		t.Fatalf("Claim(Read) of an empty key = %+v, %v; want a lease, Read, no entry", cl, err)
	}
	if _, err := cl.Lease.Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}

	// A value: handed back, no lease taken.
	if err := c.store.Set(ctx, "full", entryOf("v1")); err != nil {
		t.Fatal(err)
	}
	want, _, err := c.store.Get(ctx, "full")
	if err != nil {
		t.Fatal(err)
	}
	cl, err = c.Claim(ctx, "full", driver.ClaimRequest{Wait: time.Second, Read: true})
	if err != nil || cl.Lease != nil || !cl.Read || cl.Done != 0 || cl.Current == nil || !reflect.DeepEqual(*cl.Current, want) {
		t.Fatalf("Claim(Read) of a key holding %q = %+v, %v; want that entry and no lease", want.Value, cl, err)
	}
	k, err := c.keysFor("full")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.client.Exists(ctx, k.lease).Result(); err != nil || n != 0 {
		t.Fatalf("a read-or-claim that found a value left a lease behind (%d, %v)", n, err)
	}
	// Without Read the same key is claimed: the caller judged the value
	// too old to serve.
	cl, err = c.Claim(ctx, "full", driver.ClaimRequest{Wait: time.Second})
	if err != nil || cl.Lease == nil || cl.Read {
		t.Fatalf("Claim without Read of a key holding a value = %+v, %v; want the lease", cl, err)
	}
	if _, err := cl.Lease.Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}

	// Garbage: the lease, with Read unset, so the Cache reads the tier
	// (and reports what it finds there).
	gk, err := c.keysFor("garbage")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.client.Set(ctx, gk.value, "not an envelope", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	cl, err = c.Claim(ctx, "garbage", driver.ClaimRequest{Wait: time.Second, Read: true})
	if err != nil || cl.Lease == nil || cl.Read || cl.Current != nil {
		t.Fatalf("Claim(Read) of a key holding garbage = %+v, %v; want the lease and Read unset", cl, err)
	}
	if _, err := cl.Lease.Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if s, err := c.client.Get(ctx, gk.value).Result(); err != nil || s != "not an envelope" {
		t.Fatalf("the garbage under the value key was changed by a Claim: %q, %v", s, err)
	}
}

// A follower woken by a completion gets the value the leader stored in the
// answer of the same script that reports the completion.
func TestReadOrClaimWakesAFollowerWithTheStoredValue(t *testing.T) {
	addr, prefix := sharedRedis(t)
	leader := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	follower := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	ctx := context.Background()

	lc, err := leader.Claim(ctx, "k", driver.ClaimRequest{Wait: time.Second, Read: true})
	if err != nil || lc.Lease == nil {
		t.Fatalf("leader's Claim = %+v, %v", lc, err)
	}
	e := entryOf("loaded")
	if done, err := lc.Lease.Complete(ctx, &e); err != nil || !done.Written {
		t.Fatalf("Complete = %+v, %v", done, err)
	}
	want, _, err := leader.store.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// The done marker is newer than After 0: the completion, with its
	// value. It was there at the Claim's first look, which saw no lease:
	// Waited 0, no wake-up (driver.Grant.Waited).
	cl, err := follower.Claim(ctx, "k", driver.ClaimRequest{Wait: time.Second, Read: true})
	if err != nil || cl.Lease != nil || cl.Done != lc.Lease.Token() || !cl.Read || cl.Current == nil || !reflect.DeepEqual(*cl.Current, want) || cl.Waited != 0 {
		t.Fatalf("follower's Claim = %+v, %v; want completion %d with the stored entry, Waited 0", cl, err, lc.Lease.Token())
	}
	// Without Read, the completion alone.
	cl, err = follower.Claim(ctx, "k", driver.ClaimRequest{Wait: time.Second})
	if err != nil || cl.Done != lc.Lease.Token() || cl.Read || cl.Current != nil {
		t.Fatalf("follower's Claim without Read = %+v, %v; want completion %d alone", cl, err, lc.Lease.Token())
	}
	// A follower that found the lease held and waited for its completion
	// reports how long it waited.
	lc, err = leader.Claim(ctx, "k2", driver.ClaimRequest{Wait: time.Second, Read: true})
	if err != nil || lc.Lease == nil {
		t.Fatalf("leader's Claim of k2 = %+v, %v", lc, err)
	}
	got := make(chan driver.Grant, 1)
	go func() {
		g, err := follower.Claim(ctx, "k2", driver.ClaimRequest{Wait: time.Minute, Read: true})
		if err != nil {
			t.Errorf("waiting follower's Claim: %v", err)
		}
		got <- g
	}()
	// Complete only once the follower waits on the lease: its
	// subscription is the observable sign.
	k2, err := leader.keysFor("k2")
	if err != nil {
		t.Fatal(err)
	}
	for {
		n, err := leader.client.PubSubNumSub(ctx, k2.channel).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n[k2.channel] > 0 {
			break
		}
		select {
		case g := <-got:
			t.Fatalf("the follower answered before the lease completed: %+v", g)
		case <-time.After(time.Millisecond):
		}
	}
	if _, err := lc.Lease.Complete(ctx, &e); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g.Done != lc.Lease.Token() || g.Waited <= 0 {
		t.Fatalf("waiting follower's Claim = %+v; want completion %d and Waited > 0", g, lc.Lease.Token())
	}
}
