package redisstore

import (
	"bytes"
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
	"github.com/redis/go-redis/v9"
)

// Entry keys of the tests: 32 bytes each, as recommended, and one of the
// shortest accepted.
var (
	keyK     = bytes.Repeat([]byte{0x4b}, 32)
	keyOld   = bytes.Repeat([]byte{0x01}, 32)
	keyNew   = bytes.Repeat([]byte{0x02}, 32)
	keyOther = bytes.Repeat([]byte{0x99}, 32)
	keyMin   = bytes.Repeat([]byte{0x10}, MinEntryKeyLen)
)

// storeOn returns a Store on c with prefix and opts (whose Prefix it sets).
func storeOn(t *testing.T, c redis.UniversalClient, prefix string, opts Options) *Store {
	t.Helper()
	opts.Prefix = prefix
	s, err := New(c, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// refusedEverywhere asserts that every read of key (Get, GetMany,
// OpenEnvelope of the raw payload) refuses what Redis holds under it
// with a *CorruptError matching want, ErrCorrupt and ErrEntryRejected,
// and returns no entry.
func refusedEverywhere(t *testing.T, s *Store, key string, want error) {
	t.Helper()
	ctx := context.Background()
	check := func(how string, e driver.Entry, found bool, err error) {
		t.Helper()
		var ce *CorruptError
		if found || e.Value != nil || !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) ||
			!errors.Is(err, driver.ErrEntryRejected) || !errors.Is(err, want) {
			t.Fatalf("%s = %q, %v, %v; want a refusal (*CorruptError matching %v)", how, e.Value, found, err, want)
		}
	}
	e, found, err := s.Get(ctx, key)
	check("Get", e, found, err)
	got, err := s.GetMany(ctx, []string{key})
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	check("GetMany", got[0].Entry, got[0].Found, got[0].Err)
	raw, err := s.client.Get(ctx, s.Prefix()+key).Bytes()
	if err != nil {
		t.Fatalf("raw GET: %v", err)
	}
	e, found, err = s.OpenEnvelope(key, raw)
	check("OpenEnvelope", e, found, err)
}

// servedEverywhere asserts that every read of key returns value.
func servedEverywhere(t *testing.T, s *Store, key, value string) {
	t.Helper()
	ctx := context.Background()
	if e, ok, err := s.Get(ctx, key); !ok || err != nil || string(e.Value) != value {
		t.Fatalf("Get = %q, %v, %v; want %q", e.Value, ok, err, value)
	}
	got, err := s.GetMany(ctx, []string{key})
	if err != nil || !got[0].Found || got[0].Err != nil || string(got[0].Entry.Value) != value {
		t.Fatalf("GetMany = %+v, %v; want %q", got, err, value)
	}
	raw, err := s.client.Get(ctx, s.Prefix()+key).Bytes()
	if err != nil {
		t.Fatalf("raw GET: %v", err)
	}
	if e, ok, err := s.OpenEnvelope(key, raw); !ok || err != nil || string(e.Value) != value {
		t.Fatalf("OpenEnvelope = %q, %v, %v; want %q", e.Value, ok, err, value)
	}
}

func rawSet(t *testing.T, s *Store, key string, payload []byte) {
	t.Helper()
	if err := s.client.Set(context.Background(), s.Prefix()+key, payload, time.Minute).Err(); err != nil {
		t.Fatalf("raw SET: %v", err)
	}
}

func TestEntryWrittenWithAKeyReadsBackThroughEveryRead(t *testing.T) {
	s, _ := newTestStore(t, Options{EntryKeys: [][]byte{keyK}})
	ctx := context.Background()
	if !s.Authenticated() {
		t.Fatal("a Store with EntryKeys says it does not authenticate")
	}
	if err := s.Set(ctx, "one", liveEntry("v-one")); err != nil {
		t.Fatal(err)
	}
	if errs := s.SetMany(ctx, []string{"two"}, []driver.Entry{liveEntry("v-two")}); errs != nil {
		t.Fatalf("SetMany: %v", errs)
	}
	servedEverywhere(t, s, "one", "v-one")
	servedEverywhere(t, s, "two", "v-two")

	// What Envelope hands a fenced writer is what Set writes: the
	// authenticated form, a MAC longer than the unauthenticated one.
	rk, payload, _, err := s.Envelope("one", liveEntry("v-one"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Encode(rk, liveEntry("v-one"))
	if err != nil {
		t.Fatal(err)
	}
	if payload[1] != authVersion || len(payload) != len(plain)+macSize {
		t.Fatalf("Envelope wrote version %d, %d bytes; want version %d, %d bytes", payload[1], len(payload), authVersion, len(plain)+macSize)
	}
	if e, ok, err := s.OpenEnvelope("one", payload); !ok || err != nil || string(e.Value) != "v-one" {
		t.Fatalf("OpenEnvelope of Envelope's payload = %q, %v, %v", e.Value, ok, err)
	}
	// The key is copied at New: changing the caller's slice changes nothing.
	keys := [][]byte{bytes.Clone(keyK)}
	s2 := storeOn(t, s.client, s.Prefix(), Options{EntryKeys: keys})
	keys[0][0] ^= 0xff
	servedEverywhere(t, s2, "one", "v-one")
}

// Someone who can write to Redis but holds no key cannot get an entry
// served: not by altering one byte (with or without fixing the checksum),
// cutting the MAC off, writing without keys or with another key, or
// writing an envelope of a version without a MAC.
func TestEntryThatFailsAuthenticationIsRefused(t *testing.T) {
	s, c := newTestStore(t, Options{EntryKeys: [][]byte{keyK}})
	ctx := context.Background()
	if err := s.Set(ctx, "k", liveEntry("genuine")); err != nil {
		t.Fatal(err)
	}
	good, err := c.Get(ctx, s.Prefix()+"k").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	env := good[:len(good)-macSize] // the envelope without its MAC
	valueAt := bytes.Index(env, []byte("genuine"))

	flippedValue := bytes.Clone(good)
	flippedValue[valueAt] ^= 0x01
	// The same, with the checksum fixed: only the MAC can tell.
	resealedValue := append(reseal(flippedValue[:len(env)]), good[len(env):]...)
	flippedMAC := bytes.Clone(good)
	flippedMAC[len(good)-1] ^= 0x80
	noMAC := bytes.Clone(env)
	// Version 4 with the MAC replaced by zeros.
	zeroMAC := append(bytes.Clone(env), make([]byte, macSize)...)
	// The MAC of another value, from the same key, under the same key.
	otherRK, otherPayload, _, err := s.Envelope("k", liveEntry("forged!"))
	if err != nil || otherRK != s.Prefix()+"k" {
		t.Fatal(err)
	}
	spliced := append(bytes.Clone(otherPayload[:len(otherPayload)-macSize]), good[len(good)-macSize:]...)
	// Version 3 (what Encode and a Store without keys write), valid in
	// every other respect.
	v3, err := Encode(s.Prefix()+"k", liveEntry("forged!"))
	if err != nil {
		t.Fatal(err)
	}
	// Version 2: no key hash either; a Store without keys reads it as a
	// plain miss, one with keys refuses it like any entry without a MAC.
	v2 := append([]byte{envelopeMagic, 0x02}, v3[2:3]...)
	v2 = append(v2, v3[3+keyHashSize:len(v3)-checksumSize]...)
	v2 = reseal(append(v2, 0, 0, 0, 0))

	for _, tc := range []struct {
		name    string
		payload []byte
		want    error
	}{
		{"flipped value byte", flippedValue, ErrCorrupt},
		{"flipped value byte, checksum fixed", resealedValue, ErrUnauthenticated},
		{"flipped MAC byte", flippedMAC, ErrUnauthenticated},
		{"MAC cut off", noMAC, ErrCorrupt},
		{"MAC zeroed", zeroMAC, ErrUnauthenticated},
		{"MAC of another value", spliced, ErrUnauthenticated},
		{"truncated", good[:len(good)-1], ErrCorrupt},
		{"truncated to the header", good[:minEnvelope], ErrCorrupt},
		{"version 3, no MAC", v3, ErrUnauthenticated},
		{"version 2, no MAC", v2, ErrUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rawSet(t, s, "k", tc.payload)
			refusedEverywhere(t, s, "k", tc.want)
		})
	}
	// The genuine payload, written back, is served: the refusals above
	// were the payloads', not the key's.
	rawSet(t, s, "k", good)
	servedEverywhere(t, s, "k", "genuine")
}

// withKeyHashOf is the 8-byte key hash of a Redis key, as an envelope
// carries it.
func withKeyHashOf(redisKey string) []byte {
	return binary.LittleEndian.AppendUint64(nil, keyHash(redisKey))
}

// A genuine authenticated entry copied under another key is refused: by
// the key hash, and by the MAC, which covers the Redis key (rebinding the
// key hash does not help).
func TestAuthenticatedEntryCopiedUnderAnotherKey(t *testing.T) {
	s, c := newTestStore(t, Options{EntryKeys: [][]byte{keyK}})
	ctx := context.Background()
	if err := s.Set(ctx, "tenant-a:invoice:1", liveEntry("tenant A's invoice")); err != nil {
		t.Fatal(err)
	}
	good, err := c.Get(ctx, s.Prefix()+"tenant-a:invoice:1").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	rawSet(t, s, "tenant-b:invoice:1", good)
	refusedEverywhere(t, s, "tenant-b:invoice:1", ErrKeyMismatch)

	env := bytes.Clone(good[:len(good)-macSize])
	copy(env[3:], withKeyHashOf(s.Prefix()+"tenant-b:invoice:1"))
	rawSet(t, s, "tenant-b:invoice:1", append(reseal(env), good[len(good)-macSize:]...))
	refusedEverywhere(t, s, "tenant-b:invoice:1", ErrUnauthenticated)
}

// Entries written by a Store without keys, or with another key, are
// refused; and a Store without keys refuses authenticated entries rather
// than serve what it cannot verify.
func TestEntriesOfAnotherKeyringAreRefused(t *testing.T) {
	keyed, c := newTestStore(t, Options{EntryKeys: [][]byte{keyK}})
	ctx := context.Background()
	plain := storeOn(t, c, keyed.Prefix(), Options{})
	other := storeOn(t, c, keyed.Prefix(), Options{EntryKeys: [][]byte{keyOther}})

	if err := plain.Set(ctx, "by-plain", liveEntry("no MAC")); err != nil {
		t.Fatal(err)
	}
	refusedEverywhere(t, keyed, "by-plain", ErrUnauthenticated)
	servedEverywhere(t, plain, "by-plain", "no MAC") // a valid entry, for a Store without keys

	if err := other.Set(ctx, "by-other", liveEntry("other key")); err != nil {
		t.Fatal(err)
	}
	refusedEverywhere(t, keyed, "by-other", ErrUnauthenticated)
	servedEverywhere(t, other, "by-other", "other key")

	if err := keyed.Set(ctx, "by-keyed", liveEntry("MAC")); err != nil {
		t.Fatal(err)
	}
	refusedEverywhere(t, plain, "by-keyed", ErrCorrupt)
}

// Rotation: the first key signs, every key verifies. Entries written with
// the old key are served while it is kept after the new one; once it is
// dropped they are refused.
func TestEntryKeyRotation(t *testing.T) {
	before, c := newTestStore(t, Options{EntryKeys: [][]byte{keyOld}})
	ctx := context.Background()
	during := storeOn(t, c, before.Prefix(), Options{EntryKeys: [][]byte{keyNew, keyOld}})
	after := storeOn(t, c, before.Prefix(), Options{EntryKeys: [][]byte{keyNew}})

	if err := before.Set(ctx, "old", liveEntry("signed with the old key")); err != nil {
		t.Fatal(err)
	}
	servedEverywhere(t, during, "old", "signed with the old key")

	if err := during.Set(ctx, "new", liveEntry("signed with the new key")); err != nil {
		t.Fatal(err)
	}
	servedEverywhere(t, during, "new", "signed with the new key")
	servedEverywhere(t, after, "new", "signed with the new key")
	// The rotating Store signs with its first key, not the old one.
	refusedEverywhere(t, before, "new", ErrUnauthenticated)

	refusedEverywhere(t, after, "old", ErrUnauthenticated)
}

func TestNewRejectsInvalidEntryKeys(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redisAddr}) // never used: New does no I/O
	defer c.Close()
	short := bytes.Repeat([]byte{0x5a}, MinEntryKeyLen-1)
	for _, tc := range []struct {
		name  string
		opts  Options
		field string
	}{
		{"key one byte short", Options{EntryKeys: [][]byte{short}}, "EntryKeys"},
		{"empty key", Options{EntryKeys: [][]byte{{}}}, "EntryKeys"},
		{"nil key", Options{EntryKeys: [][]byte{nil}}, "EntryKeys"},
		{"second key short", Options{EntryKeys: [][]byte{keyK, short}}, "EntryKeys"},
		{"MaxPayload below the smallest authenticated envelope", Options{EntryKeys: [][]byte{keyK}, MaxPayload: minEnvelope + macSize - 1}, "MaxPayload"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(c, tc.opts)
			var ce *flightcache.ConfigError
			if s != nil || !errors.Is(err, flightcache.ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("New = %v, %v; want *ConfigError for %s", s, err, tc.field)
			}
			// The error never shows a key, in any form.
			for _, k := range tc.opts.EntryKeys {
				if len(k) > 0 && (strings.Contains(err.Error(), string(k)) || strings.Contains(err.Error(), hex.EncodeToString(k))) {
					t.Fatalf("error %q shows a key", err)
				}
			}
		})
	}
	for _, keys := range [][][]byte{{keyMin}, {keyK, keyMin}} {
		if s, err := New(c, Options{EntryKeys: keys, MaxPayload: minEnvelope + macSize}); err != nil || !s.Authenticated() {
			t.Fatalf("New with keys of %d bytes: %v", len(keys[len(keys)-1]), err)
		}
	}
	if s, err := New(c, Options{}); err != nil || s.Authenticated() {
		t.Fatalf("New without keys: %v, authenticated %v", err, s != nil && s.Authenticated())
	}
}

