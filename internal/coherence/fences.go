package coherence

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The bulk fences' bounds: a bulk fence comes with every InvalidatePrefix
// and Clear, rare, and matters for the whole window; past a bound the
// oldest goes first, with a warning.
const (
	MaxBulkFences = 10_000
	MaxBulkBytes  = 4 << 20
	// fenceOverhead is what a bulk fence costs besides its target,
	// measured: its record in the queue (with the slice's spare capacity)
	// and its map entry.
	fenceOverhead = 272
)

// Fences remembers, for a window, the newest bulk invalidation this
// instance made or applied per prefix ("" for every key). A shared entry
// whose data was read before the fence of a prefix of its key (plus the
// clock skew allowed) is treated as absent: the shared tier cannot delete
// by prefix, so this is its only way to forget. Versions are wall-clock
// times truncated to the microsecond; expiry runs on the Cache's clock,
// Window after the note.
type Fences struct {
	// Window is how long a fence lives. Set once, before use.
	Window time.Duration

	// bulkCount is the number of bulk fences, so that a read skips the
	// bulk view while there are none (the common case).
	bulkCount atomic.Int32
	bulkMu    sync.Mutex
	bulk      fenceSet    // guarded by bulkMu
	lens      map[int]int // prefix length → bulk fences of that length; guarded by bulkMu
	// bulkView is what a read sees of the bulk fences, without a lock:
	// an immutable copy that NoteBulk replaces (see bulkView).
	bulkView atomic.Pointer[bulkView]
	// droppedBulk counts the fences dropped before their time, for the
	// Cache's warning.
	droppedBulk atomic.Int64
}

// fenceSet is the bulk fences: one record per note, oldest first.
type fenceSet struct {
	m     map[string]time.Time // target → newest version noted
	queue []fenceRecord        // every note, oldest first (so in expiry order)
	head  int                  // queue[:head] are gone
	bytes int                  // the live records' size, roughly
}

type fenceRecord struct {
	target   string
	version  time.Time
	expires  time.Time
	explicit bool // from an explicit write or an invalidation, not a fill
}

// NoteBulk records a bulk invalidation of prefix at version (wall clock)
// at now (the Cache's clock), and reports whether it is newer than the
// last one of the same prefix, and how many bulk fences were ever dropped
// early when this note dropped one (0 otherwise).
func (f *Fences) NoteBulk(prefix string, version, now time.Time) (fresh bool, dropped int64) {
	version = version.Truncate(time.Microsecond)
	f.bulkMu.Lock()
	defer f.bulkMu.Unlock()
	f.bulk.expire(now, f.forgetLen)
	if old, seen := f.bulk.m[prefix]; seen && !version.After(old) {
		return false, 0
	}
	prefix = strings.Clone(prefix)
	if _, seen := f.bulk.m[prefix]; !seen {
		f.bulkCount.Add(1)
		if f.lens == nil {
			f.lens = make(map[int]int)
		}
		f.lens[len(prefix)]++
	}
	if lost := f.bulk.add(prefix, version, now.Add(f.Window), true, MaxBulkFences, MaxBulkBytes, f.forgetLen); lost > 0 {
		dropped = f.droppedBulk.Add(int64(lost))
	}
	f.publishLocked(prefix, bulkFence{version: version, expires: now.Add(f.Window)})
	return true, dropped
}

// bulkView is an immutable copy of the bulk fences, which Covered reads
// without a lock: a shared read never waits for a bulk invalidation, nor
// for another shared read. base is the fences as of the last rebuild,
// delta the ones noted since (at most bulkDelta, each newer than base's
// fence of the same prefix, if any); lens the distinct prefix lengths,
// shortest first. A fence dropped or expired since the last rebuild may
// linger in base until the next one; Covered ignores expired ones, and a
// dropped one only covers more.
type bulkView struct {
	base, delta map[string]bulkFence
	lens        []int
}

type bulkFence struct{ version, expires time.Time }

// bulkDelta bounds a bulkView's delta: each note copies the delta, and
// every bulkDelta notes the whole table is copied, so a note costs about
// bulkDelta + live fences / bulkDelta map writes.
const bulkDelta = 64

