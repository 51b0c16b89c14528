package redisstore

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// copyRaw copies the bytes stored under one Redis key to another, as an
// operator's script, a restore or an attacker with write access might.
func copyRaw(t *testing.T, s *Store, from, to string) {
	t.Helper()
	c := s.client
	ctx := context.Background()
	raw, err := c.Get(ctx, from).Bytes()
	if err != nil {
		t.Fatalf("raw GET %s: %v", from, err)
	}
	if err := c.Set(ctx, to, raw, time.Minute).Err(); err != nil {
		t.Fatalf("raw SET: %v", err)
	}
}

func TestEntryCopiedUnderAnotherKeyIsNeverServed(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	ctx := context.Background()
	if err := s.Set(ctx, "tenant-a:invoice:1", liveEntry("tenant A's invoice")); err != nil {
		t.Fatal(err)
	}
	copyRaw(t, s, s.Prefix()+"tenant-a:invoice:1", s.Prefix()+"tenant-b:invoice:1")

	got, ok, err := s.Get(ctx, "tenant-b:invoice:1")
	if ok || got.Value != nil {
		t.Fatalf("Get for tenant B served %q", got.Value)
	}
	if !errors.Is(err, ErrKeyMismatch) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get for tenant B: err = %v, want ErrKeyMismatch", err)
	}
	// The original is untouched and still served to its own key.
	if got, ok, err := s.Get(ctx, "tenant-a:invoice:1"); !ok || err != nil || string(got.Value) != "tenant A's invoice" {
		t.Fatalf("Get for tenant A = %q, %v, %v", got.Value, ok, err)
	}
}