// Through a Cache whose shared tier authenticates: an entry forged with a
// Store without keys is a miss, so the Cache runs its loader and serves
// (and writes back) the loaded value.
func TestCacheLoadsInsteadOfServingAForgedEntry(t *testing.T) {
	s, c := newTestStore(t, Options{EntryKeys: [][]byte{keyK}})
	forger := storeOn(t, c, s.Prefix(), Options{})
	ctx := context.Background()
	forged, _ := driver.JSONCodec[string]{}.Marshal("forged")
	if err := forger.Set(ctx, "price:1", liveEntryBytes(forged)); err != nil {
		t.Fatal(err)
	}
	var loads atomic.Int32
	load := func(context.Context) (string, error) {
		loads.Add(1)
		return "genuine", nil
	}
	newCache := func(s *Store) *flightcache.Cache[string] {
		cache, err := flightcache.New(flightcache.Options[string]{Name: "entrykeys", Shared: s, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cache.Close() })
		return cache
	}
	// The forgery is a valid entry: a Cache without keys serves it.
	if v, err := newCache(forger).Get(ctx, "price:1", load); err != nil || v != "forged" || loads.Load() != 0 {
		t.Fatalf("Get without keys = %q, %v after %d loads; want the forged entry served (the test's premise)", v, err, loads.Load())
	}
	v, err := newCache(s).Get(ctx, "price:1", load)
	if err != nil || v != "genuine" || loads.Load() != 1 {
		t.Fatalf("Get = %q, %v after %d loads; want the loaded value", v, err, loads.Load())
	}
	// The write-back replaced the forgery with an authenticated entry.
	if e, ok, err := s.Get(ctx, "price:1"); !ok || err != nil || !bytes.Contains(e.Value, []byte("genuine")) {
		t.Fatalf("shared tier after the load: %q, %v, %v", e.Value, ok, err)
	}
}

