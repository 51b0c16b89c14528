package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/redis/go-redis/v9"
)

// batchCounter records the data commands a client sends, pipelined or not,
// and how many pipelines carried them (connection set-up is left out).
type batchCounter struct {
	commandCounter
}

func (h *batchCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		if n := cmds[0].Name(); n != "hello" && n != "client" && n != "auth" {
			h.pipelines++
			for _, c := range cmds {
				h.cmds = append(h.cmds, c.Name())
			}
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *batchCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n != "hello" && n != "client" {
			h.mu.Lock()
			h.cmds = append(h.cmds, n)
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func TestGetManyReadsAPartlyMissingBatchInOnePipelineOfBoundedReads(t *testing.T) {
	counter := &batchCounter{}
	s, _ := newTestStore(t, Options{}, counter)
	ctx := context.Background()
	var keys []string
	for i := range 10 {
		keys = append(keys, fmt.Sprintf("k%d", i))
		if i%3 != 0 { // k0, k3, k6, k9 stay missing
			if err := s.Set(ctx, keys[i], liveEntry(fmt.Sprintf("v%d", i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	counter.reset()
	got, err := s.GetMany(ctx, keys)
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	if names, want := counter.names(), append(slices.Repeat([]string{"getrange"}, len(keys)), "1 pipeline(s)"); !slices.Equal(names, want) {
		t.Fatalf("GetMany sent %v, want %v", names, want)
	}
	for i, l := range got {
		want := i%3 != 0
		if l.Err != nil || l.Found != want {
			t.Fatalf("key %d: found %v, err %v; want found %v", i, l.Found, l.Err, want)
		}
		if want && string(l.Entry.Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("key %d: value %q", i, l.Entry.Value)
		}
	}
}

func TestGetManyReportsACorruptEntryAsThatKeysMissOnly(t *testing.T) {
	s, client := newTestStore(t, Options{})
	ctx := context.Background()
	for _, k := range []string{"a", "c"} {
		if err := s.Set(ctx, k, liveEntry("good-"+k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.Set(ctx, s.Prefix()+"b", "not an envelope", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetMany(ctx, []string{"a", "b", "c"})
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	if !errors.Is(got[1].Err, ErrCorrupt) || got[1].Found {
		t.Fatalf("corrupt key: found %v, err %v; want a miss with ErrCorrupt", got[1].Found, got[1].Err)
	}
	for _, i := range []int{0, 2} {
		if got[i].Err != nil || !got[i].Found || !strings.HasPrefix(string(got[i].Entry.Value), "good-") {
			t.Fatalf("good key %d next to a corrupt one: %+v", i, got[i])
		}
	}
	// Get and GetMany refuse the same payloads.
	if _, _, err := s.Get(ctx, "b"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of the corrupt key: %v", err)
	}
}

func TestGetManyRefusesAnotherKeysEntryLikeGet(t *testing.T) {
	s, client := newTestStore(t, Options{})
	ctx := context.Background()
	if err := s.Set(ctx, "a", liveEntry("for-a")); err != nil {
		t.Fatal(err)
	}
	raw, err := client.Get(ctx, s.Prefix()+"a").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Set(ctx, s.Prefix()+"b", raw, time.Minute).Err(); err != nil { // a's entry under b
		t.Fatal(err)
	}
	got, err := s.GetMany(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].Found || got[1].Found || !errors.Is(got[1].Err, ErrKeyMismatch) {
		t.Fatalf("GetMany = %+v; want a found and b refused as another key's entry", got)
	}
}

func TestGetManyRefusesAnInvalidKeyWithoutFailingTheOthers(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	ctx := context.Background()
	if err := s.Set(ctx, "ok", liveEntry("v")); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetMany(ctx, []string{"", "ok", strings.Repeat("x", MaxKeyLen)})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(got[0].Err, flightcache.ErrInvalidKey) || !errors.Is(got[2].Err, flightcache.ErrInvalidKey) || !got[1].Found {
		t.Fatalf("GetMany = %+v", got)
	}
}

func TestSetManyWritesEveryEntryInOnePipeline(t *testing.T) {
	counter := &batchCounter{}
	s, _ := newTestStore(t, Options{MaxPayload: 256}, counter)
	ctx := context.Background()
	expired := liveEntry("gone")
	expired.FreshUntil, expired.StaleUntil = time.Now().Add(-time.Minute), time.Now().Add(-time.Second)
	keys := []string{"a", "b", "big", "old"}
	entries := []driver.Entry{liveEntry("va"), liveEntry("vb"), liveEntry(strings.Repeat("x", 300)), expired}
	counter.reset()
	errs := s.SetMany(ctx, keys, entries)
	if len(errs) != len(keys) || errs[0] != nil || errs[1] != nil || errs[3] != nil || !errors.Is(errs[2], ErrPayloadTooLarge) {
		t.Fatalf("SetMany = %v, want only the oversized entry refused", errs)
	}
	if names := counter.names(); !slices.Equal(names, []string{"set", "set", "del", "1 pipeline(s)"}) {
		t.Fatalf("SetMany sent %v, want SET, SET, DEL in one pipeline", names)
	}
	got, err := s.GetMany(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].Found || string(got[1].Entry.Value) != "vb" || got[2].Found || got[3].Found {
		t.Fatalf("after SetMany, GetMany = %+v", got)
	}
	if errs := s.SetMany(ctx, keys[:2], entries[:2]); errs != nil {
		t.Fatalf("SetMany of good entries = %v, want nil", errs)
	}
}

// A Ring (like a Cluster) may hold the keys of one batch on different
// nodes, so GetMany pipelines GETs there instead of sending one MGET.
func TestGetManyPipelinesBoundedReadsOnAShardedClient(t *testing.T) {
	newRedisClient(t) // skips (or fails under CI) without a server
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"only": redisAddr}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { ring.Close() })
	counter := &batchCounter{}
	ring.AddHook(counter)
	s, err := New(ring, Options{Prefix: testPrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if errs := s.SetMany(ctx, []string{"a", "b"}, []driver.Entry{liveEntry("va"), liveEntry("vb")}); errs != nil {
		t.Fatal(errs)
	}
	counter.reset()
	got, err := s.GetMany(ctx, []string{"a", "missing", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].Found || got[1].Found || got[1].Err != nil || string(got[2].Entry.Value) != "vb" {
		t.Fatalf("GetMany = %+v", got)
	}
	if names := counter.names(); slices.Contains(names, "mget") || !slices.Contains(names, "getrange") {
		t.Fatalf("GetMany on a Ring sent %v, want pipelined GETRANGEs and no MGET", names)
	}
}

func TestGetManyReturnsAFailedRoundTripAsOneError(t *testing.T) {
	hook := &faultHook{}
	s, _ := newTestStore(t, Options{}, hook)
	hook.set(true, false, false)
	if _, err := s.GetMany(context.Background(), []string{"a", "b"}); err == nil {
		t.Fatal("GetMany through a failing connection returned no error")
	}
}

// A batch of 10,000 keys is read in one round trip of bounded reads, one
// command per key: never one MGET, whose reply Redis would build whole,
// holding its other clients back, and which would copy a planted value
// whole; every key still gets its own answer.
func TestGetManyReadsALargeBatchInOnePipelineOfBoundedReads(t *testing.T) {
	hook := &batchCounter{}
	s, _ := newTestStore(t, Options{}, hook)
	ctx := context.Background()
	const n = 10000
	keys := make([]string, n)
	entries := make([]driver.Entry, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
		entries[i] = liveEntry(fmt.Sprintf("v%d", i))
	}
	// Every third key stays missing.
	var stored []string
	var storedEntries []driver.Entry
	for i := range keys {
		if i%3 != 0 {
			stored, storedEntries = append(stored, keys[i]), append(storedEntries, entries[i])
		}
	}
	if errs := s.SetMany(ctx, stored, storedEntries); errs != nil {
		t.Fatalf("SetMany: %v", errors.Join(errs...))
	}
	hook.reset()
	got, err := s.GetMany(ctx, keys)
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	if names, want := hook.names(), append(slices.Repeat([]string{"getrange"}, n), "1 pipeline(s)"); !slices.Equal(names, want) {
		t.Fatalf("GetMany sent %d commands (%v…); want %d GETRANGEs in one pipeline", len(names), names[max(0, len(names)-3):], n)
	}
	for i, l := range got {
		want := i%3 != 0
		if l.Err != nil || l.Found != want {
			t.Fatalf("key %d: found %v, err %v; want found %v", i, l.Found, l.Err, want)
		}
		if want && string(l.Entry.Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("key %d: value %q, want v%d", i, l.Entry.Value, i)
		}
	}
}
