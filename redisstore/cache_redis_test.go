package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/redis/go-redis/v9"
)

// newRedisClient connects to the real Redis the tests need, with
// hooks around the real client. testenv.RequireRedis skips without a
// server, or fails when CI=true.
func newRedisClient(tb testing.TB, hooks ...redis.Hook) *redis.Client {
	tb.Helper()
	client := redis.NewClient(&redis.Options{Addr: testenv.RequireRedis(tb), ContextTimeoutEnabled: true})
	for _, h := range hooks {
		client.AddHook(h)
	}
	tb.Cleanup(func() { client.Close() })
	return client
}

// uniquePrefix gives each test its own key space, so tests run in parallel
// and repeatedly without seeing each other's entries.
func uniquePrefix(tb testing.TB) string {
	var b [6]byte
	rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_").Replace(tb.Name())
	return "fctest:" + name + ":" + hex.EncodeToString(b[:]) + ":"
}

func newRedisStore(tb testing.TB, client redis.UniversalClient, prefix string) *redisstore.Store {
	tb.Helper()
	s, err := redisstore.New(client, redisstore.Options{Prefix: prefix})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		// SCAN, not KEYS: the shared Redis is not blocked while it walks.
		ctx := context.Background()
		iter := client.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			client.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			tb.Errorf("clean up the test's keys: %v", err)
		}
	})
	return s
}

// faultHook counts commands by name and fails the ones it is told to, around
// the real client.
type faultHook struct {
	counts                [2]atomic.Int64 // reads (GETRANGE, GET), SET
	failReads, failWrites atomic.Bool
}

var errInjected = errors.New("injected redis fault")

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "getrange", "get":
			h.counts[0].Add(1)
			if h.failReads.Load() {
				cmd.SetErr(errInjected)
				return errInjected
			}
		case "set":
			h.counts[1].Add(1)
			if h.failWrites.Load() {
				cmd.SetErr(errInjected)
				return errInjected
			}
		}
		return next(ctx, cmd)
	}
}

func (h *faultHook) gets() int64 { return h.counts[0].Load() }

func TestRedisSharedHitFillsLocalTierInOneRoundTrip(t *testing.T) {
	prefix := uniquePrefix(t)
	var hookA, hookB faultHook
	a := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: newRedisStore(t, newRedisClient(t, &hookA), prefix)})
	b := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: newRedisStore(t, newRedisClient(t, &hookB), prefix)})
	var o origin
	wantOutcome(t, mustFetch(t, a, "p:1", o.load("1")).Outcome, flightcache.OutcomeLoaded)

	r := mustFetch(t, b, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeHitShared)
	if r.Value.Name != "p-1" || o.calls.Load() != 1 {
		t.Fatalf("b got %+v after %d loads", r.Value, o.calls.Load())
	}
	if n := hookB.gets(); n != 1 {
		t.Fatalf("the shared hit took %d GETs, want exactly 1 round trip", n)
	}
	wantOutcome(t, mustFetch(t, b, "p:1", o.load("1")).Outcome, flightcache.OutcomeHitLocal)
	if n := hookB.gets(); n != 1 {
		t.Fatalf("the local hit reached Redis (%d GETs): the shared hit did not fill the local tier", n)
	}
}

func TestRedisReadFailureCountsAsMiss(t *testing.T) {
	hook := &faultHook{}
	hook.failReads.Store(true)
	rec := newRecorder()
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: newRedisStore(t, newRedisClient(t, hook), uniquePrefix(t)), Observer: rec})
	var o origin
	r, err := c.Fetch(context.Background(), "p:1", o.load("1"))
	if err != nil || r.Value == nil {
		t.Fatalf("Fetch = %+v, %v; a failed read must be a miss", r, err)
	}
	wantOutcome(t, r.Outcome, flightcache.OutcomeLoaded)
	if n := rec.count(driver.EventReadFailed); n != 2 || !errors.Is(rec.errs[0], errInjected) {
		t.Fatalf("EventReadFailed = %d (%v), want 2 carrying the injected fault", n, rec.errs)
	}
}

func TestRedisWriteFailureStillReturnsValue(t *testing.T) {
	hook := &faultHook{}
	hook.failWrites.Store(true)
	rec := newRecorder()
	c := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: newRedisStore(t, newRedisClient(t, hook), uniquePrefix(t)), Observer: rec})
	var o origin
	r, err := c.Fetch(context.Background(), "p:1", o.load("1"))
	if err != nil || r.Value == nil || r.Value.Name != "p-1" {
		t.Fatalf("Fetch = %+v, %v", r, err)
	}
	wantOutcome(t, r.Outcome, flightcache.OutcomeLoadedWriteFailed)
	if !errors.Is(r.WriteErr, errInjected) || rec.count(driver.EventWriteFailed) != 1 {
		t.Fatalf("WriteErr = %v, EventWriteFailed = %d", r.WriteErr, rec.count(driver.EventWriteFailed))
	}
}

