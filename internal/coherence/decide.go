package coherence

import (
	"sync/atomic"
	"time"
)

// Model is one Cache's coherence state: its ledger of versions per key,
// its bulk and tag fences, the locks and order of its writes (Begin,
// Explicit, Bulk) and its trust in the local tier. The zero value is
// ready once SetWindow, Tags.Window and Trust.DownTTL are set.
type Model struct {
	locks keyLocks
	order writeOrder
	Ledger
	Fences
	Trust
	// LocalOnly is set once, before use, for a Cache without a shared
	// tier: nothing older can come back from another tier, so fills
	// record and compare no version (a slow load is cached even when a
	// faster one began after it).
	LocalOnly bool
	// Tags are the tag fences (see TagFences).
	Tags TagFences
	// Closed is set once, by Close, and never cleared: from then on
	// nothing is written, and the Cache refuses every call. Read it with
	// Load; only Close sets it. (A field, not a method: the read path
	// checks it on every call.)
	Closed atomic.Bool
}

// Close makes every later write decision a refusal: a load that finishes
// after Close writes no tier. It reports whether this call closed m.
func (m *Model) Close() bool { return m.Closed.CompareAndSwap(false, true) }

// Read is an item a read-path fill decides on.
type Read struct {
	// Version is when its data was read from its origin (wall clock;
	// driver.Meta.Version), zero when unknown: a store that keeps no
	// read time, or one ahead of this host's clock.
	Version time.Time
	// FromTier: the item is an entry as a tier held it when read (a
	// shared read's), not a load's own value. It is the newest state of
	// that tier, which the caller serves whatever its ticket says, so it
	// raises the key's fence even under an outdated ticket.
	FromTier bool
}

// Held describes the copy of a key the local tier holds when a fill is
// decided.
type Held struct {
	Present bool
	// Fresh: before its FreshUntil (trusted or not: the caller decides
	// what an untrusted newer copy means).
	Fresh bool
	// Version is its driver.Meta.Version.
	Version time.Time
}

// FillVerdict is what a read-path fill of the local tier does.
type FillVerdict uint8

// The verdicts of DecideFill.
const (
	// FillWrite: write the item (and, for a write-back, the shared tier).
	FillWrite FillVerdict = iota
	// FillSkip: write nothing.
	FillSkip
	// FillDropHeld: write nothing, and remove the held copy: a shared
	// read's ticket is outdated, but the held copy is older still than
	// the entry it read, which the caller serves.
	FillDropHeld
	// FillServeHeld: write nothing; the held copy is fresh and newer than
	// the item, and a shared read serves it instead (a load serves its
	// own value: its callers asked before the held copy arrived).
	FillServeHeld
	// FillOlder: write nothing; the item was read before something this
	// instance already filled, served, wrote or was told of. A shared read
	// treats the entry as absent; a load serves its own value.
	FillOlder
)

