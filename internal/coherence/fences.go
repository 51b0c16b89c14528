package coherence

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The fence table's bounds. Key fences come with every fill, Set, Delete
// and key invalidation and must never push out the bulk fences, which are
// rare and matter for the whole window. A key has one fence, updated in
// place, however often it is noted; the key fences are bounded by keys,
// those of fills apart from those of explicit writes and invalidations,
// so that a cache filling many keys never pushes out the fence of a Set.
// Past a bound the least recently noted fence goes first: of the noting
// key's shard (one of 64), so the bound holds for the whole table while
// the order of the drops is least-recently-noted per shard. Dropping a
// bulk fence, or a key fence of an explicit write or an invalidation,
// early may let an instance read an entry it covered from the shared
// tier, so the Cache warns about those.
const (
	// MaxKeyFences bounds the keys whose newest fence is an explicit
	// write's or an invalidation's (a key noted by both counts here).
	MaxKeyFences     = 100_000
	MaxKeyFenceBytes = 32 << 20
	// MaxFillFences bounds the keys fenced by fills only: reads stay
	// monotonic per instance for this many recently filled keys.
	MaxFillFences     = 50_000
	MaxFillFenceBytes = 16 << 20
	MaxBulkFences     = 10_000
	MaxBulkBytes      = 4 << 20
	// fenceOverhead is what a bulk fence costs besides its target,
	// measured: its record in the queue (with the slice's spare capacity)
	// and its map entry. keyFenceOverhead is a key fence's: its record
	// and its map entry.
	fenceOverhead    = 272
	keyFenceOverhead = 160
	keyFenceShards   = 64
)

// Fences remembers, for a window, the newest read time this instance knows
// of per key (a key fence, or floor) and per prefix (a bulk fence; "" for
// every key). A shared entry whose data was read before the fence of its
// key, or of a prefix of its key, is older than something this instance
// has written, applied or served, and is treated as absent: the next load
// overwrites it (Covered).
//
// Key fences are raised by every read-path fill (the read time of what was
// filled: that is what makes reads monotonic per instance, even after the
// local copy expired and a slow load of another instance put older data in
// the shared tier), by Set (its entry's read time), by Delete (the moment
// of the delete) and by key invalidations from other instances (their
// Version). Bulk fences come from InvalidatePrefix, Clear and their
// counterparts from other instances; the shared tier cannot delete by
// prefix, so they are its only way to forget.
//
// Versions are wall-clock times, compared with the wall-clock times the
// shared tier holds, both truncated to the microsecond (the Bus's
// precision), so that a Set's own entry (whose read time is its
// Invalidation's Version) is never taken for an older one; callers pass
// the exact wall-clock time that went to or came from the shared tier, not
// a conversion of the Cache's clock. Expiry runs on the Cache's clock.
//
// Every fence expires after Window: by then every entry written before it
// has expired from the shared tier, unless a loader set a longer TTL with
// SetTTL.
type Fences struct {
	// Window is how long a fence lives. Set once, before use.
	Window time.Duration

	keys [keyFenceShards]fenceShard
	// keyCount and keyBytes are the key fences of each kind (fill,
	// explicit) in every shard, against their bounds.
	keyCount, keyBytes [2]atomic.Int64
	// bulkCount is the number of bulk fences, so that Covered skips the
	// bulk view while there are none (the common case).
	bulkCount atomic.Int32
	bulkMu    sync.Mutex
	bulk      fenceSet    // guarded by bulkMu
	lens      map[int]int // prefix length → bulk fences of that length; guarded by bulkMu
	// bulkView is what Covered reads of the bulk fences, without a lock:
	// an immutable copy that NoteBulk replaces (see bulkView).
	bulkView atomic.Pointer[bulkView]
	// droppedExplicit and droppedBulk count the fences dropped before
	// their time that a warning is due for.
	droppedExplicit, droppedBulk atomic.Int64
}

var fenceSeed = maphash.MakeSeed()

// fenceShard is a 64th of the key fences, on its own lock: every shared
// read asks one shard, and every fill writes one. Each key has one record;
// it sits in one of two lists, least recently noted last: fills (a key
// only fills fenced) and explicit (a key an explicit write or an
// invalidation fenced).
type fenceShard struct {
	mu    sync.Mutex
	m     map[string]*keyFence // guarded by mu
	lists [2]keyFence          // sentinels of the fill and explicit lists; guarded by mu
	_     [40]byte             // keep neighbouring shards' mutexes apart
}

