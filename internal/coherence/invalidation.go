package coherence

import (
	"strings"
	"time"
)

// Local is what the invalidation side needs of a Cache: its I/O on the
// local tier and its flights. The Cache implements it; every decision of
// what to drop, note and forget is made here.
type Local interface {
	// Held returns the version (wall clock) of key's local copy, if the
	// local tier holds one.
	Held(key string) (version time.Time, ok bool)
	// Drop removes key's local copy.
	Drop(key string)
	// Each calls fn with the key and version of every local item, dropping
	// those for which fn returns true (nothing for a tier that cannot be
	// visited), and returns how many it dropped.
	Each(fn func(key string, version time.Time) (drop bool)) int
	// Forget makes the next read of target start a new flight rather than
	// join one in progress: of the key target, or with prefix set of every
	// key under target ("" for all).
	Forget(target string, prefix bool)
}

// InvKind is an invalidation's kind as the invalidation side sees it.
type InvKind uint8

// The kinds of an invalidation.
const (
	// InvKey invalidates one key.
	InvKey InvKind = iota
	// InvBulk invalidates every key under a prefix ("" for every key).
	InvBulk
	// InvTag invalidates every value carrying a tag.
	InvTag
	// InvTagExpire expires every value carrying a tag: stale only.
	InvTagExpire
)

// Received is what applying an invalidation received from another
// instance did, for the Cache's events and warnings.
type Received struct {
	// Applied: it dropped a local copy, or was newer than the last one of
	// its target and found no newer copy; else it is counted as ignored
	// (stale).
	Applied bool
	// Clamped: its version was ahead of this host's clock by more than
	// the skew allowed, and was taken as now (Clamp).
	Clamped bool
	// Dropped is, when applying it dropped a key or bulk fence early to
	// stay within a bound, how many ever were (0 otherwise); Folded, that
	// a tag fence was folded into the floor.
	Dropped int64
	Folded  bool
}

// Receive is the one rule for an invalidation of kind on target at
// version (wall clock), received from another instance: wallNow is this
// host's wall clock, now the Cache's, skew the clock skew allowed. It is
// applied even when it is not newer than the last one of its target:
// applying only drops copies read before its version (Invalidates), so a
// repeat is harmless, and one from a host whose clock lags the last
// writer's must still drop what was read before it. A version from the
// future is taken as now (Clamp).
//
//   - a key: its fence rises (FromInvalidation), and its local copy read
//     before the version plus skew is dropped in an explicit write, so
//     that the loads in progress of the key store nothing (applyKey);
//   - a prefix ("" for every key): its fence rises and, while the Bus is
//     down (a replay before BusUp, whose resynchronisation empties the
//     local tier anyway), only the loads in progress under it are
//     outdated, at once: one that read its origin before the invalidation
//     and ends before BusUp stores nothing. Otherwise the local tier is
//     walked too (applyBulk);
//   - a tag: its fence rises, compared with local items' versions plus
//     skew (items read just after the writer's change by a host whose
//     clock is ahead may still be older than it); a replay carries the
//     original version, so it never moves the fence past where it was
//     (NoteTag).
//
// The caller has checked that target is one of its keys, prefixes or
// tags.
func (m *Model) Receive(kind InvKind, target string, version, wallNow, now time.Time, skew time.Duration, l Local) (r Received) {
	version, r.Clamped = Clamp(version, wallNow, skew)
	switch kind {
	case InvKey:
		_, fresh, dropped := m.NoteKey(target, version, now, FromInvalidation)
		held, gone := m.applyKey(target, version, now, skew, l)
		r.Applied, r.Dropped = gone || (fresh && !held), dropped
	case InvBulk:
		fresh, dropped := m.NoteBulk(target, version, now)
		r.Dropped = dropped
		if m.Down() {
			m.outdateInFlight(target, now, l)
			r.Applied = fresh
			break
		}
		r.Applied = m.applyBulk(target, version, now, skew, l) > 0 || fresh
	case InvTag, InvTagExpire:
		r.Applied, r.Folded = m.NoteTag(target, version, version.Add(skew), kind == InvTagExpire, now, l)
	}
	return r
}

