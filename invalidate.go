package flightcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// This file is the Cache's side of cross-instance invalidation; bus.go has
// the contracts and the model. The story of one write, say Delete on
// instance A while B holds the key in its local tier:
//
//  1. A updates its tiers (local, then shared) and publishes an
//     Invalidation with Version = now (publish).
//  2. B's Bus delivers it (received). B drops its local copy if that copy
//     was read before Version + ClockSkew (applyKey), refuses the local
//     writes of reads that were in progress (the write guard), and makes
//     new Gets start a new flight (Forget). A copy read after the write is
//     kept: a late or repeated message changes nothing.
//  3. B's next Get misses locally and reads the shared tier, which A
//     updated before publishing.
//
// Every instance also keeps a fence per invalidation it applied or made
// (fenceTable): for a while, a shared entry it covers that was read from
// its source before the fence's Version is treated as absent, and the next
// load overwrites it. For a bulk invalidation (InvalidatePrefix, Clear)
// that is the only way the shared tier forgets: Redis has no cheap "delete
// by prefix". For one key it catches the write-back of a load that read
// the origin before the write but reached the shared tier after it (only
// possible without a Coordinator, whose fenced writes refuse it).

// The fence table's bounds, per kind of fence: key fences come with every
// Set and Delete and must never push out the bulk fences, which are rare
// and matter for TTL + StaleFor. Past a bound the oldest fences of that
// kind are dropped first, with a warning: dropping a bulk fence early may
// let an instance read an entry it covered from the shared tier.
const (
	maxKeyFences     = 100_000
	maxKeyFenceBytes = 16 << 20
	maxBulkFences    = 10_000
	maxBulkBytes     = 4 << 20
	fenceOverhead    = 64 // bytes a fence costs besides its target, roughly
)

// fenceTable remembers the invalidations an instance applied or made
// recently, per target: a key, or a prefix for a bulk fence ("" for all
// keys).
//
//   - note records the newest Version per target, and reports whether a
//     Version is newer than the last one noted (metrics call the others
//     ignored; they are applied all the same, which is harmless).
//   - covers tells readShared to treat an older shared entry as absent.
//
// Every fence expires after window (the Cache's TTL plus StaleFor: by then
// every entry written before it has expired from the shared tier, unless a
// loader set a longer TTL with SetTTL). Versions are wall-clock times,
// compared with the wall-clock times the shared tier holds, both truncated
// to the microsecond (the Bus's precision), so that a Set's own entry
// (whose read time is its Invalidation's Version) is never taken for an
// older one; expiry runs on the Cache's clock.
type fenceTable struct {
	// count is the number of fences, so that readShared skips mu while
	// there are none (the common case).
	count atomic.Int32

	mu     sync.Mutex
	keys   fenceSet    // guarded by mu
	bulk   fenceSet    // guarded by mu
	lens   map[int]int // prefix length → bulk fences of that length; guarded by mu
	window time.Duration
}

// fenceSet is the fences of one kind.
type fenceSet struct {
	m       map[string]time.Time // target → newest Version noted
	queue   []fenceRecord        // every note, oldest first (so in expiry order)
	head    int                  // queue[:head] are gone
	bytes   int                  // the live records' size, roughly
	dropped int64                // records dropped before their time
}

type fenceRecord struct {
	target  string
	version time.Time
	expires time.Time
}

// note records an invalidation of target (a key, or a prefix when bulk)
// at version, and reports whether it is newer than every one recorded for
// the same target, and how many fences of its kind were ever dropped early
// when this note made the table drop one (0 otherwise).
func (f *fenceTable) note(bulk bool, target string, version, now time.Time) (fresh bool, dropped int64) {
	version = version.Truncate(time.Microsecond)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expire(now)
	set, maxN, maxBytes := &f.keys, maxKeyFences, maxKeyFenceBytes
	if bulk {
		set, maxN, maxBytes = &f.bulk, maxBulkFences, maxBulkBytes
	}
	old, seen := set.m[target]
	if seen && !version.After(old) {
		return false, 0
	}
	if set.m == nil {
		set.m = make(map[string]time.Time)
	}
	set.m[target] = version
	if !seen {
		f.count.Add(1)
		if bulk {
			if f.lens == nil {
				f.lens = make(map[int]int)
			}
			f.lens[len(target)]++
		}
	}
	set.queue = append(set.queue, fenceRecord{target: target, version: version, expires: now.Add(f.window)})
	set.bytes += len(target) + fenceOverhead
	for len(set.queue)-set.head > maxN || set.bytes > maxBytes {
		f.pop(set, bulk)
		set.dropped++
		dropped = set.dropped
	}
	return true, dropped
}

