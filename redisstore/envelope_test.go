package redisstore

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
)

// testKey is the Redis key (prefix included) the envelope tests bind to.
const testKey = "flightcache:product:42"

// withKeyHash appends testKey's hash to a header under construction.
func withKeyHash(b []byte) []byte {
	return binary.LittleEndian.AppendUint64(b, keyHash(testKey))
}

func sampleEntry() driver.Entry {
	stale := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.UTC)
	return driver.Entry{Value: []byte(`{"name":"Ada"}`), Meta: driver.Meta{
		FreshUntil:   stale.Add(-90 * time.Second),
		StaleUntil:   stale,
		LoadDuration: 42*time.Millisecond + 7,
		LoadedAt:     stale.Add(-90*time.Second - 42*time.Millisecond - 3),
	}}
}

func sameEntry(a, b driver.Entry) bool {
	return bytes.Equal(a.Value, b.Value) && (a.Value == nil) == (b.Value == nil) &&
		a.FreshUntil.Equal(b.FreshUntil) && a.StaleUntil.Equal(b.StaleUntil) &&
		a.LoadDuration == b.LoadDuration && a.NotFound == b.NotFound &&
		a.LoadedAt.Equal(b.LoadedAt) && a.LoadedAt.IsZero() == b.LoadedAt.IsZero() &&
		slices.Equal(a.Tags, b.Tags)
}

// An entry written before envelopes carried tags (this payload was
// encoded then) still decodes, to the same Meta with no tags, and an
// untagged entry is still encoded byte for byte as then.
func TestEnvelopeDecodesAnEntryWrittenBeforeTags(t *testing.T) {
	old, _ := hex.DecodeString("fc03022d8c906375e5073e80e0b28eae818aaf1a80b09dc2df0180e0ba84bf03c08db701097b226964223a34327dffba381c")
	want := driver.Entry{Value: []byte(`{"id":42}`), Meta: driver.Meta{
		FreshUntil: time.Unix(1_900_000_060, 0), StaleUntil: time.Unix(1_900_000_120, 0),
		LoadDuration: 3 * time.Millisecond, LoadedAt: time.Unix(1_900_000_000, 0)}}
	got, err := Decode("fc:product:42", old)
	if err != nil {
		t.Fatalf("Decode of an entry written before tags: %v", err)
	}
	if !sameEntry(got, want) || got.Tags != nil {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	again, err := Encode("fc:product:42", want)
	if err != nil || !bytes.Equal(again, old) {
		t.Fatalf("an untagged entry now encodes as %x (%v), want the old bytes %x", again, err, old)
	}
}

// Tags out of the envelope's bounds are refused by Encode, and a payload
// whose tags are malformed by Decode, never decoded in part.
func TestEnvelopeTagsAreBounded(t *testing.T) {
	base := sampleEntry()
	for name, tags := range map[string][]string{
		"17 tags":   strings.Split("a b c d e f g h i j k l m n o p q", " "),
		"empty tag": {""},
		"long tag":  {strings.Repeat("x", 129)},
	} {
		e := base
		e.Tags = tags
		if _, err := Encode(testKey, e); err == nil {
			t.Fatalf("%s: Encode accepted it", name)
		}
	}
	e := base
	e.Tags = []string{"ab"}
	good, err := Encode(testKey, e)
	if err != nil {
		t.Fatal(err)
	}
	// The tag section starts after the header and the three varints
	// before it; corrupt each byte of it in turn (count, length, bytes)
	// and fix the checksum, so that only the tags are wrong.
	at := bytes.Index(good, []byte{1, 2, 'a', 'b'})
	if at < 0 {
		t.Fatalf("no tag section in %x", good)
	}
	for i, b := range []byte{0, 17, 0x80} {
		bad := slices.Clone(good)
		bad[at+min(i, 1)] = b
		body := bad[:len(bad)-checksumSize]
		binary.LittleEndian.PutUint32(bad[len(bad)-checksumSize:], crc32.Checksum(body, castagnoli))
		if got, err := Decode(testKey, bad); err == nil {
			t.Fatalf("byte %x at the tags: decoded %+v", b, got)
		}
	}
}

func TestEnvelopeRoundTripsEveryMetaField(t *testing.T) {
	base := sampleEntry()
	tomb := base
	tomb.Value, tomb.NotFound = nil, true
	empty := base
	empty.Value = []byte{}
	freshIsStale := base
	freshIsStale.FreshUntil = base.StaleUntil
	epochFresh := base
	epochFresh.FreshUntil = time.Unix(0, 0)
	unknownAge := base
	unknownAge.LoadedAt = time.Time{}
	loadedAtStale := base
	loadedAtStale.LoadedAt = base.StaleUntil
	loadedAtEpoch := base
	loadedAtEpoch.LoadedAt = time.Unix(0, 0)
	tagged := base
	tagged.Tags = []string{"product:42", "category:tea", strings.Repeat("é", 64)}
	taggedTomb := tomb
	taggedTomb.Tags = []string{"t"}
	for name, e := range map[string]driver.Entry{
		"value":                 base,
		"tombstone":             tomb,
		"empty value":           empty,
		"FreshUntil=StaleUntil": freshIsStale,
		"FreshUntil=epoch":      epochFresh,
		"unknown LoadedAt":      unknownAge,
		"LoadedAt=StaleUntil":   loadedAtStale,
		"LoadedAt=epoch":        loadedAtEpoch,
		"tags":                  tagged,
		"tombstone with tags":   taggedTomb,
		"zero LoadDuration":     {Value: []byte("x"), Meta: driver.Meta{FreshUntil: base.FreshUntil, StaleUntil: base.StaleUntil}},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := Encode(testKey, e)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			got, err := Decode(testKey, b)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !sameEntry(got, e) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, e)
			}
		})
	}
}

