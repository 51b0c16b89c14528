package redislease

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/redisstore"
)

// With a Store that authenticates entries (redisstore.Options.EntryKeys),
// the fenced write stores an authenticated entry, and a refused write
// hands back the entry that refused it only if it is authenticated: an
// entry forged in Redis (here by a Store without the key) is not handed
// on, as a Get would not serve it.
func TestFencedWriteAuthenticatesWithTheStoresEntryKey(t *testing.T) {
	addr, prefix := sharedRedis(t)
	client := newClient(t, addr)
	key := bytes.Repeat([]byte{0x4b}, 32)
	store, err := redisstore.New(client, redisstore.Options{Prefix: prefix, HashTag: true, EntryKeys: [][]byte{key}})
	if err != nil {
		t.Fatal(err)
	}
	forger, err := redisstore.New(client, redisstore.Options{Prefix: prefix, HashTag: true})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Timeout: 5 * time.Second}
	quietBus(&opts)
	ctx := context.Background()
	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := New(nctx, client, store, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	var after uint64 // the last completion seen, so that Claim grants a lease
	claim := func() driver.Lease {
		t.Helper()
		cl, err := c.Claim(ctx, "k", driver.ClaimRequest{After: after, Wait: time.Second})
		if err != nil || cl.Lease == nil {
			t.Fatalf("Claim = %+v, %v", cl, err)
		}
		return cl.Lease
	}

	// A current lease's write is authenticated: the keyed Store reads it,
	// the one without the key refuses it.
	l := claim()
	e := entryOf("loaded")
	if done, err := l.Complete(ctx, &e); err != nil || !done.Written {
		t.Fatalf("Complete = %+v, %v", done, err)
	}
	after = l.Token()
	if got, ok, err := store.Get(ctx, "k"); err != nil || !ok || string(got.Value) != "loaded" {
		t.Fatalf("the fenced write read back with the key: %q, %v, %v", got.Value, ok, err)
	}
	if _, ok, err := forger.Get(ctx, "k"); ok || err == nil {
		t.Fatalf("a Store without the key read the authenticated entry: %v, %v", ok, err)
	}

	for _, forged := range []bool{true, false} {
		l := claim()
		// While the load runs, the value key gets a newer entry, then a
		// fence: forged (no MAC) or genuine (a Set through the keyed Store).
		w := store
		if forged {
			w = forger
		}
		if err := w.Set(ctx, "k", entryOf("newer")); err != nil {
			t.Fatal(err)
		}
		if err := c.Invalidate(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		old := entryOf("old")
		done, err := l.Complete(ctx, &old)
		if err != nil || done.Written {
			t.Fatalf("forged %v: Complete of a fenced load = %+v, %v; want refused", forged, done, err)
		}
		switch {
		case forged && done.Current != nil:
			t.Fatalf("a forged entry was handed back: %q", done.Current.Value)
		case !forged && (done.Current == nil || string(done.Current.Value) != "newer"):
			t.Fatalf("the genuine newer entry was not handed back: %+v", done.Current)
		}
	}
}
