package flightcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
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

// maxFences bounds the fence table (both kinds together): at about 100
// bytes a fence, 10 MB. Beyond it the oldest fences are dropped first,
// with a warning: dropping a bulk fence early may let an instance read an
// entry it covered from the shared tier.
const maxFences = 100_000

// fenceTable remembers the invalidations an instance applied or made
// recently, per target: a key, or a prefix for a bulk fence ("" for all
// keys).
//
//   - note records the newest Version per target: a message that is not
//     newer changes nothing (it arrived late or twice).
//   - covers tells readShared to treat an older shared entry as absent.
//
// Every fence expires after window (the Cache's TTL plus StaleFor: by then
// every entry written before it has expired from the shared tier, unless a
// loader set a longer TTL with SetTTL). Versions are wall-clock times,
// compared with the wall-clock times the shared tier holds without any
// conversion, so that a Set's own entry (whose read time is exactly its
// Invalidation's Version) is never taken for an older one; expiry runs on
// the Cache's clock.
type fenceTable struct {
	// count is the number of fences, so that readShared skips mu while
	// there are none (the common case).
	count atomic.Int32

	mu     sync.Mutex
	keys   map[string]time.Time // key → newest Version applied; guarded by mu
	bulk   map[string]time.Time // prefix → newest Version applied; guarded by mu
	lens   map[int]int          // prefix length → bulk fences of that length; guarded by mu
	queue  []fenceRecord        // every fence noted, oldest first (so in expiry order); guarded by mu
	head   int                  // queue[:head] are gone; guarded by mu
	window time.Duration
	// dropped counts fences dropped before their time because the table
	// was full; guarded by mu.
	dropped int64
}

type fenceRecord struct {
	target  string
	bulk    bool
	version time.Time
	expires time.Time
}

// note records an invalidation of target (a key, or a prefix when bulk)
// at version, and reports whether it is newer than every one recorded for
// the same target: false means it changes nothing.
func (f *fenceTable) note(bulk bool, target string, version, now time.Time) (fresh bool, dropped int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expire(now)
	m := f.keys
	if bulk {
		m = f.bulk
	}
	old, seen := m[target]
	if seen && !version.After(old) {
		return false, 0
	}
	if m == nil {
		m = make(map[string]time.Time)
		if bulk {
			f.bulk, f.lens = m, make(map[int]int)
		} else {
			f.keys = m
		}
	}
	m[target] = version
	if !seen {
		f.count.Add(1)
		if bulk {
			f.lens[len(target)]++
		}
	}
	f.queue = append(f.queue, fenceRecord{target: target, bulk: bulk, version: version, expires: now.Add(f.window)})
	for len(f.queue)-f.head > maxFences {
		f.pop()
		f.dropped++
		dropped = f.dropped
	}
	return true, dropped
}

// expire drops the fences whose window has passed.
func (f *fenceTable) expire(now time.Time) {
	for f.head < len(f.queue) && !now.Before(f.queue[f.head].expires) {
		f.pop()
	}
	if f.head > 0 && f.head >= len(f.queue)/2 {
		n := copy(f.queue, f.queue[f.head:])
		clear(f.queue[n:])
		f.queue, f.head = f.queue[:n], 0
	}
}

// pop drops the oldest record, and its target's fence unless a newer
// record of the same target replaced it.
func (f *fenceTable) pop() {
	r := f.queue[f.head]
	f.queue[f.head] = fenceRecord{}
	f.head++
	m := f.keys
	if r.bulk {
		m = f.bulk
	}
	if v, ok := m[r.target]; ok && v.Equal(r.version) {
		delete(m, r.target)
		f.count.Add(-1)
		if r.bulk {
			if f.lens[len(r.target)]--; f.lens[len(r.target)] == 0 {
				delete(f.lens, len(r.target))
			}
		}
	}
}