// expire drops the fences whose window has passed.
func (f *fenceTable) expire(now time.Time) {
	for _, k := range [...]struct {
		set  *fenceSet
		bulk bool
	}{{&f.keys, false}, {&f.bulk, true}} {
		set := k.set
		for set.head < len(set.queue) && !now.Before(set.queue[set.head].expires) {
			f.pop(set, k.bulk)
		}
		if set.head > 0 && set.head >= len(set.queue)/2 {
			n := copy(set.queue, set.queue[set.head:])
			clear(set.queue[n:])
			set.queue, set.head = set.queue[:n], 0
		}
	}
}

// pop drops the oldest record of set, and its target's fence unless a
// newer record of the same target replaced it.
func (f *fenceTable) pop(set *fenceSet, bulk bool) {
	r := set.queue[set.head]
	set.queue[set.head] = fenceRecord{}
	set.head++
	set.bytes -= len(r.target) + fenceOverhead
	if v, ok := set.m[r.target]; ok && v.Equal(r.version) {
		delete(set.m, r.target)
		f.count.Add(-1)
		if bulk {
			if f.lens[len(r.target)]--; f.lens[len(r.target)] == 0 {
				delete(f.lens, len(r.target))
			}
		}
	}
}

// covers reports whether a fence covers a shared entry of key with Meta m
// (wall clock): a key fence when the entry's data was read (readAt) before
// its Version, a bulk fence when before its Version plus skew (a bulk
// invalidation announces no value of its own, so values read just after it
// by a host whose clock is behind are reloaded once more). Key fences give
// no skew: the Set's own entry is read exactly at its fence's Version. An
// entry whose read time is unknown (LoadedAt zero, or in the future) is
// covered by bulk fences only.
func (f *fenceTable) covers(key string, m *Meta, now time.Time, skew time.Duration) bool {
	if f.count.Load() == 0 {
		return false
	}
	read := readAt(m).Truncate(time.Microsecond)
	// Unknown: not kept, or ahead of this host's clock by more than skew
	// (written by a host with a wrong clock, it must not pass for newer
	// than every fence).
	known := !m.LoadedAt.IsZero() && !read.After(time.Now().Add(skew))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expire(now)
	if v, ok := f.keys.m[key]; ok && known && read.Before(v) {
		return true
	}
	for n := range f.lens {
		if n > len(key) {
			continue
		}
		if v, ok := f.bulk.m[key[:n]]; ok && (!known || read.Before(v.Add(skew))) {
			return true
		}
	}
	return false
}

// untrusted reports whether a local item must not be served as fresh
// because the Bus is down and the item entered the local tier (or, if
// that is unknown, was read from its source) more than BusDownTTL ago:
// invalidations of it may have been missed since.
func (c *Cache[V]) untrusted(it *Item[V], now time.Time) bool {
	if BusState(c.busState.Load()) != BusDown {
		return false
	}
	since := it.filledAt
	if since.IsZero() {
		since = readAt(&it.Meta)
	}
	return now.Sub(since) >= c.busDownTTL
}

// BusState returns the state of the Cache's subscription to its Bus:
// BusNone without a Bus.
func (c *Cache[V]) BusState() BusState {
	return BusState(c.busState.Load())
}

