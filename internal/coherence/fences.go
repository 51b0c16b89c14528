package coherence

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The bulk fences' bounds: a bulk fence comes with every InvalidatePrefix
// and Clear, rare, and matters for the whole window. A prefix has one
// record, updated in place however often it is invalidated, so the bounds
// count prefixes; past one the least recently noted goes first, with a
// warning.
const (
	MaxBulkFences = 10_000
	MaxBulkBytes  = 4 << 20
	// fenceOverhead is what a bulk fence costs besides its prefix,
	// measured: its record and its map entry, with its share of the view.
	fenceOverhead = 272
)

// Fences remembers, for a window, the newest bulk invalidation this
// instance made or applied per prefix ("" for every key), one record per
// prefix. A shared entry whose data was read before the fence of a
// prefix of its key (plus the clock skew allowed) is treated as absent:
// the shared tier cannot delete by prefix, so this is its only way to
// forget. A prefix's record also carries the sequence number of its last
// bulk invalidation (Model.Bulk), which outdates the tickets of its keys
// taken before it. Versions are wall-clock times truncated to the
// microsecond; expiry runs on the Cache's clock, Window after the last
// note.
type Fences struct {
	// Window is how long a fence lives. Set once, before use.
	Window time.Duration

	// bulkCount is the number of bulk records, so that a read skips the
	// bulk view while there are none (the common case).
	bulkCount atomic.Int32
	bulkMu    sync.Mutex
	m         map[string]*bulkRecord // prefix → its record; guarded by bulkMu
	// list is the sentinel of the records, least recently noted (so
	// first to expire) last; guarded by bulkMu.
	list  bulkRecord
	bytes int         // the records' size, roughly; guarded by bulkMu
	lens  map[int]int // prefix length → records of that length; guarded by bulkMu
	// bulkView is what a read sees of the bulk fences, without a lock:
	// an immutable copy that each note replaces (see bulkView).
	bulkView atomic.Pointer[bulkView]
	// droppedBulk counts the fences dropped before their time, for the
	// Cache's warning.
	droppedBulk atomic.Int64
	// forgot is the newest sequence number of a record that left, expired
	// or dropped: a ticket older than it is outdated whatever its key.
	forgot atomic.Uint64
}

// bulkRecord is one prefix's fence.
type bulkRecord struct {
	prefix  string
	version time.Time // wall clock, to the microsecond; zero: none (seq only)
	expires time.Time // the Cache's clock
	seq     uint64    // the last bulk invalidation's number, zero when none
	prev    *bulkRecord
	next    *bulkRecord
}

// NoteBulk records a bulk invalidation of prefix at version (wall clock)
// at now (the Cache's clock), and reports whether it is newer than the
// last one of the same prefix, and how many bulk fences were ever dropped
// early when this note dropped one (0 otherwise).
func (f *Fences) NoteBulk(prefix string, version, now time.Time) (fresh bool, dropped int64) {
	version = version.Truncate(time.Microsecond)
	f.bulkMu.Lock()
	defer f.bulkMu.Unlock()
	f.expire(now)
	if r, ok := f.m[prefix]; ok && !r.version.IsZero() && !version.After(r.version) {
		return false, 0
	}
	r := f.record(prefix)
	r.version, r.expires = version, now.Add(f.Window)
	return true, f.placed(r)
}

// noteSeq leaves seq, the number of a bulk invalidation of prefix
// (Model.Bulk), in prefix's record, which lives Window from now (the
// Cache's clock). A record made here has no version: it covers no entry.
// The caller holds the bulk lock exclusively.
func (f *Fences) noteSeq(prefix string, seq uint64, now time.Time) {
	f.bulkMu.Lock()
	defer f.bulkMu.Unlock()
	f.expire(now)
	r := f.record(prefix)
	r.seq, r.expires = seq, now.Add(f.Window)
	f.placed(r)
}

// record returns prefix's record, unlinked, made when none lives. The
// caller holds bulkMu and places it again (placed).
func (f *Fences) record(prefix string) *bulkRecord {
	if r, ok := f.m[prefix]; ok {
		unlinkBulk(r)
		return r
	}
	if f.m == nil {
		f.m = make(map[string]*bulkRecord)
		f.lens = make(map[int]int)
	}
	r := &bulkRecord{prefix: strings.Clone(prefix)}
	f.m[r.prefix] = r
	f.lens[len(prefix)]++
	f.bytes += len(prefix) + fenceOverhead
	f.bulkCount.Add(1)
	return r
}

// placed puts r, just noted, first, drops the least recently noted
// records while the fences exceed their bounds (never r), and publishes
// the view. It returns how many fences were ever dropped early when this
// note dropped one (0 otherwise). The caller holds bulkMu.
func (f *Fences) placed(r *bulkRecord) (dropped int64) {
	l := f.sentinel()
	r.prev, r.next = l, l.next
	l.next.prev = r
	l.next = r
	lost := 0
	for (len(f.m) > MaxBulkFences || f.bytes > MaxBulkBytes) && l.prev != r {
		f.remove(l.prev)
		lost++
	}
	if lost > 0 {
		dropped = f.droppedBulk.Add(int64(lost))
	}
	f.publishLocked(r, lost > 0)
	return dropped
}