// publishLocked replaces the view with one that holds prefix's new fence
// fe. The caller holds bulkMu.
func (f *Fences) publishLocked(prefix string, fe bulkFence) {
	v := &bulkView{lens: make([]int, 0, len(f.lens))}
	for n := range f.lens {
		v.lens = append(v.lens, n)
	}
	slices.Sort(v.lens)
	old := f.bulkView.Load()
	if old == nil || len(old.delta) >= bulkDelta {
		v.base = make(map[string]bulkFence, len(f.bulk.m))
		for _, r := range f.bulk.queue[f.bulk.head:] {
			if cur, ok := f.bulk.m[r.target]; ok && cur.Equal(r.version) {
				v.base[r.target] = bulkFence{version: r.version, expires: r.expires}
			}
		}
		f.bulkView.Store(v)
		return
	}
	v.base = old.base
	v.delta = make(map[string]bulkFence, len(old.delta)+1)
	for p, e := range old.delta {
		v.delta[p] = e
	}
	v.delta[prefix] = fe
	f.bulkView.Store(v)
}

// forgetLen is called, under bulkMu, for each bulk fence that goes.
func (f *Fences) forgetLen(prefix string) {
	f.bulkCount.Add(-1)
	if f.lens[len(prefix)]--; f.lens[len(prefix)] == 0 {
		delete(f.lens, len(prefix))
	}
}

// covering reports which bulk fence, if any, covers a shared entry of key
// whose data was read at read (wall clock): one of a prefix of key whose
// version plus skew is after read (a bulk invalidation announces no value
// of its own, so values read just after it by a host whose clock is
// behind are reloaded once more); every live one when the read time is
// not known. now is the Cache's clock.
func (f *Fences) covering(key string, read time.Time, known bool, now time.Time, skew time.Duration) Judgement {
	if f.bulkCount.Load() == 0 {
		return Judgement{}
	}
	v := f.bulkView.Load()
	if v == nil {
		return Judgement{}
	}
	read = read.Truncate(time.Microsecond)
	for _, n := range v.lens {
		if n > len(key) {
			break
		}
		p := key[:n]
		fe, ok := v.delta[p]
		if !ok {
			fe, ok = v.base[p]
		}
		if ok && now.Before(fe.expires) && (!known || read.Before(fe.version.Add(skew))) {
			return Judgement{Why: WhyBulk, Fence: fe.version, Prefix: p}
		}
	}
	return Judgement{}
}

// add records target at version, expiring at expires, dropping the oldest
// records while the set is above maxN records or maxBytes; it returns how
// many of the dropped ones were explicit. gone, when set, is called for
// each target that leaves the set.
func (s *fenceSet) add(target string, version, expires time.Time, explicit bool, maxN, maxBytes int, gone func(string)) (lost int) {
	if s.m == nil {
		s.m = make(map[string]time.Time)
	}
	s.m[target] = version
	s.queue = append(s.queue, fenceRecord{target: target, version: version, expires: expires, explicit: explicit})
	s.bytes += len(target) + fenceOverhead
	for len(s.queue)-s.head > maxN || s.bytes > maxBytes {
		if s.pop(gone) {
			lost++
		}
	}
	return lost
}

// expire drops the records whose time has passed.
func (s *fenceSet) expire(now time.Time, gone func(string)) {
	for s.head < len(s.queue) && !now.Before(s.queue[s.head].expires) {
		s.pop(gone)
	}
	if s.head > 0 && s.head >= len(s.queue)/2 {
		n := copy(s.queue, s.queue[s.head:])
		clear(s.queue[n:])
		s.queue, s.head = s.queue[:n], 0
	}
}

// pop drops the oldest record, and its target's fence unless a newer
// record of the same target replaced it. It reports whether the record
// was an explicit one whose fence went with it.
func (s *fenceSet) pop(gone func(string)) (explicitLost bool) {
	r := s.queue[s.head]
	s.queue[s.head] = fenceRecord{}
	s.head++
	s.bytes -= len(r.target) + fenceOverhead
	if v, ok := s.m[r.target]; ok && v.Equal(r.version) {
		delete(s.m, r.target)
		if gone != nil {
			gone(r.target)
		}
		return r.explicit
	}
	return false
}

// Len returns how many bulk fences live, for tests and stats.
func (f *Fences) Len() int { return int(f.bulkCount.Load()) }
