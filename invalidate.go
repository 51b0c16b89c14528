package flightcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/coherence"
)

// Cross-instance invalidation. Every instance keeps hot values in its own
// local tier, where a hit costs about 100 ns; without a Bus, a write on one
// instance (Set, Delete, InvalidatePrefix, Clear) leaves the other
// instances serving their copies until those expire. With a Bus, the
// writer publishes an Invalidation after its own tiers are updated, and
// every other instance drops its copies that are older than the write.
//
// Versions. An Invalidation carries Version, the wall-clock time at which
// the writer's change was complete; an item's is Meta.Version, the
// wall-clock time its data was read from its source (the start of the
// load, or the time of the Set). An item read before the
// Invalidation's Version (plus Options.ClockSkew) is older and is dropped;
// a newer one is kept, so an invalidation that arrives late, twice or out
// of order never evicts a value loaded after the write. Writes a process
// makes to its own local tier on the read path (the copy of a shared hit,
// a load's write-back) that began before an invalidation was applied are
// refused, whatever their version, so a read in progress cannot put an
// older value back.
//
// While the Bus is down the instance cannot know what it missed: a local
// item is served only while younger than Options.BusDownTTL, and when the
// Bus is back the local tier is cleared (resynchronised) before long TTLs
// are trusted again. docs/ARCHITECTURE.md has the sequence diagrams and the
// bounds.

// This file is the Cache's side of cross-instance invalidation; package
// driver has the contracts (Bus, Invalidation). The story of one write, say Delete on
// instance A while B holds the key in its local tier:
//
//  1. A updates its tiers (local, then shared) and publishes an
//     Invalidation with Version = now (publish).
//  2. B's Bus delivers it (received). B drops its local copy if that copy
//     was read before Version + ClockSkew (coherence.Model.Receive), refuses the local
//     writes of reads that were in progress (coherence.Model.Explicit), and makes
//     new Gets start a new flight (Forget). A copy read after the write is
//     kept: a late or repeated message changes nothing.
//  3. B's next Get misses locally and reads the shared tier, which A
//     updated before publishing.
//
// Every instance also keeps a fence per invalidation it applied or made
// (coherence.Ledger, coherence.Fences): for a while, a shared entry it covers that was read from
// its source before the fence's Version is treated as absent, and the next
// load overwrites it. For a bulk invalidation (InvalidatePrefix, Clear)
// that is the only way the shared tier forgets: Redis has no cheap "delete
// by prefix". For one key it catches the write-back of a load that read
// the origin before the write but reached the shared tier after it (only
// possible without a Coordinator, whose fenced writes refuse it).

// untrusted reports whether a local item must not be served, fresh or
// stale (coherence.Trust): the Bus is down and the item entered the local
// tier more than BusDownTTL ago.
func (c *Cache[V]) untrusted(it *driver.Item[V], now time.Time) bool {
	return c.coh.Down() && !c.coh.Trusted(it.FilledAt, it.LoadedAt, now)
}

// BusState returns the state of the Cache's subscription to its Bus:
// BusNone without a Bus.
func (c *Cache[V]) BusState() driver.BusState {
	switch {
	case c.opts.Bus == nil:
		return driver.BusNone
	case c.coh.Down():
		return driver.BusDown
	}
	return driver.BusUp
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
	if ctx == nil {
		ctx = context.Background()
	}
	if err := c.admit(ctx, prefix); err != nil {
		return err
	}
	return c.invalidateBulk(ctx, driver.InvalidationPrefix, prefix)
}

// Clear drops every value of the Cache, in every tier, on this instance at
// once and, with a Bus, on every other instance: InvalidatePrefix for
// every key, with the same shared-tier window and errors.
func (c *Cache[V]) Clear(ctx context.Context) error {
	return c.invalidateBulk(ctx, driver.InvalidationAll, "")
}