func TestTombstoneValueIsNotStored(t *testing.T) {
	e := sampleEntry()
	e.NotFound = true
	b, err := Encode(testKey, e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(testKey, b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Value != nil || !got.NotFound {
		t.Fatalf("tombstone decoded as %+v; want nil Value, NotFound", got)
	}
}

func TestDecodedValueDoesNotAliasPayload(t *testing.T) {
	b, _ := Encode(testKey, sampleEntry())
	got, err := Decode(testKey, b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0
	}
	if string(got.Value) != string(sampleEntry().Value) {
		t.Fatalf("Value changed with the payload: %q", got.Value)
	}
}

func TestEncodeRejectsUnrepresentableMeta(t *testing.T) {
	good := sampleEntry()
	for name, mutate := range map[string]func(*driver.Entry){
		"zero StaleUntil":        func(e *driver.Entry) { e.StaleUntil = time.Time{} },
		"StaleUntil at epoch":    func(e *driver.Entry) { e.StaleUntil, e.FreshUntil = time.Unix(0, 0), time.Unix(0, 0) },
		"StaleUntil after 2262":  func(e *driver.Entry) { e.StaleUntil = time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC) },
		"FreshUntil after Stale": func(e *driver.Entry) { e.FreshUntil = e.StaleUntil.Add(time.Nanosecond) },
		"zero FreshUntil":        func(e *driver.Entry) { e.FreshUntil = time.Time{} },
		"negative LoadDuration":  func(e *driver.Entry) { e.LoadDuration = -1 },
		"LoadedAt before 1970":   func(e *driver.Entry) { e.LoadedAt = time.Unix(0, -1) },
		"LoadedAt after Stale":   func(e *driver.Entry) { e.LoadedAt = e.StaleUntil.Add(time.Nanosecond) },
	} {
		t.Run(name, func(t *testing.T) {
			e := good
			mutate(&e)
			b, err := Encode(testKey, e)
			var ee *EntryError
			if !errors.Is(err, ErrInvalidEntry) || !errors.As(err, &ee) || b != nil {
				t.Fatalf("Encode = %x, %v; want nil, *EntryError", b, err)
			}
		})
	}
}

// reseal recomputes the checksum, so a test can reach the checks behind it.
func reseal(b []byte) []byte {
	body := b[:len(b)-checksumSize]
	return binary.LittleEndian.AppendUint32(append([]byte(nil), body...), crc32.Checksum(body, castagnoli))
}

func TestDecodeRejectsCorruptPayloads(t *testing.T) {
	good, err := Encode(testKey, sampleEntry())
	if err != nil {
		t.Fatal(err)
	}
	headerFlags := func(flags byte, fields ...uint64) []byte {
		b := withKeyHash([]byte{envelopeMagic, envelopeVersion, flags})
		for _, f := range fields {
			b = binary.AppendUvarint(b, f)
		}
		return reseal(append(b, 0, 0, 0, 0))
	}
	header := func(fields ...uint64) []byte {
		return headerFlags(0, fields...)
	}
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0x01
	badFlags := append([]byte(nil), good...)
	badFlags[2] = 0x80
	tombWithValue := append([]byte(nil), good...)
	tombWithValue[2] = flagNotFound
	nonMinimal := append(withKeyHash([]byte{envelopeMagic, envelopeVersion, 0}), 0x81, 0x00, 0, 0, 0)

	for name, payload := range map[string][]byte{
		"empty":                   {},
		"nil":                     nil,
		"short":                   good[:5],
		"plain JSON":              []byte(`{"name":"Ada","age":36}`),
		"go-redis/cache msgpack":  {0x82, 0xa4, 'n', 'a', 'm', 'e', 0xa3, 'A', 'd', 'a', 0x01, 0x02},
		"wrong magic":             reseal(append([]byte{0x00}, good[1:]...)),
		"future version":          reseal(append([]byte{envelopeMagic, envelopeVersion + 1}, good[2:]...)),
		"version 0":               reseal(append([]byte{envelopeMagic, 0x00}, good[2:]...)),
		"version 1, no key hash":  reseal(append([]byte{envelopeMagic, 0x01}, good[2:]...)),
		"version 2, no key hash":  reseal(append([]byte{envelopeMagic, 0x02}, good[2:]...)),
		"LoadedAt before 1970":    headerFlags(flagLoadedAt, 10, 0, 11, 0, 0),
		"LoadedAt flag, no field": headerFlags(flagLoadedAt, 10, 0),
		"bit flip":                flipped,
		"truncated":               good[:len(good)-1],
		"trailing byte":           append(append([]byte(nil), good...), 0),
		"unknown flag":            reseal(badFlags),
		"tombstone with value":    reseal(tombWithValue),
		"zero StaleUntil":         header(0, 0, 0, 0),
		"StaleUntil > MaxInt64":   header(math.MaxInt64+1, 0, 0, 0),
		"fresh before 1970":       header(10, 11, 0, 0),
		"LoadDuration > MaxInt64": header(10, 0, math.MaxInt64+1, 0),
		"value length too long":   header(10, 0, 0, 1),
		"varint overflow":         reseal(append(withKeyHash([]byte{envelopeMagic, envelopeVersion, 0}), bytes.Repeat([]byte{0xff}, 11)...)),
		"key hash cut short":      reseal(append([]byte{envelopeMagic, envelopeVersion, 0}, 1, 2, 3, 4, 5, 6, 7, 8, 9)),
		"non-minimal varint":      reseal(append(nonMinimal, 0, 0, 0, 0)),
	} {
		t.Run(name, func(t *testing.T) {
			e, err := Decode(testKey, payload)
			var ce *CorruptError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.Reason == "" {
				t.Fatalf("Decode = %+v, %v; want *CorruptError", e, err)
			}
			if name != "key hash cut short" && errors.Is(err, ErrKeyMismatch) {
				t.Fatalf("damage reported as an entry of another key: %v", err)
			}
			if !sameEntry(e, driver.Entry{}) {
				t.Fatalf("Decode returned a partial entry with its error: %+v", e)
			}
		})
	}
}

// A well-formed entry is bound to the key it was encoded for: under any other
// key, including the same key under another prefix, it is rejected, so an
// entry copied in Redis from one tenant's key to another's is never served.
func TestDecodeRejectsEntryOfAnotherKey(t *testing.T) {
	b, err := Encode("flightcache:tenant-a:product:42", sampleEntry())
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{
		"flightcache:tenant-b:product:42",
		"other:tenant-a:product:42",
		"flightcache:tenant-a:product:4",
		"flightcache:tenant-a:product:420",
	} {
		e, err := Decode(other, b)
		var ce *CorruptError
		if !errors.Is(err, ErrKeyMismatch) || !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
			t.Fatalf("Decode under %q = %+v, %v; want a *CorruptError matching ErrKeyMismatch", other, e, err)
		}
		if !sameEntry(e, driver.Entry{}) {
			t.Fatalf("Decode returned the other key's entry with its error: %+v", e)
		}
	}
	if _, err := Decode("flightcache:tenant-a:product:42", b); err != nil {
		t.Fatalf("Decode under its own key: %v", err)
	}
}

