package coherence

import (
	"sync"
	"sync/atomic"
	"time"
)

// The bounds of tags. An entry carries at most MaxTags tags of at most
// MaxTagLen bytes each. At most MaxTagFences tags are fenced at once:
// beyond that the least recently noted fence is folded into the floor,
// a fence that applies to every tagged entry, so that a tag whose fence
// was dropped early still covers what it covered (and, until the floor
// expires, every other tagged entry read before it too: they reload once
// more).
const (
	MaxTags      = 16
	MaxTagLen    = 128
	MaxTagFences = 100_000
)

// TagState is what the tag fences make of an entry.
type TagState uint8

// The states of TagFences.Local and TagFences.Shared.
const (
	// TagsClear: no fence covers the entry.
	TagsClear TagState = iota
	// TagsExpired: a tag of the entry was expired (ExpireTag) after its
	// data was read: it is served only as stale (fail-safe, soft
	// timeout) until it is replaced.
	TagsExpired
	// TagsInvalidated: a tag of the entry was invalidated after its data
	// was read: the entry is absent.
	TagsInvalidated
)

// TagFences is the fence of every tag invalidated or expired lately: an
// entry whose data was read before the fence of one of its tags is
// covered. It is compared with the entry's own read time (its version),
// never with the reader's time, and noting a fence again with the same or
// an older version changes nothing: a fence moves only forward, to a
// newer invalidation, never to the moment it was learnt or replayed.
//
// Local items are compared on the Cache's clock, shared entries on the
// wall clock; a fence keeps both (see Note). Nothing walks the tiers: an
// invalidation is a map write, and every read of a tagged entry asks
// here, so a tier holds covered entries until they expire or are
// replaced, and a load that read its source before the fence serves its
// own callers but is never stored (the caller asks Local before
// storing).
//
// A fence lives until Window after its version (on the Cache's clock):
// by then every entry read before it has expired (Window covers the
// longest TTL a loader may set, plus StaleFor).
type TagFences struct {
	// Window is how long a fence lives. Set once, before use.
	Window time.Duration

	// live counts the fences and the floor, so that a read of a tagged
	// entry looks nothing up while there are none.
	live atomic.Int32
	// fences maps a tag to its *tagFence, and floor holds the floor's (nil
	// when none). Both are read without a lock: a fence is never modified
	// once published, a note stores a new one. Only writers take mu.
	fences sync.Map
	floor  atomic.Pointer[tagFence]
	mu     sync.Mutex
	n      int // the fences in fences; guarded by mu
	// queue holds the tags in the order their fences were last raised,
	// oldest first from head; a record whose gen is not its fence's is a
	// leftover of an earlier note. Guarded by mu.
	queue []tagRecord
	head  int
	gen   uint64
}

// tagFence is one tag's fence: entries read before inv are absent, those
// read before exp are stale. Immutable once stored in TagFences.
type tagFence struct {
	inv, exp stamp
	expires  time.Time // the Cache's clock
	gen      uint64
}

// stamp is one fence's version on both clocks: wall, to the microsecond
// (shared entries, other instances), and local, the Cache's clock (local
// items).
type stamp struct{ wall, local time.Time }

type tagRecord struct {
	tag string
	gen uint64
}

// raise moves s forward to o; it reports whether it moved.
func (s *stamp) raise(o stamp) bool {
	if !o.wall.After(s.wall) {
		return false
	}
	*s = o
	return true
}

// state is what f makes of an entry read at read, on the clock of.
func (f *tagFence) state(read time.Time, wall bool, skew time.Duration) TagState {
	inv, exp := f.inv.local, f.exp.local
	if wall {
		inv, exp = f.inv.wall.Add(skew), f.exp.wall.Add(skew)
	}
	switch {
	case !f.inv.wall.IsZero() && read.Before(inv):
		return TagsInvalidated
	case !f.exp.wall.IsZero() && read.Before(exp):
		return TagsExpired
	}
	return TagsClear
}

// Live reports whether any fence lives: while none does, no entry is
// covered and a read need not ask.
func (t *TagFences) Live() bool { return t.live.Load() != 0 }