// InvalidatePrefix drops every value whose key begins with prefix, in
// every tier, on this instance at once and, with a Bus, on every other
// instance within the Bus's delivery time: delete all the variants of one
// entity with one call. Build prefixes that end at a separator (key.Builder's
// Prefix does), or "item:4" also drops "item:42".
//
// Locally, the matching items are removed and loads and shared reads in
// progress do not write what they read. The shared tier cannot be searched
// by prefix, so for TTL + StaleFor every instance that applied the
// invalidation treats a shared entry under prefix that was read from its
// source before the call as absent, and loads it again; the Bus retains
// bulk invalidations and replays them to instances that missed them (down,
// restarted, started later) before they trust their local tier. Keys given
// a longer TTL with SetTTL may outlive that window in the shared tier.
//
// Cost: every instance walks its local tier once per bulk invalidation
// (memstore: about 10-20 ms per 100,000 items), so for writes of single
// keys at a high rate Delete or Set is the cheaper tool.
//
// It needs a Local store that implements LocalRanger (errors.ErrUnsupported
// otherwise). The error matches ErrNotPublished when the local part was
// done but the Bus did not take the message. An empty prefix is a
// *KeyError: use Clear.
func (c *Cache[V]) InvalidatePrefix(ctx context.Context, prefix string) error {
	if prefix == "" {
		return &KeyError{Reason: "empty prefix (Clear invalidates every key)"}
	}
	if !c.validKey(prefix) {
		return c.keyError(prefix)
	}
	return c.invalidateBulk(ctx, InvalidationPrefix, prefix)
}

// Clear drops every value of the Cache, in every tier, on this instance at
// once and, with a Bus, on every other instance: InvalidatePrefix for
// every key, with the same shared-tier window and errors.
func (c *Cache[V]) Clear(ctx context.Context) error {
	return c.invalidateBulk(ctx, InvalidationAll, "")
}

func (c *Cache[V]) invalidateBulk(ctx context.Context, kind InvalidationKind, prefix string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if c.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.local != nil {
		if _, ok := c.local.(LocalRanger[V]); !ok {
			return fmt.Errorf("flightcache: invalidating by %s needs a Local store that implements LocalRanger: %w", kind, errors.ErrUnsupported)
		}
	}
	wall := time.Now()
	c.noteFence(ctx, true, prefix, wall)
	c.applyBulk(prefix, c.now())
	return c.announce(ctx, kind, prefix, wall, false)
}

// fenceKey records, with a Bus, an explicit write of key (Set, Delete)
// whose data dates from version (wall clock): the Set's own entry, or the
// moment of a Delete. Without a Bus no key fence is kept: it only guards
// against writes of other instances.
func (c *Cache[V]) fenceKey(ctx context.Context, key string, version time.Time) {
	if c.bus != nil {
		c.noteFence(ctx, false, key, version)
	}
}

// publish announces an invalidation of this instance on the Bus, on its
// own SharedTimeout (the write it announces is done; the caller leaving
// must not keep the others from hearing of it). While the SharedBreaker is
// open it does not try: the Bus lives on the same Redis, and a write must
// not wait out a timeout per call on a Redis known to fail.
func (c *Cache[V]) publish(ctx context.Context, kind InvalidationKind, target string, version time.Time) error {
	if c.bus == nil {
		return nil
	}
	var err error
	if c.breaker != nil && c.breaker.State() == BreakerOpen {
		err = ErrBreakerOpen
	} else {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.sharedTimeout)
		err = c.bus.Publish(pctx, c.name, Invalidation{Kind: kind, Target: target, Version: version})
		cancel()
	}
	if c.obs != nil {
		c.observe(Event{Kind: EventInvalidationSent, Ctx: ctx, Cache: c.name, Invalidation: kind, Err: err})
	}
	if err == nil {
		return nil
	}
	if ok, suppressed := c.busLog.allow(); ok {
		c.log.LogAttrs(ctx, slog.LevelWarn, "flightcache: publishing an invalidation failed; other instances may serve older values until they expire or their bus reports down",
			slog.String("cache", c.name), slog.String("kind", kind.String()), slog.Any("error", err), slog.Int64("suppressed", suppressed))
	}
	return fmt.Errorf("%w: %w", ErrNotPublished, err)
}

// noteFence records an invalidation in the fence table and reports whether
// it is newer than the last one of its target (see fenceTable.note),
// warning when the table overflowed.
func (c *Cache[V]) noteFence(ctx context.Context, bulk bool, target string, version time.Time) bool {
	fresh, dropped := c.fences.note(bulk, target, version, c.now())
	if dropped > 0 {
		if ok, suppressed := c.busLog.allow(); ok {
			c.log.LogAttrs(ctx, slog.LevelWarn, "flightcache: too many recent invalidations; the oldest fences were dropped early",
				slog.String("cache", c.name), slog.Bool("bulk", bulk), slog.Int64("dropped_total", dropped), slog.Int64("suppressed", suppressed))
		}
	}
	return fresh
}