func (c *Cache[V]) invalidateBulk(ctx context.Context, kind driver.InvalidationKind, prefix string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if c.coh.Closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.opts.Local != nil {
		if _, ok := c.opts.Local.(driver.LocalRanger[V]); !ok {
			return fmt.Errorf("flightcache: invalidating by %s needs a Local store that implements LocalRanger: %w", kind, errors.ErrUnsupported)
		}
	}
	wall := time.Now()
	c.fencesDropped(ctx, true, c.coh.InvalidateBulk(prefix, wall, c.opts.Now(), c.opts.ClockSkew, localIO[V]{c}))
	return c.announce(ctx, kind, prefix, wall, false)
}

// fenceKey records an explicit write of key (Set, Delete: src
// coherence.FromWrite; an invalidation received is noted by
// coherence.Model.Receive) whose data dates from version (wall clock): the Set's own
// entry, or the moment of a Delete. From then on this instance takes no
// shared entry read before it (coherence.Ledger), warning when the table
// had to drop an explicit fence early. It reports whether version is newer
// than the key's fence was.
func (c *Cache[V]) fenceKey(ctx context.Context, key string, version time.Time, src coherence.Source) bool {
	_, fresh, dropped := c.coh.NoteKey(key, version, c.opts.Now(), src)
	c.fencesDropped(ctx, false, dropped)
	return fresh
}

// fencesDropped warns, rate-limited, when the fence table dropped fences
// of explicit writes or invalidations early (dropped: how many ever).
func (c *Cache[V]) fencesDropped(ctx context.Context, bulk bool, dropped int64) {
	if dropped == 0 {
		return
	}
	if ok, suppressed := c.busLog.allow(); ok {
		c.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "flightcache: too many recent invalidations; the oldest fences were dropped early",
			slog.String("cache", c.opts.Name), slog.Bool("bulk", bulk), slog.Int64("dropped_total", dropped), slog.Int64("suppressed", suppressed))
	}
}

// publish announces an invalidation of this instance on the Bus, on its
// own SharedTimeout (the write it announces is done; the caller leaving
// must not keep the others from hearing of it). While the SharedBreaker is
// open it does not try: the Bus lives on the same Redis, and a write must
// not wait out a timeout per call on a Redis known to fail.
func (c *Cache[V]) publish(ctx context.Context, kind driver.InvalidationKind, target string, version time.Time) error {
	return c.publishVia(ctx, kind, target, version, true)
}

// publishVia is publish; askBreaker false skips the breaker (the redo).
func (c *Cache[V]) publishVia(ctx context.Context, kind driver.InvalidationKind, target string, version time.Time, askBreaker bool) error {
	if c.opts.Bus == nil {
		return nil
	}
	var err error
	if askBreaker && c.opts.SharedBreaker != nil && c.opts.SharedBreaker.State() == driver.BreakerOpen {
		err = driver.ErrBreakerOpen
	} else {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.SharedTimeout)
		err = c.opts.Bus.Publish(pctx, c.opts.Name, driver.Invalidation{Kind: kind, Target: target, Version: version})
		cancel()
	}
	if c.opts.Observer != nil {
		c.observe(driver.Event{Kind: driver.EventInvalidationSent, Ctx: ctx, Cache: c.opts.Name, Invalidation: kind, Err: err})
	}
	if err == nil {
		return nil
	}
	if ok, suppressed := c.busLog.allow(); ok {
		c.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "flightcache: publishing an invalidation failed; other instances may serve older values until they expire or their bus reports down",
			slog.String("cache", c.opts.Name), slog.String("kind", kind.String()), slog.Any("error", err), slog.Int64("suppressed", suppressed))
	}
	return fmt.Errorf("%w: %w", ErrNotPublished, err)
}

// localIO is the Cache's local tier and flights, as the invalidation side
// of internal/coherence drives them (coherence.Local): I/O only, the
// decisions are coherence's.
type localIO[V any] struct{ c *Cache[V] }