// covers reports whether a fence covers a shared entry of key whose data
// was read from its source at read (wall clock): a key fence when read is
// before its Version, a bulk fence when read is before its Version plus
// skew (a bulk invalidation announces no value of its own, so values read
// just after it by a host whose clock is behind are reloaded once more).
func (f *fenceTable) covers(key string, read, now time.Time, skew time.Duration) bool {
	if f.count.Load() == 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expire(now)
	if v, ok := f.keys[key]; ok && read.Before(v) {
		return true
	}
	for n := range f.lens {
		if n > len(key) {
			continue
		}
		if v, ok := f.bulk[key[:n]]; ok && read.Before(v.Add(skew)) {
			return true
		}
	}
	return false
}

// untrusted reports whether a local item must not be served as fresh
// because the Bus is down and the item was read from its source more than
// BusDownTTL ago: invalidations of it may have been missed.
func (c *Cache[V]) untrusted(it *Item[V], now time.Time) bool {
	return c.capLocal.Load() && now.Sub(readAt(&it.Meta)) >= c.busDownTTL
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
// source before the call as absent, and loads it again. Keys given a
// longer TTL with SetTTL may outlive that window in the shared tier.
//
// It needs a Local store that implements LocalRanger (errors.ErrUnsupported
// otherwise). The error matches ErrNotPublished when the local part was
// done but the Bus did not take the message. An empty prefix is a
// *KeyError: use Clear.
func (c *Cache[V]) InvalidatePrefix(ctx context.Context, prefix string) error {
	if prefix == "" {
		return &KeyError{Reason: "empty prefix (Clear invalidates every key)"}
	}
	if len(prefix) > c.maxKeyLen || !utf8.ValidString(prefix) {
		return &KeyError{Reason: fmt.Sprintf("prefix longer than MaxKeyLen %d or not valid UTF-8", c.maxKeyLen)}
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
	return c.publish(ctx, kind, prefix, wall)
}

// announceKey records and publishes an explicit write of key (Set,
// Delete) whose data dates from version (wall clock): the Set's own entry,
// or the moment a Delete finished.
func (c *Cache[V]) announceKey(ctx context.Context, key string, version time.Time) error {
	c.noteFence(ctx, false, key, version)
	return c.publish(ctx, InvalidationKey, key, version)
}

// publish announces an invalidation of this instance on the Bus, on its
// own SharedTimeout (the write it announces is done; the caller leaving
// must not keep the others from hearing of it).
func (c *Cache[V]) publish(ctx context.Context, kind InvalidationKind, target string, version time.Time) error {
	if c.bus == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.sharedTimeout)
	defer cancel()
	err := c.bus.Publish(pctx, c.name, Invalidation{Kind: kind, Target: target, Version: version})
	if c.obs != nil {
		c.observe(Event{Kind: EventInvalidationSent, Ctx: ctx, Cache: c.name, Invalidation: kind, Err: err})
	}
	if err == nil {
		return nil
	}
	if ok, suppressed := c.busLog.allow(); ok {
		c.log.LogAttrs(ctx, slog.LevelWarn, "flightcache: publishing an invalidation failed; other instances may serve older values until they expire",
			slog.String("cache", c.name), slog.String("kind", kind.String()), slog.Any("error", err), slog.Int64("suppressed", suppressed))
	}
	return fmt.Errorf("%w: %w", ErrNotPublished, err)
}

// noteFence records an invalidation in the fence table and reports whether
// it is new (see fenceTable.note), warning when the table overflowed.
func (c *Cache[V]) noteFence(ctx context.Context, bulk bool, target string, version time.Time) bool {
	fresh, dropped := c.fences.note(bulk, target, version, c.now())
	if dropped > 0 {
		if ok, suppressed := c.busLog.allow(); ok {
			c.log.LogAttrs(ctx, slog.LevelWarn, "flightcache: too many recent invalidations; the oldest fences were dropped early",
				slog.String("cache", c.name), slog.Int64("dropped_total", dropped), slog.Int64("suppressed", suppressed))
		}
	}
	return fresh
}

// applyKey drops the local copy of key if it was read before version plus
// ClockSkew, makes the read-path writes of key in progress write nothing
// (an explicit write in the write guard) and the next Get start a new
// flight. It reports whether a copy was held and whether it was dropped.
func (c *Cache[V]) applyKey(key string, version time.Time) (held, dropped bool) {
	limit := version.Add(c.clockSkew)
	_ = c.guard.explicit(key, func() error {
		if c.local == nil {
			return nil
		}
		it, ok := c.local.Get(key)
		if !ok {
			return nil
		}
		held = true
		if readAt(&it.Meta).Before(limit) {
			c.local.Delete(key)
			dropped = true
		}
		return nil
	})
	c.group.Forget(key)
	return held, dropped
}

// applyBulk drops the local items under prefix ("" for all) read before
// version plus ClockSkew, and makes every read-path write in progress
// write nothing (they cannot be matched to the prefix cheaply; they are
// only refused, their callers still get their values). The caller has
// noted the fence first, so that a shared read from now on sees it.
func (c *Cache[V]) applyBulk(prefix string, version time.Time) {
	c.guard.bulkInvalidate()
	c.group.ForgetFunc(func(k string) bool { return strings.HasPrefix(k, prefix) })
	r, ok := c.local.(LocalRanger[V])
	if !ok {
		return
	}
	limit := version.Add(c.clockSkew)
	for k, it := range r.All() {
		if strings.HasPrefix(k, prefix) && readAt(&it.Meta).Before(limit) {
			c.local.Delete(k)
		}
	}
}

// resync empties the local tier after the Bus was down: whatever it holds
// may have missed invalidations. Reads in progress write nothing.
func (c *Cache[V]) resync() {
	c.guard.bulkInvalidate()
	c.group.ForgetFunc(func(string) bool { return true })
	if r, ok := c.local.(LocalRanger[V]); ok {
		for k := range r.All() {
			c.local.Delete(k)
		}
	}
}

// busHandler is the Cache's BusHandler. The Bus calls it one message at a
// time.
type busHandler[V any] struct{ c *Cache[V] }

func (h busHandler[V]) Invalidated(inv Invalidation) { h.c.received(inv) }
func (h busHandler[V]) BusChanged(s BusState)        { h.c.busChanged(s) }

// received applies an invalidation from another instance.
func (c *Cache[V]) received(inv Invalidation) {
	if c.closed.Load() {
		return
	}
	if c.obs != nil {
		c.observe(Event{Kind: EventInvalidationReceived, Cache: c.name, Invalidation: inv.Kind})
	}
	// Fences compare wall-clock times; the local tier's items are on this
	// Cache's clock.
	version := shiftTime(inv.Version, time.Duration(c.now().UnixNano()-time.Now().UnixNano()))
	applied := false
	switch inv.Kind {
	case InvalidationKey:
		if inv.Target == "" || len(inv.Target) > c.maxKeyLen || !utf8.ValidString(inv.Target) {
			break // no key of this Cache: nothing it could cover
		}
		if c.noteFence(context.Background(), false, inv.Target, inv.Version) {
			held, dropped := c.applyKey(inv.Target, version)
			applied = dropped || !held
		}
	case InvalidationPrefix, InvalidationAll:
		prefix := inv.Target
		if inv.Kind == InvalidationAll {
			prefix = ""
		} else if prefix == "" || !utf8.ValidString(prefix) {
			break
		}
		if c.noteFence(context.Background(), true, prefix, inv.Version) {
			c.applyBulk(prefix, version)
			applied = true
		}
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
		c.capLocal.Store(false)
		c.log.LogAttrs(ctx, slog.LevelInfo, "flightcache: invalidation bus up; local tier resynchronised",
			slog.String("cache", c.name))
	default:
		s = BusDown
		c.capLocal.Store(true)
		c.log.LogAttrs(ctx, slog.LevelWarn, "flightcache: invalidation bus down; local values are served for at most BusDownTTL",
			slog.String("cache", c.name), slog.Duration("bus_down_ttl", c.busDownTTL))
	}
	c.busState.Store(uint32(s))
	if c.obs != nil {
		c.observe(Event{Kind: EventBusChanged, Cache: c.name, Bus: s})
	}
}