// applyKey drops the local copy of key if it was read before version
// (this Cache's clock) plus ClockSkew, makes the read-path writes of key
// in progress write nothing (an explicit write in the write guard) and
// the next Get start a new flight. It reports whether a copy was held and
// whether it was dropped.
func (c *Cache[V]) applyKey(key string, version time.Time) (held, dropped bool) {
	limit := version.Add(c.clockSkew)
	_ = c.guard.explicit(key, func() error {
		if c.local == nil {
			return nil
		}
		it, ok := c.local.Get(key)
		held = ok
		if ok && readAt(&it.Meta).Before(limit) {
			c.local.Delete(key)
			dropped = true
		}
		return nil
	})
	c.group.Forget(key)
	return held, dropped
}

// applyBulk drops the local items under prefix ("" for all) read before
// version plus ClockSkew, and makes the read-path writes in progress of
// keys under prefix write nothing. The caller has noted the fence first,
// so that a shared read from now on sees it. It returns how many items it
// dropped.
func (c *Cache[V]) applyBulk(prefix string, version time.Time) (dropped int) {
	c.guard.bulkInvalidate(prefix)
	c.group.ForgetFunc(func(k string) bool { return strings.HasPrefix(k, prefix) })
	r, ok := c.local.(LocalRanger[V])
	if !ok {
		return 0
	}
	limit := version.Add(c.clockSkew)
	for k, it := range r.All() {
		if strings.HasPrefix(k, prefix) && readAt(&it.Meta).Before(limit) {
			c.local.Delete(k)
			dropped++
		}
	}
	return dropped
}

// resync empties the local tier after the Bus was down: whatever it holds
// may have missed invalidations. It is applyBulk of every key with a
// version no item can be newer than (LoadedAt is never ahead of now plus
// ClockSkew), so reads in progress write nothing either.
func (c *Cache[V]) resync() {
	c.applyBulk("", c.now().Add(MaxTTL))
}

// busHandler is the Cache's BusHandler. The Bus calls it one message at a
// time.
type busHandler[V any] struct{ c *Cache[V] }

func (h busHandler[V]) Invalidated(inv Invalidation) { h.c.received(inv) }
func (h busHandler[V]) BusChanged(s BusState)        { h.c.busChanged(s) }

// received applies an invalidation from another instance. It is applied
// even when it is not newer than the last one of its target: applying only
// drops copies older than its Version, so a repeat is harmless, and one
// from a host whose clock lags the last writer's must still drop what was
// read before it. It counts as applied when it dropped something, or was
// newer than the last one of its target and found no newer copy; else as
// ignored (stale). A Version ahead of this host's clock by more
// than ClockSkew (a host with a wrong clock) is taken as now: it must not
// fence this instance's future.
func (c *Cache[V]) received(inv Invalidation) {
	if c.closed.Load() {
		return
	}
	if c.obs != nil {
		c.observe(Event{Kind: EventInvalidationReceived, Cache: c.name, Invalidation: inv.Kind})
	}
	ctx := context.Background()
	wallNow := time.Now()
	if limit := wallNow.Add(c.clockSkew); inv.Version.After(limit) {
		inv.Version = wallNow
		if ok, suppressed := c.busLog.allow(); ok {
			c.log.LogAttrs(ctx, slog.LevelWarn, "flightcache: an invalidation's version is ahead of this host's clock by more than ClockSkew; taken as now",
				slog.String("cache", c.name), slog.Int64("suppressed", suppressed))
		}
	}
	// Fences compare wall-clock times; the local tier's items are on this
	// Cache's clock.
	version := shiftTime(inv.Version, time.Duration(c.now().UnixNano()-wallNow.UnixNano()))
	applied := false
	switch inv.Kind {
	case InvalidationKey:
		if !c.validKey(inv.Target) {
			break // no key of this Cache: nothing it could cover
		}
		fresh := c.noteFence(ctx, false, inv.Target, inv.Version)
		held, dropped := c.applyKey(inv.Target, version)
		applied = dropped || (fresh && !held)
	case InvalidationPrefix, InvalidationAll:
		prefix := inv.Target
		if inv.Kind == InvalidationAll {
			prefix = ""
		} else if !c.validKey(prefix) {
			break
		}
		fresh := c.noteFence(ctx, true, prefix, inv.Version)
		if BusState(c.busState.Load()) != BusUp {
			// A replay before BusUp: the resynchronisation that comes
			// with BusUp empties the local tier anyway, so the fence is
			// all that is needed, not one walk of the tier per message.
			applied = fresh
			break
		}
		applied = c.applyBulk(prefix, version) > 0 || fresh
	}
	if c.obs != nil {
		kind := EventInvalidationIgnored
		if applied {
			kind = EventInvalidationApplied
		}
		c.observe(Event{Kind: kind, Cache: c.name, Invalidation: inv.Kind})
	}
}

