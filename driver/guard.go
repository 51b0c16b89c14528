package driver

import "context"

// Guard turns away keys that cannot exist before they cost a shared-tier
// round trip or an origin call (cache penetration: a flood of distinct,
// made-up IDs, each of which would otherwise be a cold miss and an origin
// query). Package bloomguard provides one on a Bloom filter.
//
// The Cache consults the Guard after a local-tier miss and before the shared
// tier and the flight. A "no" answers the Get with ErrNotFound and
// OutcomeFiltered; a "maybe" goes on as usual.
type Guard interface {
	// MayExist reports whether key may exist at the origin. false must be
	// certain: a false negative makes a real value unreachable. A Guard
	// that cannot tell (not built yet, unsure) must answer true. It is
	// called on the hot path from many goroutines: it must be fast and
	// safe for concurrent use.
	MayExist(ctx context.Context, key string) bool
}