// keyFence is one key's fence: the newest version noted for it, and where
// that version came from.
type keyFence struct {
	key     string
	version time.Time // wall clock, to the microsecond
	expires time.Time // the Cache's clock
	// src is the source of version (the newest note's); kind is the list
	// the record sits in, explicit once any explicit note was made.
	src        Source
	kind       fenceKind
	prev, next *keyFence
}

// Source is where a key's version came from.
type Source uint8

// The sources of a version.
const (
	// FromFill: a read-path fill or a load served, read at the version.
	FromFill Source = iota
	// FromWrite: an explicit write of this instance (Set, Delete).
	FromWrite
	// FromInvalidation: an invalidation of the key received from another
	// instance.
	FromInvalidation
)

// String returns "fill", "write" or "invalidation".
func (s Source) String() string {
	switch s {
	case FromWrite:
		return "write"
	case FromInvalidation:
		return "invalidation"
	}
	return "fill"
}

// fenceKind indexes a shard's lists and the Fences' counters.
type fenceKind uint8

const (
	fillFence fenceKind = iota
	explicitFence
)

var keyFenceBounds = [2]struct{ n, bytes int64 }{
	fillFence:     {MaxFillFences, MaxFillFenceBytes},
	explicitFence: {MaxKeyFences, MaxKeyFenceBytes},
}

// list returns the sentinel of kind's list, made circular on first use.
func (sh *fenceShard) list(kind fenceKind) *keyFence {
	l := &sh.lists[kind]
	if l.next == nil {
		l.next, l.prev = l, l
	}
	return l
}

// pushFront puts r first (most recently noted) in its kind's list.
func (sh *fenceShard) pushFront(r *keyFence) {
	l := sh.list(r.kind)
	r.prev, r.next = l, l.next
	l.next.prev = r
	l.next = r
}

func unlink(r *keyFence) {
	r.prev.next, r.next.prev = r.next, r.prev
	r.prev, r.next = nil, nil
}

// remove drops r from the shard and the counters. The caller holds sh.mu.
func (f *Fences) remove(sh *fenceShard, r *keyFence) {
	unlink(r)
	delete(sh.m, r.key)
	f.keyCount[r.kind].Add(-1)
	f.keyBytes[r.kind].Add(-int64(len(r.key) + keyFenceOverhead))
}

// expire drops the shard's fences whose time has passed: each list's
// last ones, since a fence's expiry is its last note plus Window. The
// caller holds sh.mu.
func (f *Fences) expire(sh *fenceShard, now time.Time) {
	for kind := range sh.lists {
		l := sh.list(fenceKind(kind))
		for l.prev != l && !now.Before(l.prev.expires) {
			f.remove(sh, l.prev)
		}
	}
}

// floor returns key's fence, if one lives. The caller holds sh.mu.
func (f *Fences) floor(sh *fenceShard, key string, now time.Time) (time.Time, bool) {
	f.expire(sh, now)
	if r, ok := sh.m[key]; ok {
		return r.version, true
	}
	return time.Time{}, false
}

// over reports whether kind's key fences exceed their bounds.
func (f *Fences) over(kind fenceKind) bool {
	b := keyFenceBounds[kind]
	return f.keyCount[kind].Load() > b.n || f.keyBytes[kind].Load() > b.bytes
}

// trim drops the least recently noted fences of kind from shard (whose
// lock the caller holds) while they exceed their bounds, but never keep,
// the fence just noted. It returns how many it dropped; the caller goes on
// with the other shards if that was not enough (trimOthers).
func (f *Fences) trim(sh *fenceShard, kind fenceKind, keep *keyFence) (lost int) {
	l := sh.list(kind)
	for f.over(kind) && l.prev != l && l.prev != keep {
		f.remove(sh, l.prev)
		lost++
	}
	return lost
}