// liveEntryBytes is liveEntry with a value of raw bytes, loaded just now
// (a LoadedAt, as the Cache writes one).
func liveEntryBytes(v []byte) driver.Entry {
	e := liveEntry("")
	e.Value = v
	e.LoadedAt = time.Now()
	return e
}

// FuzzDecodeAuthenticated pins, for a reader with keys, what FuzzDecode
// pins without: no panic, and whatever is accepted re-encodes to the same
// bytes with the signing key, so nothing accepted is "almost" genuine.
func FuzzDecodeAuthenticated(f *testing.F) {
	keys := []*entryKey{newEntryKey(keyNew), newEntryKey(keyOld)}
	for _, k := range keys {
		good, _ := appendEnvelope(nil, testKey, sampleEntry(), k)
		f.Add(good)
		f.Add(good[:len(good)-1])
	}
	plain, _ := Encode(testKey, sampleEntry())
	f.Add(plain)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, payload []byte) {
		e, err := decodeEnvelope(testKey, payload, keys)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not match ErrCorrupt", err)
			}
			return
		}
		var again []byte
		for _, k := range keys {
			if b, _ := appendEnvelope(nil, testKey, e, k); bytes.Equal(b, payload) {
				again = b
			}
		}
		if again == nil {
			t.Fatalf("accepted %x, which no key re-encodes to", payload)
		}
	})
}