func (l localIO[V]) Held(key string) (time.Time, bool) {
	if l.c.opts.Local == nil {
		return time.Time{}, false
	}
	it, ok := l.c.opts.Local.Get(key)
	if !ok {
		return time.Time{}, false
	}
	return it.Version, true
}

func (l localIO[V]) Drop(key string) { l.c.opts.Local.Delete(key) }

func (l localIO[V]) Each(fn func(key string, version time.Time) bool) (dropped int) {
	r, ok := l.c.opts.Local.(driver.LocalRanger[V])
	if !ok {
		return 0
	}
	for k, it := range r.All() {
		if fn(k, it.Version) {
			l.c.opts.Local.Delete(k)
			dropped++
		}
	}
	return dropped
}

func (l localIO[V]) Forget(target string, prefix bool) {
	switch {
	case !prefix:
		l.c.group.Forget(target)
	case target == "":
		l.c.group.ForgetFunc(func(string) bool { return true })
	default:
		l.c.group.ForgetFunc(func(k string) bool { return strings.HasPrefix(k, target) })
	}
}

// busHandler is the Cache's BusHandler. The Bus calls it one message at a
// time.
type busHandler[V any] struct{ c *Cache[V] }

func (h busHandler[V]) Invalidated(inv driver.Invalidation) { h.c.received(inv) }
func (h busHandler[V]) BusChanged(s driver.BusState)        { h.c.busChanged(s) }

// received applies an invalidation from another instance: what it drops,
// notes and outdates is coherence.Model.Receive's decision (a repeat is
// harmless; a version from the future is taken as now), the Cache does the
// local tier's I/O (localIO), warns and reports it as applied or ignored
// (stale).
func (c *Cache[V]) received(inv driver.Invalidation) {
	if c.coh.Closed.Load() {
		return
	}
	if c.opts.Observer != nil {
		c.observe(driver.Event{Kind: driver.EventInvalidationReceived, Cache: c.opts.Name, Invalidation: inv.Kind})
	}
	ctx := context.Background()
	kind, target, ours := c.receivable(ctx, inv)
	var r coherence.Received
	if ours {
		r = c.coh.Receive(kind, target, inv.Version, time.Now(), c.opts.Now(), c.opts.ClockSkew, localIO[V]{c})
	}
	if r.Clamped {
		if ok, suppressed := c.busLog.allow(); ok {
			c.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "flightcache: an invalidation's version is ahead of this host's clock by more than ClockSkew; taken as now",
				slog.String("cache", c.opts.Name), slog.Int64("suppressed", suppressed))
		}
	}
	if r.Folded {
		c.fencesDropped(ctx, true, 1)
	}
	c.fencesDropped(ctx, kind != coherence.InvKey, r.Dropped)
	if c.opts.Observer != nil {
		kind := driver.EventInvalidationIgnored
		if r.Applied {
			kind = driver.EventInvalidationApplied
		}
		c.observe(driver.Event{Kind: kind, Cache: c.opts.Name, Invalidation: inv.Kind})
	}
}

// receivable translates inv for coherence.Model.Receive, and reports
// whether its target is one of this Cache's keys, prefixes ("" for all)
// or tags: one that is not covers nothing here, and is ignored.
func (c *Cache[V]) receivable(ctx context.Context, inv driver.Invalidation) (kind coherence.InvKind, target string, ours bool) {
	switch inv.Kind {
	case driver.InvalidationKey:
		return coherence.InvKey, inv.Target, c.admit(ctx, inv.Target) == nil
	case driver.InvalidationPrefix:
		return coherence.InvBulk, inv.Target, c.admit(ctx, inv.Target) == nil
	case driver.InvalidationAll:
		return coherence.InvBulk, "", true
	case driver.InvalidationTag:
		return coherence.InvTag, inv.Target, checkTag(inv.Target) == nil
	case driver.InvalidationTagExpire:
		return coherence.InvTagExpire, inv.Target, checkTag(inv.Target) == nil
	}
	return 0, "", false
}