// FuzzDecode pins two properties: Decode never panics on any input, and
// whatever it accepts re-encodes to exactly the same bytes (the format has a
// single encoding per entry and key, so nothing it accepts is "almost"
// valid, and nothing it accepts belongs to another key).
// Inputs built from Entry fields must round-trip through Encode.
func FuzzDecode(f *testing.F) {
	good, _ := Encode(testKey, sampleEntry())
	tomb := sampleEntry()
	tomb.NotFound = true
	tombBytes, _ := Encode(testKey, tomb)
	noAge := sampleEntry()
	noAge.LoadedAt = time.Time{}
	noAgeBytes, _ := Encode(testKey, noAge)
	otherKey, _ := Encode("flightcache:product:43", sampleEntry())
	f.Add(good, int64(0), int64(0), int64(0), int64(0), false)
	f.Add(tombBytes, int64(1), int64(2), int64(3), int64(1), true)
	f.Add(noAgeBytes, int64(5), int64(0), int64(0), int64(-1), false)
	f.Add(otherKey, int64(5), int64(1), int64(0), int64(6), false)
	f.Add(reseal(append([]byte{envelopeMagic, 0x02}, noAgeBytes[2+keyHashSize:]...)), int64(5), int64(1), int64(0), int64(6), false)
	f.Add([]byte{}, int64(1700000000000000000), int64(60e9), int64(1e6), int64(61e9), false)
	f.Add([]byte(`{"a":1}`), int64(-5), int64(-5), int64(-5), int64(-5), true)

	// loadedBefore < 0 means LoadedAt unknown (zero).
	f.Fuzz(func(t *testing.T, payload []byte, staleNanos, freshBefore, load, loadedBefore int64, notFound bool) {
		if e, err := Decode(testKey, payload); err == nil {
			again, err := Encode(testKey, e)
			if err != nil {
				t.Fatalf("Decode accepted %x but Encode refuses its entry: %v", payload, err)
			}
			if !bytes.Equal(again, payload) {
				t.Fatalf("re-encoding differs:\n in %x\nout %x", payload, again)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Decode error %v does not match ErrCorrupt", err)
		}

		e := driver.Entry{Value: payload, Meta: driver.Meta{
			StaleUntil:   time.Unix(0, staleNanos),
			FreshUntil:   time.Unix(0, staleNanos-freshBefore),
			LoadDuration: time.Duration(load),
			NotFound:     notFound,
		}}
		if loadedBefore >= 0 {
			e.LoadedAt = time.Unix(0, staleNanos-loadedBefore)
		}
		b, err := Encode(testKey, e)
		if err != nil {
			if !errors.Is(err, ErrInvalidEntry) {
				t.Fatalf("Encode error %v does not match ErrInvalidEntry", err)
			}
			return
		}
		got, err := Decode(testKey, b)
		if err != nil {
			t.Fatalf("Decode(testKey, Encode(testKey, %+v)): %v", e, err)
		}
		if notFound {
			e.Value = nil
		} else if e.Value == nil {
			e.Value = []byte{}
		}
		if !sameEntry(got, e) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, e)
		}
	})
}
