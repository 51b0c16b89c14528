package flightcache

import (
	"context"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/coherence"
)

// Tags group values for invalidation: a value carries up to 16 tags (a
// loader sets them with SetTags, Set takes them from WithTags), and
// InvalidateTag or ExpireTag covers every value carrying a tag whose data
// was read before the call, in every tier, on every instance.
//
// Each tag invalidated lately has a fence (coherence.TagFences) holding
// the invalidation's version. Nothing walks a tier: every read of a
// tagged value, local or shared, compares the value's own read time (its
// Meta.Version, the start of its load or the time of its Set, on the wall
// clock) with the fences of its tags, and a covered value is
// absent (InvalidateTag) or only stale (ExpireTag). A load whose tags were
// fenced after it began serves its callers and stores nothing. An
// untagged value, and every value while no fence lives, costs one length
// check more than before.

// SetTags, called by a LoadFunc or BatchLoadFunc on its ctx, tags the
// values it returns (every value of a batch) with tags, in addition to
// tags set earlier by the same load. Like SetTTL it may be called from any
// goroutine of the loader and is a no-op on any other context. Tags out of
// bounds (see ErrInvalidTag) keep the value from being stored: it is
// returned, with OutcomeLoadedWriteFailed and a Result.WriteErr matching
// ErrInvalidTag.
func SetTags(ctx context.Context, tags ...string) {
	if p := policyFrom(ctx); p != nil {
		p.addTags(tags)
	}
}

// WithTags returns a copy of ctx under which Set tags the value it stores
// with tags (replacing tags given to an outer WithTags):
//
//	err := c.Set(flightcache.WithTags(ctx, "product:42"), key, v)
//
// Set returns an error matching ErrInvalidTag, and writes nothing, for
// tags out of bounds.
func WithTags(ctx context.Context, tags ...string) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, tagsKey{}, slices.Clone(tags))
}

type tagsKey struct{}

// explicitTags returns the tags WithTags put on ctx, checked.
func explicitTags(ctx context.Context) ([]string, error) {
	tags, _ := ctx.Value(tagsKey{}).([]string)
	if len(tags) == 0 {
		return nil, nil
	}
	return checkTags(tags)
}

// checkTags returns tags without repeats, or an error matching
// ErrInvalidTag that names no tag (tags are request input, like keys).
func checkTags(tags []string) ([]string, error) {
	out := make([]string, 0, len(tags))
	for _, t := range tags {
		if err := checkTag(t); err != nil {
			return nil, err
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(out) > coherence.MaxTags {
		return nil, fmt.Errorf("%w: %d tags on one value, more than %d", ErrInvalidTag, len(out), coherence.MaxTags)
	}
	return out, nil
}

func checkTag(tag string) error {
	switch {
	case tag == "":
		return fmt.Errorf("%w: empty", ErrInvalidTag)
	case len(tag) > coherence.MaxTagLen:
		return fmt.Errorf("%w: %d bytes, longer than %d", ErrInvalidTag, len(tag), coherence.MaxTagLen)
	case !utf8.ValidString(tag):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidTag)
	}
	return nil
}

// InvalidateTag makes every value tagged tag whose data was read before
// the call absent, in every tier, on this instance at once and, with a
// Bus, on every other instance within the Bus's delivery time: it is
// never served again, not even as a stale fallback. A load in progress
// that began before the call serves its callers but stores nothing, and
// a Get that starts after the call returns does not share it.
//
// "Before the call" includes ClockSkew after it, as for InvalidatePrefix:
// the instances' clocks differ, so a value loaded or Set with the tag
// within ClockSkew of the call is reloaded once more.
//
// The call costs one map write: nothing walks a tier. The tiers keep the
// covered values until they expire or are replaced; for that long (the
// longest TTL a loader may set, MaxTTL, plus StaleFor) every instance
// keeps the tag's fence, and the Bus retains the invalidation and replays
// it to instances that missed it (down, restarted, started later). At
// most 100,000 tags are fenced at once: beyond that the oldest fence is
// folded into one that covers every tagged value read before it, so the
// invalidation still holds and other tagged values reload once more.
//
// The error matches ErrInvalidTag for a tag out of bounds, and
// ErrNotPublished when the local part was done but the Bus did not take
// the message (the Cache redoes the publish until it succeeds).
func (c *Cache[V]) InvalidateTag(ctx context.Context, tag string) error {
	return c.invalidateTag(ctx, driver.InvalidationTag, tag)
}

// ExpireTag is InvalidateTag, except that the values it covers stay
// servable as stale until they are replaced: as the fallback of a load
// that fails or outlasts SoftTimeout, for StaleFor past their TTL, as a
// value past its TTL is. A Get loads them again at once. Without StaleFor
// it is InvalidateTag.
func (c *Cache[V]) ExpireTag(ctx context.Context, tag string) error {
	return c.invalidateTag(ctx, driver.InvalidationTagExpire, tag)
}

func (c *Cache[V]) invalidateTag(ctx context.Context, kind driver.InvalidationKind, tag string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if c.coh.Closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkTag(tag); err != nil {
		return err
	}
	wall := time.Now().Round(0)
	// Local items are compared with the version itself: their Versions
	// are read precisely from this host's clock, as wall is, so an item
	// read before the call is older and one read after it newer, with no
	// allowance (one received from another host gets ClockSkew, see
	// received).
	c.noteTag(ctx, kind, tag, wall, wall)
	return c.announce(ctx, kind, tag, wall, false)
}

// noteTag raises tag's fence to version, given as shared entries are
// compared with it and as local items are, and makes a Get that starts
// from now on start a new flight (coherence.Model.NoteTag). It reports
// whether the fence moved.
func (c *Cache[V]) noteTag(ctx context.Context, kind driver.InvalidationKind, tag string, wall, local time.Time) bool {
	moved, folded := c.coh.NoteTag(tag, wall, local, kind == driver.InvalidationTagExpire, c.opts.Now(), localIO[V]{c})
	if folded {
		c.fencesDropped(ctx, true, 1)
	}
	return moved
}

// tagsCover is what the tag fences make of a local item: TagsClear at
// once for an untagged item and while no fence lives, the hit path's
// case.
func (c *Cache[V]) tagsCover(it *driver.Item[V], now time.Time) coherence.TagState {
	if len(it.Tags) == 0 || !c.coh.Tags.Live() {
		return coherence.TagsClear
	}
	return c.coh.Tags.Local(it.Tags, it.Version, now)
}

// tagLoaded puts the tags the loader set on the item it loaded, and keeps
// the item from being stored (pol's NoStore) when the tags are out of
// bounds (fl.writeErr says so) or one was fenced since the load began: a
// load whose tags were invalidated after it began serves its own callers,
// never the tiers.
func (c *Cache[V]) tagLoaded(pol *storePolicy, fl *flight[V]) {
	tags, err := pol.tagList()
	if err != nil {
		fl.writeErr = err
		pol.noStore.Store(true)
		return
	}
	if len(tags) == 0 {
		return
	}
	fl.item.Tags = tags
	if c.tagsCover(&fl.item, c.opts.Now()) != coherence.TagsClear {
		fl.uncached = true
		pol.noStore.Store(true)
	}
}