// DecideFill decides a read-path write of key to the local tier (a copy
// of a shared hit, a load's write-back): the caller holds the key's lock
// and the bulk lock (Model.Fill), current tells whether its ticket is
// still current, read is the item's read time and source, held the copy
// held, now the Cache's clock. Per key, this instance never goes back to
// older data:
//
//   - after Close nothing is written;
//   - a load under a ticket outdated by an explicit write or an
//     invalidation writes nothing: an operation that began before an
//     explicit write is older than it, whatever instant it read its
//     source (a load that began before a Set may read the origin after
//     it), so it must not replace what the write left. Its callers are
//     served its value all the same, so it raises the key's version to
//     its own (NoteServed), unless this instance's own explicit write is
//     the newest version known: on the instance that made it, an explicit
//     write wins (its own shared entry must not look older, or the next
//     Get would reload over it), while on the others the value served
//     must not be followed by an older shared entry (monotonic reads);
//   - a shared read under an outdated ticket writes nothing either, but
//     its entry was the shared tier's newest state and is served: it
//     raises the key's fence and drops a held copy read earlier
//     (FillDropHeld), so that no later read goes back past it;
//   - a fresh held copy read later than the item is served instead;
//   - an item read earlier than the key's fence (the newest read time
//     this instance filled, served, wrote or was told of) is not written
//     (FillOlder).
//
// Otherwise it raises the key's fence to read.Version, written or not:
// the caller serves the item, and a later shared read of anything older
// must not be served after it (Covered). A zero read.Version is unknown (a
// store that does not keep read times): it is neither noted nor compared
// with the fence. Without a shared tier (LocalOnly) no version is noted
// or compared with the fence either.
func (m *Model) DecideFill(key string, current bool, read Read, held Held, now time.Time) FillVerdict {
	if m.Closed.Load() {
		return FillSkip
	}
	version := read.Version
	if m.LocalOnly {
		version = time.Time{}
	}
	if !current && !read.FromTier {
		if !version.IsZero() {
			m.NoteServed(key, version, now)
		}
		return FillSkip
	}
	var prev time.Time
	if !version.IsZero() {
		prev, _, _ = m.NoteKey(key, version, now, FromFill)
	}
	switch {
	case !current:
		if held.Present && held.Version.Before(read.Version) {
			return FillDropHeld
		}
		return FillSkip
	case held.Present && held.Fresh && held.Version.After(read.Version):
		return FillServeHeld
	case !version.IsZero() && version.Truncate(time.Microsecond).Before(prev):
		return FillOlder
	}
	return FillWrite
}

// WriteRoute is how a read-path writer reaches the shared tier.
type WriteRoute uint8

// The routes of SharedWritable.
const (
	// Direct: the Cache has no Coordinator; a write-back writes the tier.
	Direct WriteRoute = iota
	// Leased: the flight holds a lease; only its fenced write
	// (Lease.Complete) reaches the tier.
	Leased
	// Unleased: cluster mode without a lease (degraded, a follower that
	// gave up waiting, a batch): the local tier only.
	Unleased
)

// SharedWritable is the one rule for whether a read-path write may reach
// the shared tier: never after Close, never when this caller found the
// tier unavailable (tierDown), and in cluster mode only through a lease.
// An unfenced write of a load that read the origin before a Set made on
// another instance would overwrite that Set for the entry's whole TTL.
func (m *Model) SharedWritable(route WriteRoute, tierDown bool) bool {
	return !m.Closed.Load() && !tierDown && route != Unleased
}

// Trust says whether the local tier may be believed: while the Bus is
// down, invalidations may be missed, so an item is served (fresh or as a
// stale fallback) only while it entered the local tier less than DownTTL
// ago.
type Trust struct {
	// DownTTL is how long an item is trusted while the Bus is down. Set
	// once, before use.
	DownTTL time.Duration
	down    atomic.Bool
}

// SetDown records whether the Bus is down.
func (t *Trust) SetDown(down bool) { t.down.Store(down) }

// Down reports whether the Bus is down.
func (t *Trust) Down() bool { return t.down.Load() }

// Trusted reports whether a local item may be served at now (the Cache's
// clock): always while the Bus is up (or there is none); while it is down,
// only within DownTTL of when the item entered the local tier (filledAt),
// or, when that is unknown (zero), of when its data was read.
func (t *Trust) Trusted(filledAt, read, now time.Time) bool {
	if !t.down.Load() {
		return true
	}
	since := filledAt
	if since.IsZero() {
		since = read
	}
	return now.Sub(since) < t.DownTTL
}

// Invalidates is the one rule for which local copies an invalidation of
// version drops, key or bulk alike: a copy read before version plus skew
// (both on the Cache's clock). A copy read later is newer than the write
// the invalidation announces, so an invalidation that arrives late, twice
// or out of order never drops a value loaded after it.
func Invalidates(version, read time.Time, skew time.Duration) bool {
	return read.Before(version.Add(skew))
}

// Clamp returns a version received from another instance (wall clock)
// that is ahead of this host's clock (wallNow) by more than skew as
// wallNow, reporting that it did: a host with a wrong clock must not fence
// this instance's future.
func Clamp(version, wallNow time.Time, skew time.Duration) (time.Time, bool) {
	if version.After(wallNow.Add(skew)) {
		return wallNow, true
	}
	return version, false
}
