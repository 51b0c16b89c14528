package coherence

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The ledger's bounds. A key has one record, updated in place, however
// often it is noted, so the ledger is bounded by keys: those whose newest
// version came from fills only apart from those an explicit write or an
// invalidation noted, so that a cache filling many keys never pushes out
// the record of a Set. Past a bound the least recently noted record goes
// first: of the noting key's shard (one of 64), so the bound holds for
// the whole ledger while the order of the drops is least-recently-noted
// per shard. Dropping the record of an explicit write or an invalidation
// early may let an instance read an entry it covered from the shared
// tier, so the Cache warns about those.
const (
	// MaxKeyFences bounds the keys an explicit write or an invalidation
	// noted (a key noted by both a fill and those counts here).
	MaxKeyFences     = 100_000
	MaxKeyFenceBytes = 32 << 20
	// MaxFillFences bounds the keys noted by fills only: reads stay
	// monotonic per instance for this many recently filled keys.
	MaxFillFences     = 50_000
	MaxFillFenceBytes = 16 << 20
	// keyFenceOverhead is what a record costs besides its key, measured:
	// the record and its map entry.
	keyFenceOverhead = 160
	ledgerShards     = 64
)

// Ledger is, per key, the newest version this instance served or wrote,
// and where it came from (Source): a read-path fill or a load that served
// its callers, an explicit write of this instance (Set, Delete), an
// invalidation heard of. A shared entry read before its key's version is
// older than something this instance has served, written or applied, and
// is treated as absent: the next load overwrites it (Model.AcceptShared).
//
// Fills note theirs so that reads are monotonic per instance, even after
// the local copy expired and a slow load of another instance put older
// data in the shared tier; Set notes its entry's version, Delete the
// moment of the delete, an invalidation its Version; a load whose ticket
// an explicit write or an invalidation outdated notes the version it
// served (NoteServed).
//
// Versions are wall-clock times (driver.Meta.Version), truncated to the
// microsecond (the Bus's precision), so that a Set's own entry is never
// taken for an older one. Expiry runs on the Cache's clock: a record
// expires Window after its last note, when every entry written before it
// has expired from the shared tier (unless a loader set a longer TTL with
// SetTTL).
type Ledger struct {
	// Window is how long a record lives. Set once, before use.
	Window time.Duration

	shards [ledgerShards]ledgerShard
	// count and bytes are the records of each kind (fill, explicit) in
	// every shard, against their bounds.
	count, bytes [2]atomic.Int64
	// droppedExplicit counts the records of explicit writes and
	// invalidations dropped before their time, for the Cache's warning.
	droppedExplicit atomic.Int64
	// forgot is the newest sequence number (see Model.Explicit) of a
	// record that left the ledger, expired or dropped: a ticket older than
	// it is outdated whatever its key.
	forgot atomic.Uint64
}

var ledgerSeed = maphash.MakeSeed()