// Note raises tag's fence to the version given on both clocks: wall (the
// wall clock, as published) and local (the Cache's clock: for an
// invalidation of this instance, the moment it was made; for one received,
// its version on this clock plus the clock skew allowed, since items this
// instance read just after it may still be older than the writer's
// change). expire notes an ExpireTag, which leaves covered entries stale
// rather than absent. now is the Cache's clock. It reports whether the
// fence moved, and whether a fence was folded into the floor to stay
// within MaxTagFences.
func (t *TagFences) Note(tag string, wall, local time.Time, expire bool, now time.Time) (moved, folded bool) {
	s := stamp{wall: wall.Truncate(time.Microsecond).Round(0), local: local}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expire(now)
	var f tagFence
	old, ok := t.get(tag)
	if ok {
		f = *old
	}
	if expire {
		moved = f.exp.raise(s)
	} else {
		moved = f.inv.raise(s)
	}
	if !moved {
		return false, false
	}
	if e := local.Add(t.Window); e.After(f.expires) {
		f.expires = e
	}
	t.gen++
	f.gen = t.gen
	t.fences.Store(tag, &f)
	if !ok {
		t.n++
		t.live.Add(1)
	}
	t.queue = append(t.queue, tagRecord{tag: tag, gen: f.gen})
	for t.n > MaxTagFences {
		t.fold()
		folded = true
	}
	if n := len(t.queue) - t.head; n > 2*t.n+64 {
		t.compact()
	}
	return true, folded
}

// get returns tag's fence, if one is stored.
func (t *TagFences) get(tag string) (*tagFence, bool) {
	v, ok := t.fences.Load(tag)
	if !ok {
		return nil, false
	}
	return v.(*tagFence), true
}

// drop removes tag's fence. The caller holds mu.
func (t *TagFences) drop(tag string) {
	t.fences.Delete(tag)
	t.n--
	t.live.Add(-1)
}

// fold moves the least recently raised fence into the floor. The caller
// holds mu.
func (t *TagFences) fold() {
	for t.head < len(t.queue) {
		r := t.queue[t.head]
		t.queue[t.head] = tagRecord{}
		t.head++
		f, ok := t.get(r.tag)
		if !ok || f.gen != r.gen {
			continue
		}
		var floor tagFence
		if cur := t.floor.Load(); cur != nil {
			floor = *cur
		} else {
			t.live.Add(1)
		}
		floor.inv.raise(f.inv)
		floor.exp.raise(f.exp)
		if f.expires.After(floor.expires) {
			floor.expires = f.expires
		}
		t.floor.Store(&floor)
		t.drop(r.tag)
		return
	}
}

// expire drops the fences whose time has passed, oldest first, and the
// floor once it has. The caller holds mu.
func (t *TagFences) expire(now time.Time) {
	for t.head < len(t.queue) {
		r := t.queue[t.head]
		f, ok := t.get(r.tag)
		if ok && f.gen == r.gen {
			if now.Before(f.expires) {
				break
			}
			t.drop(r.tag)
		}
		t.queue[t.head] = tagRecord{}
		t.head++
	}
	if f := t.floor.Load(); f != nil && !now.Before(f.expires) {
		t.floor.Store(nil)
		t.live.Add(-1)
	}
	if t.head > 0 && t.head >= len(t.queue)/2 {
		n := copy(t.queue, t.queue[t.head:])
		clear(t.queue[n:])
		t.queue, t.head = t.queue[:n], 0
	}
}

// compact drops the queue's leftover records. The caller holds mu.
func (t *TagFences) compact() {
	q := t.queue[:0]
	for _, r := range t.queue[t.head:] {
		if f, ok := t.get(r.tag); ok && f.gen == r.gen {
			q = append(q, r)
		}
	}
	clear(t.queue[len(q):])
	t.queue, t.head = q, 0
}

// Local is what the fences make of a local item with tags whose data was
// read at read (the Cache's clock). now is the Cache's clock.
func (t *TagFences) Local(tags []string, read, now time.Time) TagState {
	return t.state(tags, read, false, 0, now)
}

// Shared is what the fences make of a shared entry with tags whose data
// was read at read (wall clock), plus skew: the invalidation announces no
// value of its own, so an entry read just after it by a host whose clock
// is ahead is taken for older. An entry whose read time is not known
// (known false) is covered by every fence of its tags. now is the Cache's
// clock.
func (t *TagFences) Shared(tags []string, read time.Time, known bool, now time.Time, skew time.Duration) TagState {
	if !known {
		read = time.Time{}
	}
	return t.state(tags, read.Truncate(time.Microsecond), true, skew, now)
}

func (t *TagFences) state(tags []string, read time.Time, wall bool, skew time.Duration, now time.Time) TagState {
	if len(tags) == 0 || t.live.Load() == 0 {
		return TagsClear
	}
	st := TagsClear
	if f := t.floor.Load(); f != nil && now.Before(f.expires) {
		st = f.state(read, wall, skew)
	}
	for _, tag := range tags {
		if st == TagsInvalidated {
			break
		}
		if f, ok := t.get(tag); ok && now.Before(f.expires) {
			st = max(st, f.state(read, wall, skew))
		}
	}
	return st
}

// Len returns how many tag fences live, the floor included.
func (t *TagFences) Len() int { return int(t.live.Load()) }