// busChanged follows the Bus's state. Down: local items are served only
// while younger than BusDownTTL. Up: the local tier is emptied
// (resynchronised) before it is trusted again.
func (c *Cache[V]) busChanged(s BusState) {
	if c.closed.Load() || BusState(c.busState.Load()) == s {
		return
	}
	ctx := context.Background()
	switch s {
	case BusUp:
		c.resync()
		// Stored only now: until the local tier is emptied, untrusted
		// still sees BusDown.
		c.busState.Store(uint32(BusUp))
		c.flushPending()
		c.log.LogAttrs(ctx, slog.LevelInfo, "flightcache: invalidation bus up; local tier resynchronised",
			slog.String("cache", c.name))
	default:
		s = BusDown
		c.busState.Store(uint32(BusDown))
		c.log.LogAttrs(ctx, slog.LevelWarn, "flightcache: invalidation bus down; local values are served for at most BusDownTTL",
			slog.String("cache", c.name), slog.Duration("bus_down_ttl", c.busDownTTL))
	}
	if c.obs != nil {
		c.observe(Event{Kind: EventBusChanged, Cache: c.name, Bus: s})
	}
}

// maxPending bounds the writes kept for a retry of their announcement;
// beyond it the oldest are dropped, with a warning.
const maxPending = 10_000

// pendingInvalidation is a write of this instance the other instances may
// not have heard of: its Invalidation was not published, or its update of
// the shared tier failed (Redis hung, partitioned, down). When the Bus is
// up again (and after each later successful publish) the Cache redoes it
// (flushPending): it removes the key's shared entry if that update failed,
// then publishes the Invalidation with its original Version. A failed Set
// is redone as a removal: writing its value later could overwrite a newer
// one written meanwhile by another instance.
type pendingInvalidation struct {
	kind         InvalidationKind
	target       string
	version      time.Time // wall clock
	deleteShared bool
}

// pendingKey names a pending invalidation's target: a later write of the
// same target replaces it.
func pendingKey(kind InvalidationKind, target string) string {
	return kind.String() + "\x00" + target
}