func TestRedisUnreachableKeepsServingFromOrigin(t *testing.T) {
	// A port nothing listens on: every command fails fast with a dial error.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	client := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 100 * time.Millisecond, MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	store, err := redisstore.New(client, redisstore.Options{Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	// No local tier: every Get goes through the dead shared tier.
	c := newCache(t, flightcache.Options[*product]{Shared: store, Observer: rec})
	var o origin
	for i := range 3 {
		r, err := c.Fetch(context.Background(), "p:1", o.load("1"))
		if err != nil || r.Value == nil || r.Value.Price != i+1 {
			t.Fatalf("Get %d with Redis down = %+v, %v; want the origin's value", i+1, r, err)
		}
		wantOutcome(t, r.Outcome, flightcache.OutcomeLoadedWriteFailed)
	}
	if rec.count(driver.EventReadFailed) == 0 || rec.count(driver.EventWriteFailed) != 3 {
		t.Fatalf("read failures %d, write failures %d", rec.count(driver.EventReadFailed), rec.count(driver.EventWriteFailed))
	}
}

func TestRedisTombstoneAndStaleRoundTrip(t *testing.T) {
	prefix := uniquePrefix(t)
	client := newRedisClient(t)
	a := newCache(t, flightcache.Options[*product]{Shared: newRedisStore(t, client, prefix)})
	calls := 0
	missing := func(ctx context.Context) (*product, error) { calls++; return nil, flightcache.ErrNotFound }
	a.Get(context.Background(), "p:gone", missing)
	b := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, nil), Shared: newRedisStore(t, client, prefix)})
	r, err := b.Fetch(context.Background(), "p:gone", missing)
	if !errors.Is(err, flightcache.ErrNotFound) || calls != 1 {
		t.Fatalf("b: %v after %d loads, want the tombstone from Redis", err, calls)
	}
	wantOutcome(t, r.Outcome, flightcache.OutcomeNegativeHit)
}

// The envelope carries LoadedAt, so a value read from Redis by another
// instance reports how long ago it was loaded, not an unknown age. The
// times in Redis are wall-clock times, so the age is right even for an
// instance whose own clock (here a fake one, years ahead) is not the wall
// clock.
func TestRedisHitReportsAgeSinceLoad(t *testing.T) {
	prefix := uniquePrefix(t)
	client := newRedisClient(t)
	store := newRedisStore(t, client, prefix)
	// What another instance wrote 7s ago, on the wall clock.
	loaded := time.Now().Add(-7 * time.Second)
	data, _ := json.Marshal(&product{ID: "1"})
	if err := store.Set(context.Background(), "p:1", driver.Entry{Value: data, Meta: driver.Meta{
		LoadedAt: loaded, FreshUntil: loaded.Add(time.Minute), StaleUntil: loaded.Add(time.Minute),
	}}); err != nil {
		t.Fatal(err)
	}

	clock := newFakeClock()
	b := newCache(t, flightcache.Options[*product]{Local: newLocal[*product](t, clock), Shared: store, Now: clock.Now, TTL: time.Minute})
	var o origin
	before := time.Now()
	r := mustFetch(t, b, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeHitShared)
	if lo, hi := before.Sub(loaded), time.Since(loaded); r.Age < lo || r.Age > hi {
		t.Fatalf("shared hit Age = %v, want in [%v, %v]", r.Age, lo, hi)
	}
	// The local copy keeps LoadedAt too, on the Cache's clock.
	first := r.Age
	clock.Advance(time.Second)
	r = mustFetch(t, b, "p:1", o.load("1"))
	wantOutcome(t, r.Outcome, flightcache.OutcomeHitLocal)
	if want := first + time.Second; r.Age < want || r.Age > want+time.Since(before) {
		t.Fatalf("local hit Age = %v, want %v (plus the real time since)", r.Age, want)
	}
	if o.calls.Load() != 0 {
		t.Fatalf("origin called %d times, want 0", o.calls.Load())
	}
}

// A nil *redisstore.Store as Shared is refused by New with a *ConfigError
// on Shared, not accepted to panic on the first Get.
func TestTypedNilStoreIsAConfigError(t *testing.T) {
	var shared *redisstore.Store
	c, err := flightcache.New(flightcache.Options[*product]{Shared: shared, Logger: quietLogger})
	if c != nil {
		c.Close()
	}
	var ce *flightcache.ConfigError
	if !errors.As(err, &ce) || ce.Field != "Shared" {
		t.Fatalf("New with a nil *redisstore.Store = %v, want a *ConfigError on Shared", err)
	}
}
