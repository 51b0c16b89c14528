package flightcache

import (
	"strconv"
	"testing"
	"time"
)

func TestFenceTableKeepsTheNewestVersionPerTarget(t *testing.T) {
	f := fenceTable{window: time.Minute}
	now := time.Unix(1000, 0)
	v := func(s int) time.Time { return time.Unix(2000+int64(s), 0) }
	if fresh, _ := f.note(false, "k", v(5), now); !fresh {
		t.Fatal("the first fence of a key is not fresh")
	}
	for _, old := range []int{5, 4} {
		if fresh, _ := f.note(false, "k", v(old), now); fresh {
			t.Fatalf("version %d after 5 is fresh", old)
		}
	}
	if fresh, _ := f.note(false, "k", v(6), now); !fresh {
		t.Fatal("a newer version is not fresh")
	}
	if !f.covers("k", readAtMeta(v(5)), now, 0) || f.covers("k", readAtMeta(v(6)), now, 0) {
		t.Fatal("a key fence covers what it must not, or not what it must")
	}
	if f.covers("kk", readAtMeta(v(0)), now, 0) {
		t.Fatal("a key fence covers another key")
	}
	// Expiry: after the window, nothing is covered and the old version is
	// fresh again (the table forgot it).
	later := now.Add(time.Minute)
	if f.covers("k", readAtMeta(v(0)), later, 0) {
		t.Fatal("an expired fence still covers")
	}
	if fresh, _ := f.note(false, "k", v(1), later); !fresh {
		t.Fatal("an expired target still deduplicates")
	}
	if got := f.count.Load(); got != 1 {
		t.Fatalf("count %d after expiry and one note, want 1", got)
	}
}

func TestFenceTableBulkFencesMatchPrefixesOnly(t *testing.T) {
	f := fenceTable{window: time.Minute}
	now := time.Unix(1000, 0)
	at := time.Unix(2000, 0)
	f.note(true, "t=1|id=4|", at, now)
	f.note(true, "t=2|", at, now)
	for key, want := range map[string]bool{
		"t=1|id=4|loc=en": true, "t=1|id=4|": true, "t=1|id=42|loc=en": false,
		"t=2|id=9": true, "t=3|id=4|": false, "t=1|": false,
	} {
		if got := f.covers(key, readAtMeta(at.Add(-time.Nanosecond)), now, 0); got != want {
			t.Errorf("covers(%q) = %v, want %v", key, got, want)
		}
	}
	if f.covers("t=2|x", readAtMeta(at), now, 0) {
		t.Error("a bulk fence covers an entry read at its version, without skew")
	}
	if !f.covers("t=2|x", readAtMeta(at.Add(5*time.Millisecond)), now, 10*time.Millisecond) {
		t.Error("a bulk fence does not cover an entry read within the skew after it")
	}
	f.note(true, "", at, now)
	if !f.covers("anything", readAtMeta(at.Add(-time.Second)), now, 0) {
		t.Error("the all-keys fence does not cover every key")
	}
}

// readAtMeta is the Meta of an entry whose data was read at t.
func readAtMeta(t time.Time) *Meta { return &Meta{LoadedAt: t} }

func TestFenceTableIsBoundedPerKindAndKeyFencesNeverPushOutBulkOnes(t *testing.T) {
	f := fenceTable{window: time.Hour}
	now := time.Unix(1000, 0)
	at := time.Unix(2000, 0)
	f.note(true, "", at, now) // a Clear
	var dropped int64
	for i := range maxKeyFences + 10 {
		_, d := f.note(false, strconv.Itoa(i), at, now)
		dropped = max(dropped, d)
	}
	if dropped != 10 {
		t.Fatalf("dropped %d key fences, want 10", dropped)
	}
	if got := len(f.keys.m); got != maxKeyFences {
		t.Fatalf("%d key fences, want %d", got, maxKeyFences)
	}
	if _, ok := f.keys.m["0"]; ok {
		t.Fatal("the oldest key fence survived the overflow")
	}
	if !f.covers("any", readAtMeta(at.Add(-time.Second)), now, 0) {
		t.Fatal("key fences pushed the Clear's fence out")
	}
	// Bytes bound the bulk fences too: long prefixes fill maxBulkBytes
	// before maxBulkFences.
	long := string(make([]byte, 4096))
	for i := range maxBulkBytes/4096 + 10 {
		f.note(true, strconv.Itoa(i)+long, at, now)
	}
	if f.bulk.bytes > maxBulkBytes {
		t.Fatalf("bulk fences hold %d bytes, above the bound %d", f.bulk.bytes, maxBulkBytes)
	}
	if got := int(f.count.Load()); got != len(f.keys.m)+len(f.bulk.m) {
		t.Fatalf("count %d, want %d", got, len(f.keys.m)+len(f.bulk.m))
	}
}

func TestFenceTableLeavesEntriesOfUnknownAgeToBulkFences(t *testing.T) {
	f := fenceTable{window: time.Hour}
	now := time.Unix(1000, 0)
	at := time.Unix(2000, 0)
	f.note(false, "k", at, now)
	if f.covers("k", &Meta{}, now, 0) {
		t.Fatal("a key fence covers an entry whose LoadedAt is unknown")
	}
	f.note(true, "k", at, now)
	if !f.covers("k", &Meta{}, now, 0) {
		t.Fatal("a bulk fence does not cover an entry whose LoadedAt is unknown")
	}
}

func TestFenceTableComparesAtMicrosecondPrecision(t *testing.T) {
	f := fenceTable{window: time.Hour}
	now := time.Unix(1000, 0)
	set := time.Unix(2000, 123456789) // a Set's entry, read at this instant
	f.note(false, "k", set, now)      // its fence, as another instance gets it
	if f.covers("k", readAtMeta(set), now, 0) {
		t.Fatal("a Set's own entry is covered by its own fence")
	}
	if !f.covers("k", readAtMeta(set.Add(-time.Microsecond)), now, 0) {
		t.Fatal("an entry read a microsecond before the Set is not covered")
	}
}