// trimOthers is trim across every shard, one lock at a time, for the rare
// case where the noting key's shard had nothing of kind left to drop.
func (f *Fences) trimOthers(kind fenceKind, keep *keyFence) (lost int) {
	for i := range f.keys {
		if !f.over(kind) {
			break
		}
		sh := &f.keys[i]
		sh.mu.Lock()
		lost += f.trim(sh, kind, keep)
		sh.mu.Unlock()
	}
	return lost
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

// NoteKey raises key's fence to version (wall clock) at now (the Cache's
// clock), src telling a fill from an explicit write or an invalidation.
// It returns the fence before (zero when none lived) and reports
// whether version is newer than it, and how many explicit key fences were
// ever dropped early when this note dropped one (0 otherwise). A key's
// fence is one record, updated in place: noting a key again costs no
// room.
func (f *Fences) NoteKey(key string, version, now time.Time, src Source) (prev time.Time, fresh bool, dropped int64) {
	return f.noteKey(key, version, now, src, false)
}

// NoteServed records that a load whose ticket was outdated served its
// value, read at version, to its callers without storing it: the key's
// fence rises to version unless this instance's own explicit write is the
// newest version known (an explicit write wins on the instance that made
// it). A later shared read of anything older than the value served is
// then absent, so that none of those callers' next reads goes back.
func (f *Fences) NoteServed(key string, version, now time.Time) {
	f.noteKey(key, version, now, FromFill, true)
}

func (f *Fences) noteKey(key string, version, now time.Time, src Source, underWrite bool) (prev time.Time, fresh bool, dropped int64) {
	version = version.Truncate(time.Microsecond)
	kind := fillFence
	if src != FromFill {
		kind = explicitFence
	}
	sh := &f.keys[maphash.String(fenceSeed, key)&(keyFenceShards-1)]
	sh.mu.Lock()
	prev, seen := f.floor(sh, key, now)
	if seen && (!version.After(prev) || underWrite && sh.m[key].src == FromWrite) {
		sh.mu.Unlock()
		return prev, false, 0
	}
	r := sh.m[key]
	if r == nil {
		if sh.m == nil {
			sh.m = make(map[string]*keyFence)
		}
		r = &keyFence{key: strings.Clone(key), kind: kind} // a fence must not pin the caller's buffer
		sh.m[r.key] = r
		f.keyCount[kind].Add(1)
		f.keyBytes[kind].Add(int64(len(r.key) + keyFenceOverhead))
	} else {
		unlink(r)
		if kind == explicitFence && r.kind == fillFence {
			// Once explicit, a key stays under the explicit bound: a
			// later fill raises its fence without exposing it to the
			// flood of fills.
			size := int64(len(r.key) + keyFenceOverhead)
			f.keyCount[fillFence].Add(-1)
			f.keyBytes[fillFence].Add(-size)
			f.keyCount[explicitFence].Add(1)
			f.keyBytes[explicitFence].Add(size)
			r.kind = explicitFence
		}
	}
	r.version, r.expires, r.src = version, now.Add(f.Window), src
	sh.pushFront(r)
	kind = r.kind
	lost := f.trim(sh, kind, r)
	sh.mu.Unlock()
	if f.over(kind) {
		lost += f.trimOthers(kind, r)
	}
	if lost > 0 && kind == explicitFence {
		dropped = f.droppedExplicit.Add(int64(lost))
	}
	return prev, true, dropped
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

// Covered reports whether a shared entry of key whose data was read at
// read (wall clock) must be treated as absent: read before its key's fence,
// or before a bulk fence of a prefix of key plus skew (a bulk invalidation
// announces no value of its own, so values read just after it by a host
// whose clock is behind are reloaded once more). Key fences give no skew:
// a Set's own entry is read exactly at its fence. An entry whose read time
// is not known (known false: not kept, or ahead of this host's clock by
// more than skew) is covered by bulk fences only. now is the Cache's clock.
func (f *Fences) Covered(key string, read time.Time, known bool, now time.Time, skew time.Duration) bool {
	return f.covering(key, read, known, now, skew).Why != WhyNone
}

// covering is Covered, saying which fence covers the entry: the key's
// (its version and source) or a bulk one (its prefix and version).
func (f *Fences) covering(key string, read time.Time, known bool, now time.Time, skew time.Duration) Judgement {
	read = read.Truncate(time.Microsecond)
	if known {
		sh := &f.keys[maphash.String(fenceSeed, key)&(keyFenceShards-1)]
		sh.mu.Lock()
		v, ok := f.floor(sh, key, now)
		var src Source
		if ok {
			src = sh.m[key].src
		}
		sh.mu.Unlock()
		if ok && read.Before(v) {
			return Judgement{Why: WhyOlderThanKey, Fence: v, Source: src}
		}
	}
	if f.bulkCount.Load() == 0 {
		return Judgement{}
	}
	v := f.bulkView.Load()
	if v == nil {
		return Judgement{}
	}
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

// Len returns how many key and bulk fences live, for tests and stats.
func (f *Fences) Len() (keys, bulk int) {
	return int(f.keyCount[fillFence].Load() + f.keyCount[explicitFence].Load()), int(f.bulkCount.Load())
}