// announce publishes a write's Invalidation and, with a Bus, keeps the
// write for a retry when the publish or the write's shared-tier update
// (sharedFailed) failed, or forgets an earlier pending write of the same
// target when both succeeded. It returns the publish's error.
func (c *Cache[V]) announce(ctx context.Context, kind InvalidationKind, target string, version time.Time, sharedFailed bool) error {
	err := c.publish(ctx, kind, target, version)
	if c.bus == nil {
		return err
	}
	pk := pendingKey(kind, target)
	c.pendingMu.Lock()
	if err == nil && !sharedFailed {
		delete(c.pending, pk)
		more := len(c.pending) > 0
		c.pendingMu.Unlock()
		if more {
			c.flushPending()
		}
		return nil
	}
	if c.pending == nil {
		c.pending = make(map[string]pendingInvalidation)
	}
	prev, had := c.pending[pk]
	c.pending[pk] = pendingInvalidation{kind: kind, target: target, version: version,
		deleteShared: kind == InvalidationKey && c.shared != nil && (sharedFailed || (had && prev.deleteShared))}
	var dropped bool
	if len(c.pending) > maxPending {
		// The oldest key write goes first: a bulk one (rare, and never
		// retained by the Bus unless published) only when all are bulk.
		oldest := ""
		for k, p := range c.pending {
			if oldest == "" {
				oldest = k
				continue
			}
			o := c.pending[oldest]
			if (p.kind == InvalidationKey) != (o.kind == InvalidationKey) {
				if p.kind == InvalidationKey {
					oldest = k
				}
				continue
			}
			if p.version.Before(o.version) {
				oldest = k
			}
		}
		delete(c.pending, oldest)
		dropped = true
	}
	c.pendingMu.Unlock()
	if dropped {
		if ok, suppressed := c.busLog.allow(); ok {
			c.log.LogAttrs(ctx, slog.LevelWarn, "flightcache: too many writes waiting to be announced; the oldest was dropped",
				slog.String("cache", c.name), slog.Int64("suppressed", suppressed))
		}
	}
	// The redo starts now, not at the next BusUp: the Bus may stay up
	// (one lost PUBLISH, a breaker that was open for a moment), and the
	// other instances would serve the old value until it expires.
	c.flushPending()
	return err
}

// PendingInvalidations returns how many writes of this instance wait to be
// announced to the other instances (see ErrNotPublished): they are redone
// when the Bus is up again, or after the next successful publish, and
// tried again with backoff until they succeed. 0 without a Bus.
func (c *Cache[V]) PendingInvalidations() int {
	c.pendingMu.Lock()
	defer c.pendingMu.Unlock()
	return len(c.pending)
}

// flushPending redoes the pending writes in the background, oldest first,
// unless a flush runs already or the Cache is closed. A flush that meets a
// failure (the tier or the Bus still fails, the breaker is still open)
// waits and tries again, from SharedTimeout doubling to maxFlushBackoff,
// until nothing is pending or the Cache closes; a write made pending while
// it runs is picked up by its next pass.
func (c *Cache[V]) flushPending() {
	if !c.flushing.CompareAndSwap(false, true) {
		// A flush is running: cut its backoff short, the conditions may
		// have changed (the Bus is up again, a publish just went through).
		select {
		case c.redoKick <- struct{}{}:
		default:
		}
		return
	}
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		c.flushing.Store(false)
		return
	}
	c.bg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.bg.Done()
		backoff := c.sharedTimeout
		for {
			if c.flushOnce() || c.closed.Load() {
				c.flushing.Store(false)
				if c.closed.Load() {
					return
				}
				// A write made pending after the last pass looked, but
				// before flushing was cleared, must not wait for the next
				// trigger.
				if c.PendingInvalidations() == 0 || !c.flushing.CompareAndSwap(false, true) {
					return
				}
				continue
			}
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-c.redoKick:
				t.Stop()
			case <-c.closing:
				t.Stop()
				c.flushing.Store(false)
				return
			}
			backoff = min(2*backoff, maxFlushBackoff)
		}
	}()
}

// maxFlushBackoff bounds the wait between two tries of the pending writes:
// about a breaker's cool-down.
const maxFlushBackoff = 5 * time.Second

// flushOnce tries every pending write once, oldest first, and reports
// whether none is left; it stops at the first failure.
func (c *Cache[V]) flushOnce() bool {
	c.pendingMu.Lock()
	todo := make([]pendingInvalidation, 0, len(c.pending))
	for _, p := range c.pending {
		todo = append(todo, p)
	}
	c.pendingMu.Unlock()
	slices.SortFunc(todo, func(a, b pendingInvalidation) int { return a.version.Compare(b.version) })
	ctx := context.Background()
	for _, p := range todo {
		if c.closed.Load() {
			return true
		}
		if p.deleteShared {
			if err := c.deleteShared(ctx, p.target); err != nil {
				return false
			}
		}
		if err := c.publish(ctx, p.kind, p.target, p.version); err != nil {
			return false
		}
		pk := pendingKey(p.kind, p.target)
		c.pendingMu.Lock()
		if cur, ok := c.pending[pk]; ok && cur.version.Equal(p.version) {
			delete(c.pending, pk)
		}
		c.pendingMu.Unlock()
	}
	return true
}
