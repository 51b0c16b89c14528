package driver

import (
	"context"
	"time"
)

// InvalidationKind says what an Invalidation covers.
type InvalidationKind uint8

// The kinds of invalidation.
const (
	// InvalidationKey covers one key: Target.
	InvalidationKey InvalidationKind = iota + 1
	// InvalidationPrefix covers every key that begins with Target (see
	// Cache.InvalidatePrefix).
	InvalidationPrefix
	// InvalidationAll covers every key of the Cache (see Cache.Clear);
	// Target is empty.
	InvalidationAll
	// InvalidationTag covers every value tagged Target (see
	// Cache.InvalidateTag): the ones read before Version are absent.
	InvalidationTag
	// InvalidationTagExpire covers every value tagged Target (see
	// Cache.ExpireTag): the ones read before Version are stale, served
	// only as a fallback until replaced.
	InvalidationTagExpire
)

var invalidationKindNames = [...]string{
	InvalidationKey:       "key",
	InvalidationPrefix:    "prefix",
	InvalidationAll:       "all",
	InvalidationTag:       "tag",
	InvalidationTagExpire: "tag_expire",
}

// String returns "key", "prefix", "all", "tag" or "tag_expire", usable
// as a metric label.
func (k InvalidationKind) String() string {
	if int(k) < len(invalidationKindNames) && invalidationKindNames[k] != "" {
		return invalidationKindNames[k]
	}
	return "unknown"
}

// Invalidation is one message on the Bus: the values it covers that are
// older than Version must no longer be served.
type Invalidation struct {
	Kind InvalidationKind
	// Target is the key (InvalidationKey), the prefix
	// (InvalidationPrefix) or the tag (InvalidationTag,
	// InvalidationTagExpire); empty for InvalidationAll.
	Target string
	// Version is the wall-clock time (time.Now) from which the publisher's
	// write is visible: for Set, the read time of the entry it stored
	// (Meta.LoadedAt); for Delete, InvalidatePrefix and Clear, when the
	// call was made, after the origin changed. Buses carry it with at
	// least microsecond precision, truncated (never rounded up).
	Version time.Time
}

// BusState is the state of a Cache's subscription to its Bus.
type BusState uint8

// The bus states.
const (
	// BusNone: the Cache has no Bus.
	BusNone BusState = iota
	// BusDown: the subscription is not known to work (not yet confirmed,
	// connection lost, heartbeats not coming back): invalidations may be
	// missed, so local items are served for at most Options.BusDownTTL.
	BusDown
	// BusUp: invalidations published by other instances arrive.
	BusUp
)

// String returns "none", "down" or "up", usable as a metric label.
func (s BusState) String() string {
	switch s {
	case BusDown:
		return "down"
	case BusUp:
		return "up"
	}
	return "none"
}

// Bus carries invalidations between the instances of a service. Package
// redislease provides one on Redis pub/sub (sharded pub/sub on a Redis
// Cluster), sharing one subscription connection per instance with the
// Coordinator. Implementations must be safe for concurrent use.
type Bus interface {
	// Publish sends inv, for the Cache named cache, to every instance
	// subscribed to the bus except the publishing one (which applies its
	// own invalidations directly). It returns once the message has been
	// handed to every subscriber (redislease: it came back on the
	// publisher's own subscription), or with an error when it may not
	// have been, or when ctx ends; the Cache bounds it with SharedTimeout,
	// and redoes a write whose Publish failed.
	// Delivery is at most once: a message lost while a subscriber was
	// disconnected is made up for by that subscriber's resynchronisation
	// (see BusHandler.BusChanged).
	Publish(ctx context.Context, cache string, inv Invalidation) error
	// Subscribe delivers the invalidations other instances publish for
	// cache, and the subscription's state, to h until stop is called.
	//
	// h's methods are called one at a time, from the bus's goroutines, in
	// the order the messages arrived; never after stop returned. Delivery
	// starts in BusDown: the first state change is BusChanged(BusUp), once
	// the subscription is confirmed and known to work (the replayed bulk
	// invalidations, below, come before it). Whenever messages may
	// have been lost since (the connection dropped and was re-established,
	// a heartbeat did not come back in time, h fell too far behind), the
	// bus calls BusChanged(BusDown) promptly, without waiting for the
	// invalidations still queued for h (it may drop them: the move back to
	// BusUp resynchronises), then BusChanged(BusUp) once it works again.
	// Messages that fail to decode are dropped and never reach h.
	//
	// Bulk invalidations (InvalidationPrefix, InvalidationAll) and tag
	// ones (InvalidationTag, InvalidationTagExpire) are also retained by
	// the bus for its retention window, with their own Versions: before
	// every BusChanged(BusUp), the first one included, the bus delivers
	// through h.Invalidated the retained invalidations of cache, oldest
	// first,
	// so that an instance that missed them (its bus was down, it restarted,
	// it started later) still applies them. The window must cover the
	// Cache's TTL plus StaleFor: until then the shared tier may still hold
	// entries they cover.
	//
	// Subscribe fails only for a closed bus or bad arguments (two
	// subscriptions of one cache name on one bus are refused: they would
	// never hear each other); a bus that cannot reach its server reports
	// BusDown and keeps trying.
	Subscribe(cache string, h BusHandler) (stop func(), err error)
}

// BusHandler receives what a Bus delivers for one Cache; see Bus.Subscribe.
type BusHandler interface {
	// Invalidated applies an invalidation published by another instance.
	Invalidated(inv Invalidation)
	// BusChanged reports the subscription's new state.
	BusChanged(s BusState)
}
