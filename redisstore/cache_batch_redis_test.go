package redisstore_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/redis/go-redis/v9"
)

// roundTrips is a redis.Hook that counts round trips: every command sent on
// its own and every pipeline (connection set-up left out), with the names
// of the commands they carried.
type roundTrips struct {
	mu   sync.Mutex
	n    int
	cmds []string
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name != "hello" && name != "client" {
			h.mu.Lock()
			h.n++
			h.cmds = append(h.cmds, name)
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if name := cmds[0].Name(); name != "hello" && name != "client" {
			h.mu.Lock()
			h.n++
			h.cmds = append(h.cmds, "pipeline:"+name)
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

func (h *roundTrips) reset() (int, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, cmds := h.n, h.cmds
	h.n, h.cmds = 0, nil
	return n, cmds
}

func TestRedisBatchOfSharedHitsIsOneRoundTrip(t *testing.T) {
	prefix := uniquePrefix(t)
	keys := keyRange("p:", 100)
	o := &batchOrigin{}
	a := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: newRedisStore(t, newRedisClient(t), prefix)})
	for _, r := range a.FetchMany(context.Background(), keys, o.load) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}

	hook := &roundTrips{}
	b := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: newRedisStore(t, newRedisClient(t, hook), prefix)})
	hook.reset()
	rs := b.FetchMany(context.Background(), keys, o.load)
	n, cmds := hook.reset()
	if n != 1 || !slices.Equal(cmds, []string{"pipeline:getrange"}) {
		t.Fatalf("100 shared hits took %d round trips (%v), want one pipeline of GETRANGEs", n, cmds)
	}
	for i, r := range rs {
		if r.Outcome != flightcache.OutcomeHitShared || r.Value.ID != keys[i] {
			t.Fatalf("key %d = %+v", i, r)
		}
	}
	if len(o.callKeys()) != 1 {
		t.Fatalf("%d loader calls, want only a's", len(o.callKeys()))
	}
	rs = b.FetchMany(context.Background(), keys, o.load)
	if n, _ := hook.reset(); n != 0 || rs[99].Outcome != flightcache.OutcomeHitLocal {
		t.Fatalf("after the shared hits, %d round trips and %v: the local tier was not filled", n, rs[99].Outcome)
	}
}

func TestRedisColdBatchReadsChecksAndWritesBackInThreeRoundTrips(t *testing.T) {
	hook := &roundTrips{}
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: newRedisStore(t, newRedisClient(t, hook), uniquePrefix(t))})
	hook.reset()
	o := &batchOrigin{missing: map[string]bool{"p:7": true}}
	rs := c.FetchMany(context.Background(), keyRange("p:", 50), o.load)
	n, cmds := hook.reset()
	if n != 3 || !slices.Equal(cmds, []string{"pipeline:getrange", "pipeline:getrange", "pipeline:set"}) {
		t.Fatalf("a cold batch took %d round trips (%v), want the read, the double-check's read, one SET pipeline", n, cmds)
	}
	if rs[0].Outcome != flightcache.OutcomeLoaded || !errors.Is(rs[7].Err, flightcache.ErrNotFound) {
		t.Fatalf("outcomes = %v", outcomes(rs))
	}
}

func TestRedisBatchTreatsACorruptEntryAsAMissOfThatKeyOnly(t *testing.T) {
	prefix := uniquePrefix(t)
	client := newRedisClient(t)
	o := &batchOrigin{}
	a := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: newRedisStore(t, client, prefix)})
	a.FetchMany(context.Background(), []string{"a", "b", "c"}, o.load)
	if err := client.Set(context.Background(), prefix+"b", "garbage", 0).Err(); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	b := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: newRedisStore(t, client, prefix), Observer: rec})
	rs := b.FetchMany(context.Background(), []string{"a", "b", "c"}, o.load)
	want := []flightcache.Outcome{flightcache.OutcomeHitShared, flightcache.OutcomeLoaded, flightcache.OutcomeHitShared}
	if got := outcomes(rs); !slices.Equal(got, want) {
		t.Fatalf("outcomes = %v, want %v", got, want)
	}
	if calls := o.callKeys(); len(calls) != 2 || !slices.Equal(calls[1], []string{"b"}) {
		t.Fatalf("loader calls = %v, want the corrupt key reloaded alone", calls)
	}
	if rec.count(driver.EventReadFailed) == 0 || !errors.Is(rec.errs[0], redisstore.ErrCorrupt) {
		t.Fatalf("the corrupt entry was not reported: %v", rec.errs)
	}
	// The write-back replaced the corrupt payload.
	if _, ok, err := newRedisStore(t, client, prefix).Get(context.Background(), "b"); !ok || err != nil {
		t.Fatalf("after the batch, shared b = %v, %v", ok, err)
	}
}