// ledgerShard is a 64th of the ledger, on its own lock: every shared
// read asks one shard, and every fill writes one. Each key has one record;
// it sits in one of two lists, least recently noted last: fills (a key
// only fills fenced) and explicit (a key an explicit write or an
// invalidation fenced).
type ledgerShard struct {
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
	src  Source
	kind fenceKind
	// seq is the sequence number of the key's last explicit write or
	// invalidation applied (Model.Explicit), zero when none: it outdates
	// the tickets taken before it.
	seq        uint64
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
func (sh *ledgerShard) list(kind fenceKind) *keyFence {
	l := &sh.lists[kind]
	if l.next == nil {
		l.next, l.prev = l, l
	}
	return l
}

// pushFront puts r first (most recently noted) in its kind's list.
func (sh *ledgerShard) pushFront(r *keyFence) {
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
func (l *Ledger) remove(sh *ledgerShard, r *keyFence) {
	unlink(r)
	delete(sh.m, r.key)
	l.count[r.kind].Add(-1)
	l.bytes[r.kind].Add(-int64(len(r.key) + keyFenceOverhead))
	if r.seq != 0 {
		raiseTo(&l.forgot, r.seq)
	}
}

// expire drops the shard's fences whose time has passed: each list's
// last ones, since a fence's expiry is its last note plus Window. The
// caller holds sh.mu.
func (l *Ledger) expire(sh *ledgerShard, now time.Time) {
	for kind := range sh.lists {
		lst := sh.list(fenceKind(kind))
		for lst.prev != lst && !now.Before(lst.prev.expires) {
			l.remove(sh, lst.prev)
		}
	}
}

// floor returns key's fence, if one lives with a version. The caller
// holds sh.mu.
func (l *Ledger) floor(sh *ledgerShard, key string, now time.Time) (time.Time, bool) {
	l.expire(sh, now)
	if r, ok := sh.m[key]; ok && !r.version.IsZero() {
		return r.version, true
	}
	return time.Time{}, false
}

// over reports whether kind's key fences exceed their bounds.
func (l *Ledger) over(kind fenceKind) bool {
	b := keyFenceBounds[kind]
	return l.count[kind].Load() > b.n || l.bytes[kind].Load() > b.bytes
}

// trim drops the least recently noted fences of kind from shard (whose
// lock the caller holds) while they exceed their bounds, but never keep,
// the fence just noted. It returns how many it dropped; the caller goes on
// with the other shards if that was not enough (trimOthers).
func (l *Ledger) trim(sh *ledgerShard, kind fenceKind, keep *keyFence) (lost int) {
	lst := sh.list(kind)
	for l.over(kind) && lst.prev != lst && lst.prev != keep {
		l.remove(sh, lst.prev)
		lost++
	}
	return lost
}

// trimOthers is trim across every shard, one lock at a time, for the rare
// case where the noting key's shard had nothing of kind left to drop.
func (l *Ledger) trimOthers(kind fenceKind, keep *keyFence) (lost int) {
	for i := range l.shards {
		if !l.over(kind) {
			break
		}
		sh := &l.shards[i]
		sh.mu.Lock()
		lost += l.trim(sh, kind, keep)
		sh.mu.Unlock()
	}
	return lost
}

// NoteKey raises key's fence to version (wall clock) at now (the Cache's
// clock), src telling a fill from an explicit write or an invalidation.
// It returns the fence before (zero when none lived) and reports
// whether version is newer than it, and how many explicit key fences were
// ever dropped early when this note dropped one (0 otherwise). A key's
// fence is one record, updated in place: noting a key again costs no
// room.
func (l *Ledger) NoteKey(key string, version, now time.Time, src Source) (prev time.Time, fresh bool, dropped int64) {
	return l.noteKey(key, version, now, src, false)
}

// NoteServed records that a load whose ticket was outdated served its
// value, read at version, to its callers without storing it: the key's
// fence rises to version unless this instance's own explicit write is the
// newest version known (an explicit write wins on the instance that made
// it). A later shared read of anything older than the value served is
// then absent, so that none of those callers' next reads goes back.
func (l *Ledger) NoteServed(key string, version, now time.Time) {
	l.noteKey(key, version, now, FromFill, true)
}

func (l *Ledger) noteKey(key string, version, now time.Time, src Source, underWrite bool) (prev time.Time, fresh bool, dropped int64) {
	version = version.Truncate(time.Microsecond)
	sh := l.shard(key)
	sh.mu.Lock()
	prev, seen := l.floor(sh, key, now)
	if seen && (!version.After(prev) || underWrite && sh.m[key].src == FromWrite) {
		sh.mu.Unlock()
		return prev, false, 0
	}
	r := l.record(sh, key, src != FromFill)
	r.version, r.expires, r.src = version, now.Add(l.Window), src
	return prev, true, l.placed(sh, r)
}

// noteSeq leaves seq, the number of an explicit write or invalidation of
// key that just finished (Model.Explicit), in key's record, which lives
// Window from now (the Cache's clock) and is explicit from then on. The
// record's version is left as it is (the write noted its own with
// NoteKey); a record made here has none (zero), and covers no entry.
func (l *Ledger) noteSeq(key string, seq uint64, now time.Time) {
	sh := l.shard(key)
	sh.mu.Lock()
	l.expire(sh, now)
	r := l.record(sh, key, true)
	r.seq, r.expires = seq, now.Add(l.Window)
	l.placed(sh, r) // an early drop is counted; the next NoteKey's caller warns
}

// outdates reports whether an explicit write or an invalidation of key
// finished after the ticket numbered seq was taken: key's record carries
// a later number, or a record with one left the ledger since. An expired
// record still counts: a ticket older than it is older than Window.
func (l *Ledger) outdates(key string, seq uint64) bool {
	if l.forgot.Load() > seq {
		return true
	}
	sh := l.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r, ok := sh.m[key]
	return ok && r.seq > seq
}

func (l *Ledger) shard(key string) *ledgerShard {
	return &l.shards[maphash.String(ledgerSeed, key)&(ledgerShards-1)]
}

// record returns key's record, unlinked from its list, made (with no
// version) when none lives; explicit moves it under the explicit bound.
// The caller holds sh.mu and places it again (placed).
func (l *Ledger) record(sh *ledgerShard, key string, explicit bool) *keyFence {
	kind := fillFence
	if explicit {
		kind = explicitFence
	}
	r := sh.m[key]
	if r == nil {
		if sh.m == nil {
			sh.m = make(map[string]*keyFence)
		}
		r = &keyFence{key: strings.Clone(key), kind: kind} // a fence must not pin the caller's buffer
		sh.m[r.key] = r
		l.count[kind].Add(1)
		l.bytes[kind].Add(int64(len(r.key) + keyFenceOverhead))
		return r
	}
	unlink(r)
	if kind == explicitFence && r.kind == fillFence {
		// Once explicit, a key stays under the explicit bound: a
		// later fill raises its fence without exposing it to the
		// flood of fills.
		size := int64(len(r.key) + keyFenceOverhead)
		l.count[fillFence].Add(-1)
		l.bytes[fillFence].Add(-size)
		l.count[explicitFence].Add(1)
		l.bytes[explicitFence].Add(size)
		r.kind = explicitFence
	}
	return r
}

// placed puts r, just noted, first in its list, unlocks sh and trims the
// ledger to its bounds, never dropping r. It returns how many explicit
// records were ever dropped early when this note dropped one (0
// otherwise).
func (l *Ledger) placed(sh *ledgerShard, r *keyFence) (dropped int64) {
	sh.pushFront(r)
	kind := r.kind
	lost := l.trim(sh, kind, r)
	sh.mu.Unlock()
	if l.over(kind) {
		lost += l.trimOthers(kind, r)
	}
	if lost > 0 && kind == explicitFence {
		dropped = l.droppedExplicit.Add(int64(lost))
	}
	return dropped
}

// Newest returns key's newest version and its source, if a record lives.
func (l *Ledger) Newest(key string, now time.Time) (version time.Time, src Source, ok bool) {
	sh := l.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	version, ok = l.floor(sh, key, now)
	if ok {
		src = sh.m[key].src
	}
	return version, src, ok
}

// Len returns how many keys the ledger holds, for tests and stats.
func (l *Ledger) Len() int {
	return int(l.count[fillFence].Load() + l.count[explicitFence].Load())
}