// busChanged follows the Bus's state. Down: local items are served only
// while younger than BusDownTTL. Up: the local tier is emptied
// (resynchronised) before it is trusted again.
func (c *Cache[V]) busChanged(s driver.BusState) {
	if s != driver.BusUp {
		s = driver.BusDown
	}
	if c.coh.Closed.Load() || c.BusState() == s {
		return
	}
	ctx := context.Background()
	if s == driver.BusUp {
		// Every key with a version no item can be newer than (a Version
		// is read from this host's wall clock, or refused ahead of it by
		// more than ClockSkew).
		c.coh.Resync(time.Now().Add(MaxTTL), c.opts.Now(), localIO[V]{c})
		c.redo.Kick()
		c.opts.Logger.LogAttrs(ctx, slog.LevelInfo, "flightcache: invalidation bus up; local tier resynchronised",
			slog.String("cache", c.opts.Name))
	} else {
		c.coh.SetDown(true)
		c.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "flightcache: invalidation bus down; local values are served for at most BusDownTTL",
			slog.String("cache", c.opts.Name), slog.Duration("bus_down_ttl", c.coh.DownTTL))
	}
	if c.opts.Observer != nil {
		c.observe(driver.Event{Kind: driver.EventBusChanged, Cache: c.opts.Name, Bus: s})
	}
}

// announce publishes a write's Invalidation and, with a Bus, keeps the
// write for a redo (coherence.Redo) when the publish or the write's
// shared-tier update (sharedFailed) failed: the redo starts at once and
// tries until it succeeds, whether or not the Bus went down. When both
// succeeded it forgets an earlier pending write of the same target. It
// returns the publish's error.
func (c *Cache[V]) announce(ctx context.Context, kind driver.InvalidationKind, target string, version time.Time, sharedFailed bool) error {
	err := c.publish(ctx, kind, target, version)
	if c.opts.Bus == nil {
		return err
	}
	p := coherence.Pending{Kind: uint8(kind), Bulk: kind != driver.InvalidationKey, Target: target, Version: version,
		DeleteShared: c.opts.Shared != nil}
	if c.redo.Announced(p, err == nil, sharedFailed) {
		if ok, suppressed := c.busLog.allow(); ok {
			c.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "flightcache: too many writes waiting to be announced; the oldest was dropped",
				slog.String("cache", c.opts.Name), slog.Int64("suppressed", suppressed))
		}
	}
	return err
}

// PendingInvalidations returns how many writes of this instance wait to be
// announced to the other instances (see ErrNotPublished): the redo starts
// as soon as one is pending and tries again with backoff (SharedTimeout
// doubling to 5s, and at once when the Bus comes back) until none is left.
// 0 without a Bus.
func (c *Cache[V]) PendingInvalidations() int {
	return c.redo.Len()
}

// maxRedoBackoff bounds the wait between two tries of the pending writes:
// about a breaker's cool-down.
const maxRedoBackoff = 5 * time.Second

// redoOne redoes one pending write: the shared entry's removal when its
// update failed, then the invalidation with its original version. Neither
// asks the SharedBreaker: a breaker left open by the outage would refuse
// the redo until its cool-down, while the other instances, whose buses are
// back, already trust the shared tier again. One call per try, bounded by
// SharedTimeout, is cheap even when Redis is still down.
func (c *Cache[V]) redoOne(p coherence.Pending) error {
	ctx := context.Background()
	if p.DeleteShared && c.opts.Coordinator != nil {
		// The write's fence may have failed with its shared update: fence
		// again first, so that no load in flight elsewhere writes after
		// the removal.
		if err := c.opts.Coordinator.Invalidate(ctx, p.Target); err != nil {
			return err
		}
	}
	if p.DeleteShared {
		dctx, cancel := context.WithTimeout(ctx, c.opts.SharedTimeout)
		err := c.opts.Shared.Delete(dctx, p.Target)
		cancel()
		if err != nil {
			return err
		}
	}
	return c.publishVia(ctx, driver.InvalidationKind(p.Kind), p.Target, p.Version, false)
}