func (f *Fences) sentinel() *bulkRecord {
	if f.list.next == nil {
		f.list.next, f.list.prev = &f.list, &f.list
	}
	return &f.list
}

func unlinkBulk(r *bulkRecord) {
	r.prev.next, r.next.prev = r.next, r.prev
	r.prev, r.next = nil, nil
}

// remove drops r. The caller holds bulkMu.
func (f *Fences) remove(r *bulkRecord) {
	unlinkBulk(r)
	delete(f.m, r.prefix)
	if f.lens[len(r.prefix)]--; f.lens[len(r.prefix)] == 0 {
		delete(f.lens, len(r.prefix))
	}
	f.bytes -= len(r.prefix) + fenceOverhead
	f.bulkCount.Add(-1)
	if r.seq != 0 {
		raiseTo(&f.forgot, r.seq)
	}
}

// expire drops the records whose time has passed: the last ones, since
// a record's expiry is its last note plus Window. The caller holds
// bulkMu.
func (f *Fences) expire(now time.Time) {
	l := f.sentinel()
	for l.prev != l && !now.Before(l.prev.expires) {
		f.remove(l.prev)
	}
}

// bulkView is an immutable copy of the bulk fences, which Covered and the
// ticket check read without a lock: a shared read never waits for a bulk
// invalidation, nor for another shared read. base is the fences as of the
// last rebuild, delta the ones noted since (at most bulkDelta, each
// newer than base's record of the same prefix, if any); lens the distinct
// prefix lengths, shortest first. A record dropped or expired since the
// last rebuild may linger in base until the next one; Covered ignores
// expired ones, and a dropped one only covers more.
type bulkView struct {
	base, delta map[string]bulkFence
	lens        []int
}

type bulkFence struct {
	version, expires time.Time
	seq              uint64
}

// bulkDelta bounds a bulkView's delta: each note copies the delta, and
// every bulkDelta notes the whole table is copied, so a note costs about
// bulkDelta + live fences / bulkDelta map writes.
const bulkDelta = 64

// publishLocked replaces the view with one that holds r's new fence,
// rebuilding it whole when the delta is full or rebuild is set (records
// were dropped). The caller holds bulkMu.
func (f *Fences) publishLocked(r *bulkRecord, rebuild bool) {
	v := &bulkView{lens: make([]int, 0, len(f.lens))}
	for n := range f.lens {
		v.lens = append(v.lens, n)
	}
	slices.Sort(v.lens)
	old := f.bulkView.Load()
	if rebuild || old == nil || len(old.delta) >= bulkDelta {
		v.base = make(map[string]bulkFence, len(f.m))
		for p, r := range f.m {
			v.base[p] = bulkFence{version: r.version, expires: r.expires, seq: r.seq}
		}
		f.bulkView.Store(v)
		return
	}
	v.base = old.base
	v.delta = make(map[string]bulkFence, len(old.delta)+1)
	for p, e := range old.delta {
		v.delta[p] = e
	}
	v.delta[r.prefix] = bulkFence{version: r.version, expires: r.expires, seq: r.seq}
	f.bulkView.Store(v)
}

// lookup calls fn with the view's fence of each prefix of key, shortest
// first, until fn returns true.
func (f *Fences) lookup(key string, fn func(prefix string, fe bulkFence) bool) {
	if f.bulkCount.Load() == 0 {
		return
	}
	v := f.bulkView.Load()
	if v == nil {
		return
	}
	for _, n := range v.lens {
		if n > len(key) {
			return
		}
		p := key[:n]
		fe, ok := v.delta[p]
		if !ok {
			fe, ok = v.base[p]
		}
		if ok && fn(p, fe) {
			return
		}
	}
}

// covering reports which bulk fence, if any, covers a shared entry of key
// whose data was read at read (wall clock): one of a prefix of key whose
// version plus skew is after read (a bulk invalidation announces no value
// of its own, so values read just after it by a host whose clock is
// behind are reloaded once more); every live one when the read time is
// not known. now is the Cache's clock.
func (f *Fences) covering(key string, read time.Time, known bool, now time.Time, skew time.Duration) (j Judgement) {
	read = read.Truncate(time.Microsecond)
	f.lookup(key, func(p string, fe bulkFence) bool {
		if !fe.version.IsZero() && now.Before(fe.expires) && (!known || read.Before(fe.version.Add(skew))) {
			j = Judgement{Why: WhyBulk, Fence: fe.version, Prefix: p}
			return true
		}
		return false
	})
	return j
}

// outdates reports whether a bulk invalidation of a prefix of key
// finished after the ticket numbered seq was taken: the record of a
// prefix of key carries a later number, or a record with one left since.
// An expired record still counts: a ticket older than it is older than
// Window. The caller holds the bulk lock (shared), so no bulk
// invalidation is between its number and its view.
func (f *Fences) outdates(key string, seq uint64) (out bool) {
	if f.forgot.Load() > seq {
		return true
	}
	f.lookup(key, func(_ string, fe bulkFence) bool {
		out = fe.seq > seq
		return out
	})
	return out
}

// Len returns how many bulk fences live, for tests and stats.
func (f *Fences) Len() int { return int(f.bulkCount.Load()) }