// Two stores on one Redis with different prefixes (two caches, or two
// versions of a value type) never accept each other's entries, even under the
// same key.
func TestEntryCopiedToAnotherPrefixIsNeverServed(t *testing.T) {
	a, c := newTestStore(t, Options{})
	b, err := New(c, Options{Prefix: testPrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := a.Set(ctx, "user:42", liveEntry("v1 layout")); err != nil {
		t.Fatal(err)
	}
	copyRaw(t, a, a.Prefix()+"user:42", b.Prefix()+"user:42")
	if got, ok, err := b.Get(ctx, "user:42"); ok || !errors.Is(err, ErrKeyMismatch) {
		t.Fatalf("Get under the other prefix = %q, %v, %v; want ErrKeyMismatch", got.Value, ok, err)
	}
}

// Through a Cache whose only tier is Redis: the copied entry is a miss, so
// tenant B's Get runs B's loader and gets B's value.
func TestCacheLoadsInsteadOfServingAnEntryCopiedFromAnotherKey(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	c, err := flightcache.New(flightcache.Options[string]{Name: "keybinding", Shared: s, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	var loads atomic.Int32
	load := func(v string) flightcache.LoadFunc[string] {
		return func(context.Context) (string, error) {
			loads.Add(1)
			return v, nil
		}
	}
	if v, err := c.Get(ctx, "tenant-a:invoice:1", load("A")); err != nil || v != "A" {
		t.Fatalf("Get A = %q, %v", v, err)
	}
	copyRaw(t, s, s.Prefix()+"tenant-a:invoice:1", s.Prefix()+"tenant-b:invoice:1")

	v, err := c.Get(ctx, "tenant-b:invoice:1", load("B"))
	if err != nil || v != "B" {
		t.Fatalf("Get B = %q, %v; want B's own value from its loader", v, err)
	}
	if n := loads.Load(); n != 2 {
		t.Fatalf("loader ran %d times, want 2 (A, then B despite the copied entry)", n)
	}
}

// An envelope of a version before the key hash cannot be verified, so it is
// a miss; but it is what an upgrade leaves under every key, so it is not
// reported as a failure either.
func TestEnvelopeWithoutKeyHashIsAPlainMiss(t *testing.T) {
	s, c := newTestStore(t, Options{})
	ctx := context.Background()
	v3, err := Encode(s.Prefix()+"k", liveEntry("old"))
	if err != nil {
		t.Fatal(err)
	}
	// Version 2 is version 3 without the key hash.
	v2 := append([]byte{envelopeMagic, 0x02}, v3[2:3]...)
	v2 = append(v2, v3[3+keyHashSize:len(v3)-checksumSize]...)
	v2 = reseal(append(v2, 0, 0, 0, 0))
	if err := c.Set(ctx, s.Prefix()+"k", v2, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.Get(ctx, "k"); ok || err != nil {
		t.Fatalf("Get of a version 2 entry = %q, %v, %v; want a plain miss", got.Value, ok, err)
	}
}

func TestMaxKeyLenIsTheRedisLimitLessThePrefix(t *testing.T) {
	s, _ := newTestStore(t, Options{})
	ctx := context.Background()
	var _ driver.KeyLimiter = s
	if got, want := s.MaxKeyLen(), MaxKeyLen-len(s.Prefix()); got != want {
		t.Fatalf("MaxKeyLen = %d, want %d", got, want)
	}
	longest := strings.Repeat("k", s.MaxKeyLen())
	if err := s.Set(ctx, longest, liveEntry("v")); err != nil {
		t.Fatalf("Set of a key of MaxKeyLen bytes: %v", err)
	}
	if _, ok, err := s.Get(ctx, longest); !ok || err != nil {
		t.Fatalf("Get of a key of MaxKeyLen bytes = %v, %v", ok, err)
	}
	if err := s.Set(ctx, longest+"k", liveEntry("v")); !errors.Is(err, flightcache.ErrInvalidKey) {
		t.Fatalf("Set of a key one byte over MaxKeyLen: %v, want ErrInvalidKey", err)
	}
}

// Keys can carry tenant ids and personal data, and the Cache logs store
// errors and puts them in events: no error the Store returns may contain the
// key, with or without its prefix.
func TestErrorsNeverContainTheKey(t *testing.T) {
	s, c := newTestStore(t, Options{MaxPayload: 128})
	ctx := context.Background()
	const key = "tenant-7:user:ada.lovelace@example.com"
	rk := s.Prefix() + key

	var errs []error
	record := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		errs = append(errs, err)
	}
	record("too large", s.Set(ctx, key, liveEntry(strings.Repeat("x", 200))))
	bad := liveEntry("v")
	bad.FreshUntil = bad.StaleUntil.Add(time.Second)
	record("invalid entry", s.Set(ctx, key, bad))
	record("key too long", s.Set(ctx, key+strings.Repeat("!", MaxKeyLen), liveEntry("v")))

	if err := c.Set(ctx, rk, `{"name":"Ada"}`, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.Get(ctx, key)
	record("corrupt", err)

	if err := s.Set(ctx, "other", liveEntry("v")); err != nil {
		t.Fatal(err)
	}
	copyRaw(t, s, s.Prefix()+"other", rk)
	_, _, err = s.Get(ctx, key)
	record("key mismatch", err)

	// A real Redis error: GET of a key that holds a list.
	if err := c.Del(ctx, rk).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.RPush(ctx, rk, "x").Err(); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Get(ctx, key)
	record("Redis WRONGTYPE", err)

	for _, err := range errs {
		for _, leak := range []string{key, "ada.lovelace", "tenant-7"} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("error %q contains %q", err, leak)
			}
		}
	}
	// Where an error names its key, it does so by a handle an operator can
	// recompute from a suspected key.
	var pe *PayloadTooLargeError
	if !errors.As(errs[0], &pe) || pe.KeyHandle != keyHandle(rk) || len(pe.KeyHandle) != 8 {
		t.Fatalf("PayloadTooLargeError handle = %+v, want the 8-hex handle %s", pe, keyHandle(rk))
	}
}

// The handle is the documented one: the first 8 hex digits of SHA-256 of the
// Redis key, so `printf %s KEY | sha256sum | cut -c1-8` finds it.
func TestKeyHandleIsTheSHA256PrefixOfTheRedisKey(t *testing.T) {
	// printf %s 'flightcache:user:42' | sha256sum
	if got, want := keyHandle("flightcache:user:42"), "4ff9ae71"; got != want {
		t.Fatalf("keyHandle = %s, want %s", got, want)
	}
	if keyHash("flightcache:user:42") == keyHash("flightcache:user:43") {
		t.Fatal("neighbouring keys share a hash")
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], keyHash("flightcache:user:42"))
	if got := keyHandle("flightcache:user:42"); got != hex.EncodeToString(b[:4]) {
		t.Fatalf("the handle %s is not the start of the envelope's key hash %x", got, b)
	}
}

// Every error about one entry (corrupt bytes, another key's entry, a value
// too large, an entry that cannot be encoded) matches
// driver.ErrEntryRejected, so the Cache never counts it as a failure of
// Redis for its breaker; each keeps matching its own sentinel too.
func TestEntryLevelErrorsMatchErrEntryRejected(t *testing.T) {
	s, c := newTestStore(t, Options{MaxPayload: 128})
	ctx := context.Background()
	if err := c.Set(ctx, s.Prefix()+"corrupt", "not an envelope", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(ctx, "mine", liveEntry("v")); err != nil {
		t.Fatal(err)
	}
	copyRaw(t, s, s.Prefix()+"mine", s.Prefix()+"theirs")

	_, _, corrupt := s.Get(ctx, "corrupt")
	_, _, foreign := s.Get(ctx, "theirs")
	tooLarge := s.Set(ctx, "big", liveEntry(strings.Repeat("x", 200)))
	invalid := s.Set(ctx, "bad", driver.Entry{Value: []byte("v")}) // zero StaleUntil
	for _, tc := range []struct {
		name string
		err  error
		own  error
	}{
		{"corrupt", corrupt, ErrCorrupt},
		{"another key's entry", foreign, ErrKeyMismatch},
		{"too large", tooLarge, ErrPayloadTooLarge},
		{"invalid entry", invalid, ErrInvalidEntry},
	} {
		if !errors.Is(tc.err, driver.ErrEntryRejected) || !errors.Is(tc.err, tc.own) {
			t.Errorf("%s: err = %v; want it to match ErrEntryRejected and %v", tc.name, tc.err, tc.own)
		}
	}
	// A sentinel of its own is not matched by another's error.
	if errors.Is(corrupt, ErrPayloadTooLarge) || errors.Is(tooLarge, ErrCorrupt) {
		t.Fatalf("sentinels cross-match: %v / %v", corrupt, tooLarge)
	}
}
