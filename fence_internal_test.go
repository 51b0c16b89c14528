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
	if !f.covers("k", v(5), now, 0) || f.covers("k", v(6), now, 0) {
		t.Fatal("a key fence covers what it must not, or not what it must")
	}
	if f.covers("kk", v(0), now, 0) {
		t.Fatal("a key fence covers another key")
	}
	// Expiry: after the window, nothing is covered and the old version is
	// fresh again (the table forgot it).
	later := now.Add(time.Minute)
	if f.covers("k", v(0), later, 0) {
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
		if got := f.covers(key, at.Add(-time.Nanosecond), now, 0); got != want {
			t.Errorf("covers(%q) = %v, want %v", key, got, want)
		}
	}
	if f.covers("t=2|x", at, now, 0) {
		t.Error("a bulk fence covers an entry read at its version, without skew")
	}
	if !f.covers("t=2|x", at.Add(5*time.Millisecond), now, 10*time.Millisecond) {
		t.Error("a bulk fence does not cover an entry read within the skew after it")
	}
	f.note(true, "", at, now)
	if !f.covers("anything", at.Add(-time.Second), now, 0) {
		t.Error("the all-keys fence does not cover every key")
	}
}

func TestFenceTableIsBounded(t *testing.T) {
	f := fenceTable{window: time.Hour}
	now := time.Unix(1000, 0)
	var dropped int64
	for i := range maxFences + 10 {
		_, d := f.note(i%2 == 0, strconv.Itoa(i), time.Unix(2000, 0), now)
		dropped = max(dropped, d)
	}
	if dropped != 10 {
		t.Fatalf("dropped %d fences, want 10", dropped)
	}
	if got := int(f.count.Load()); got != maxFences || len(f.keys)+len(f.bulk) != maxFences {
		t.Fatalf("%d fences (%d in the maps), want %d", got, len(f.keys)+len(f.bulk), maxFences)
	}
	if _, ok := f.bulk["0"]; ok {
		t.Fatal("the oldest fence survived the overflow")
	}
}
