package coherence

import (
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// An entry is compared by its own read time: before the fence it is
// covered, at or after it it is not, whenever it is asked about.
func TestTagFenceComparesTheReadTime(t *testing.T) {
	var f TagFences
	f.Window = time.Hour
	if f.Live() {
		t.Fatal("a new table has live fences")
	}
	f.Note("a", t0, t0, false, t0)
	for _, now := range []time.Time{t0, t0.Add(time.Minute), t0.Add(59 * time.Minute)} {
		if got := f.Local([]string{"x", "a"}, t0.Add(-time.Nanosecond), now); got != TagsInvalidated {
			t.Fatalf("read before the fence, asked at %v: %v", now, got)
		}
		if got := f.Local([]string{"a"}, t0, now); got != TagsClear {
			t.Fatalf("read at the fence, asked at %v: %v", now, got)
		}
		if got := f.Shared([]string{"a"}, t0.Add(5*time.Millisecond), true, now, 10*time.Millisecond); got != TagsInvalidated {
			t.Fatalf("shared entry read within the skew: %v", got)
		}
		if got := f.Shared([]string{"a"}, t0.Add(time.Hour), false, now, 0); got != TagsInvalidated {
			t.Fatalf("shared entry with an unknown read time: %v", got)
		}
	}
	if got := f.Local([]string{"a"}, t0.Add(-time.Second), t0.Add(time.Hour)); got != TagsClear || f.Live() && f.Len() != 1 {
		t.Fatalf("after the window: %v", got)
	}
}

// A fence moves only forward: noting an older or the same version again
// (a replay) changes nothing, and an expiry never weakens an invalidation.
func TestTagFenceNeverMovesBack(t *testing.T) {
	var f TagFences
	f.Window = time.Hour
	if moved, _ := f.Note("a", t0.Add(time.Second), t0.Add(time.Second), false, t0); !moved {
		t.Fatal("first note did not move the fence")
	}
	for _, v := range []time.Time{t0, t0.Add(time.Second)} {
		if moved, _ := f.Note("a", v, v, false, t0.Add(2*time.Second)); moved {
			t.Fatalf("noting %v moved the fence", v)
		}
	}
	if got := f.Local([]string{"a"}, t0.Add(time.Second), t0); got != TagsClear {
		t.Fatalf("a replay moved the fence: %v", got)
	}
	f.Note("a", t0.Add(2*time.Second), t0.Add(2*time.Second), true, t0)
	if got := f.Local([]string{"a"}, t0.Add(500*time.Millisecond), t0); got != TagsInvalidated {
		t.Fatalf("read before the invalidation, after an expiry: %v, want invalidated", got)
	}
	if got := f.Local([]string{"a"}, t0.Add(1500*time.Millisecond), t0); got != TagsExpired {
		t.Fatalf("read between the invalidation and the expiry: %v, want expired", got)
	}
}

// Past MaxTagFences the oldest fence folds into the floor: what it covered
// stays covered (with every other tagged entry read before it).
func TestTagFencesFoldIntoTheFloorPastTheBound(t *testing.T) {
	var f TagFences
	f.Window = time.Hour
	for i := range MaxTagFences + 10 {
		v := t0.Add(time.Duration(i) * time.Microsecond)
		_, folded := f.Note(fmt.Sprint("t", i), v, v, false, t0)
		if folded != (i >= MaxTagFences) {
			t.Fatalf("note %d: folded %v", i, folded)
		}
	}
	if n := f.Len(); n != MaxTagFences+1 {
		t.Fatalf("%d live, want %d fences and the floor", n, MaxTagFences+1)
	}
	if got := f.Local([]string{"t0"}, t0.Add(-time.Nanosecond), t0); got != TagsInvalidated {
		t.Fatalf("a folded tag: %v, want still invalidated", got)
	}
	if got := f.Local([]string{"never-noted"}, t0.Add(5*time.Microsecond), t0); got != TagsInvalidated {
		t.Fatalf("another tag read before the floor: %v, want invalidated", got)
	}
	if got := f.Local(nil, t0, t0); got != TagsClear {
		t.Fatalf("an untagged entry: %v", got)
	}
	if got := f.Local([]string{"never-noted"}, t0.Add(time.Second), t0); got != TagsClear {
		t.Fatalf("a tag read after the floor: %v", got)
	}
}

// Reads of the fences take no lock and race with notes safely: a reader
// sees a fence either before or after a note, never half of one.
func TestTagFencesAreReadWhileNoted(t *testing.T) {
	var f TagFences
	f.Window = time.Hour
	start := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-start
		for i := range 2000 {
			v := t0.Add(time.Duration(i+1) * time.Microsecond)
			f.Note(fmt.Sprint("t", i%50), v, v, i%3 == 0, t0)
		}
	}()
	close(start)
	for i := 0; ; i++ {
		select {
		case <-done:
			if got := f.Local([]string{"t1"}, t0, t0); got != TagsInvalidated {
				t.Fatalf("after the notes: %v", got)
			}
			return
		default:
		}
		// Read before every note: never clear once the tag was noted.
		_, noted := f.get("t1")
		if got := f.Local([]string{"t0", "t1"}, t0, t0); got == TagsClear && noted {
			t.Fatalf("read %d: a tag noted after the read time reads clear", i)
		}
	}
}
