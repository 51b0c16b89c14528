package redislease

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
)

// A key's token key lives LeaseTTL past its last use, not an hour: it
// costs Redis memory for every key ever loaded otherwise.
func TestTokenKeyLivesNoLongerThanTheLease(t *testing.T) {
	addr, prefix := sharedRedis(t)
	c := newBusCoordinator(t, newClient(t, addr), prefix, Options{LeaseTTL: 2 * time.Second})
	ctx := context.Background()
	k, err := c.keysFor("k")
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		ttl, err := c.client.PTTL(ctx, k.token).Result()
		if err != nil || ttl <= 0 || ttl > c.leaseTTL {
			t.Fatalf("after %s the token key's PTTL is %v, %v; want at most the lease TTL %v", what, ttl, err, c.leaseTTL)
		}
	}
	cl, err := c.Claim(ctx, "k", driver.ClaimRequest{Wait: time.Second})
	if err != nil || cl.Lease == nil {
		t.Fatalf("Claim = %+v, %v", cl, err)
	}
	check("acquire")
	if done, err := cl.Lease.Complete(ctx, nil); err != nil || !done.Written {
		t.Fatalf("Complete = %+v, %v", done, err)
	}
	check("complete")
	if err := c.Invalidate(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	check("invalidate")
}

// A load that outlasts many lease TTLs keeps its token key alive with its
// heartbeat, so its fenced write still lands.
func TestALoadLongerThanTheLeaseTTLStillWrites(t *testing.T) {
	addr, prefix := sharedRedis(t)
	// Two seconds leave each heartbeat (a third of it) slack on a busy
	// machine: with 300ms, and once with 1s during a cold make test on 2
	// cores, late heartbeats lost the lease, which is not the fault this
	// test is about.
	const ttl = 2 * time.Second
	c := newBusCoordinator(t, newClient(t, addr), prefix, Options{LeaseTTL: ttl})
	ctx := context.Background()
	cl, err := c.Claim(ctx, "k", driver.ClaimRequest{Wait: time.Second})
	if err != nil || cl.Lease == nil {
		t.Fatalf("Claim = %+v, %v", cl, err)
	}
	// Two and a half TTLs: without the heartbeat's extension the token key
	// would have expired twice over.
	const hold = 5 * ttl / 2
	select {
	case <-cl.Lease.Lost():
		t.Fatal("the lease was lost while its heartbeat ran")
	case <-time.After(hold):
	}
	e := entryOf("v")
	if done, err := cl.Lease.Complete(ctx, &e); err != nil || !done.Written {
		t.Fatalf("Complete after %v = %+v, %v; want the write to land", hold, done, err)
	}
}

// Tokens keep growing across the token key's expiry, after a completed
// load and after an Invalidate: the next one is seeded from the Redis
// clock. A leader whose token key expired under it (an Invalidate's
// token, which no heartbeat extends, lived out) has its write refused.
func TestTokensKeepGrowingAcrossTheTokenKeysExpiry(t *testing.T) {
	addr, prefix := sharedRedis(t)
	const ttl = 150 * time.Millisecond
	c := newBusCoordinator(t, newClient(t, addr), prefix, Options{LeaseTTL: ttl})
	ctx := context.Background()
	k, err := c.keysFor("k")
	if err != nil {
		t.Fatal(err)
	}
	expired := func() {
		t.Helper()
		eventually(t, 10*time.Second, "the token key expired", func() bool {
			n, err := c.client.Exists(ctx, k.token).Result()
			return err == nil && n == 0
		})
	}
	// after is the completion already seen: the first's "done" marker may
	// outlive its token key, and must not be reported again.
	var after uint64
	claim := func() driver.Lease {
		t.Helper()
		cl, err := c.Claim(ctx, "k", driver.ClaimRequest{After: after, Wait: time.Second})
		if err != nil || cl.Lease == nil {
			t.Fatalf("Claim = %+v, %v", cl, err)
		}
		return cl.Lease
	}
	first := claim()
	if done, err := first.Complete(ctx, nil); err != nil || !done.Written {
		t.Fatalf("Complete = %+v, %v", done, err)
	}
	after = first.Token()
	expired()
	second := claim()
	if second.Token() <= first.Token() {
		t.Fatalf("token after the token key expired %d, want above %d", second.Token(), first.Token())
	}
	// An Invalidate during second's load: its token is not second's, so
	// second's heartbeat leaves it to expire; second's write is refused
	// all the same.
	if err := c.Invalidate(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	fenced, err := c.Token(ctx, "k")
	if err != nil || fenced <= second.Token() {
		t.Fatalf("Invalidate's token %d, %v; want above %d", fenced, err, second.Token())
	}
	expired()
	e := entryOf("old")
	if done, err := second.Complete(ctx, &e); err != nil || done.Written || done.Current != nil {
		t.Fatalf("Complete of a load an Invalidate fenced = %+v, %v; want refused, with no entry to hand back", done, err)
	}
	if n, err := c.client.Exists(ctx, k.value).Result(); err != nil || n != 0 {
		t.Fatalf("the fenced load's value was stored (%d, %v)", n, err)
	}
	third := claim()
	defer third.Complete(ctx, nil)
	if third.Token() <= fenced {
		t.Fatalf("token after the Invalidate's expired %d, want above %d", third.Token(), fenced)
	}
}

// entryOf is an entry of value, fresh for a minute.
// A refused Complete hands back the entry that refused it, read in the
// same script: exactly what a Get of the key returns at that moment. A
// value key holding garbage hands back nothing, and is no error: the
// Cache then reads the tier itself, through the store's checks.
func TestRefusedCompleteHandsBackTheEntryThatRefusedIt(t *testing.T) {
	addr, prefix := sharedRedis(t)
	c := newBusCoordinator(t, newClient(t, addr), prefix, Options{})
	ctx := context.Background()
	k, err := c.keysFor("k")
	if err != nil {
		t.Fatal(err)
	}
	for _, garbage := range []bool{false, true} {
		cl, err := c.Claim(ctx, "k", driver.ClaimRequest{Wait: time.Second})
		if err != nil || cl.Lease == nil {
			t.Fatalf("Claim = %+v, %v", cl, err)
		}
		// A Set on another instance while the load runs: its write, then
		// its fence.
		if err := c.store.Set(ctx, "k", entryOf("new")); err != nil {
			t.Fatal(err)
		}
		if garbage {
			if err := c.client.Set(ctx, k.value, "not an envelope", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Invalidate(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		old := entryOf("old")
		done, err := cl.Lease.Complete(ctx, &old)
		if err != nil || done.Written {
			t.Fatalf("garbage %v: Complete of a fenced load = %+v, %v; want refused", garbage, done, err)
		}
		if garbage {
			if done.Current != nil {
				t.Fatalf("a value key holding garbage was handed back as %+v", *done.Current)
			}
			continue
		}
		want, ok, err := c.store.Get(ctx, "k")
		if err != nil || !ok || string(want.Value) != "new" {
			t.Fatalf("the stored entry: %q, %v, %v", want.Value, ok, err)
		}
		if done.Current == nil || !reflect.DeepEqual(*done.Current, want) {
			t.Fatalf("Complete handed back %+v, want the stored entry %+v", done.Current, want)
		}
	}
}

func entryOf(value string) driver.Entry {
	now := time.Now()
	return driver.Entry{Value: []byte(value), Meta: driver.Meta{LoadedAt: now, FreshUntil: now.Add(time.Minute), StaleUntil: now.Add(time.Minute)}}
}