// applyKey drops the local copy of key if it was read before version
// (wall clock) plus skew (Invalidates), in an explicit write (Explicit),
// so that the read-path writes of key in progress write nothing, and
// makes the next read of key start a new flight. now is the Cache's
// clock. It reports whether a copy was held and whether it was dropped.
func (m *Model) applyKey(key string, version, now time.Time, skew time.Duration, l Local) (held, dropped bool) {
	_ = m.Explicit(key, now, func() error {
		read, ok := l.Held(key)
		held = ok
		if ok && Invalidates(version, read, skew) {
			l.Drop(key)
			dropped = true
		}
		return nil
	})
	l.Forget(key, false)
	return held, dropped
}

// InvalidateBulk is this instance's own bulk invalidation of prefix ("" for
// every key) at version (wall clock): its fence first, so that a shared
// read from now on sees it, then applyBulk. now is the Cache's clock. It
// returns how many bulk fences were ever dropped early when this one
// dropped one (0 otherwise).
func (m *Model) InvalidateBulk(prefix string, version, now time.Time, skew time.Duration, l Local) (dropped int64) {
	_, dropped = m.NoteBulk(prefix, version, now)
	m.applyBulk(prefix, version, now, skew, l)
	return dropped
}

// applyBulk drops the local items under prefix ("" for all) read before
// version (wall clock) plus skew (Invalidates), after outdating the
// read-path writes in progress of keys under prefix (Bulk) and their
// flights. The caller has noted the fence, if any, first. It returns how
// many items it dropped.
func (m *Model) applyBulk(prefix string, version, now time.Time, skew time.Duration, l Local) int {
	m.outdateInFlight(prefix, now, l)
	return l.Each(func(k string, read time.Time) bool {
		return strings.HasPrefix(k, prefix) && Invalidates(version, read, skew)
	})
}

// outdateInFlight makes the loads and shared reads in progress of keys
// under prefix ("" for all) write nothing (Bulk), and the next read of
// such a key start a new flight.
func (m *Model) outdateInFlight(prefix string, now time.Time, l Local) {
	m.Bulk(prefix, now)
	l.Forget(prefix, true)
}

// Resync empties the local tier before it is trusted again, after the
// Bus was down (it may have missed invalidations): applyBulk of every key
// with version until, one no item can be newer than (the caller's wall
// clock plus the longest TTL: a Version is read from this host's clock,
// or refused ahead of it by more than the skew), so the reads in progress
// write nothing either. Then the local tier is trusted again (SetDown):
// until it is emptied, items are judged as with the Bus down.
func (m *Model) Resync(until, now time.Time, l Local) {
	m.applyBulk("", until, now, 0, l)
	m.SetDown(false)
}

// NoteTag raises tag's fence (TagFences.Note: wall as shared entries are
// compared with it, local as local items are; expire for ExpireTag), and
// makes every read that starts from now on start a new flight rather than
// join a load that may have read the tag's data before the fence (a
// flight's tags are known only once it loaded). now is the Cache's clock.
// It reports whether the fence moved, and whether a fence was folded into
// the floor.
func (m *Model) NoteTag(tag string, wall, local time.Time, expire bool, now time.Time, l Local) (moved, folded bool) {
	moved, folded = m.Tags.Note(tag, wall, local, expire, now)
	l.Forget("", true)
	return moved, folded
}

// Announced is the one rule for a write of this instance once announced
// (published is whether the Bus took its Invalidation, sharedFailed
// whether its update of the shared tier failed): when both went through,
// an earlier pending write of its target is forgotten (Redo.Succeeded);
// else p is kept for a redo, the newest pending write per target
// (Redo.Add). The caller sets p.DeleteShared when it has a shared tier;
// Announced keeps it for a key write whose shared update failed only (the
// redo removes that key's shared entry first, rather than write its value
// later over a newer one), and clears it otherwise. It reports whether the
// oldest pending write was dropped to stay within MaxPending.
func (r *Redo) Announced(p Pending, published, sharedFailed bool) (dropped bool) {
	p.DeleteShared = p.DeleteShared && !p.Bulk && sharedFailed
	if published && !sharedFailed {
		r.Succeeded(p)
		return false
	}
	return r.Add(p)
}
