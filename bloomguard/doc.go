// Package bloomguard is a penetration guard for flightcache: a Bloom filter
// of the IDs that exist at the origin, partitioned by tenant, which answers
// "certainly not" for made-up IDs before they cost a shared-tier read and
// an origin query. It is built on github.com/bits-and-blooms/bloom/v3.
//
// # Keeping it true
//
// A false negative would make a real value unreachable, so the Filter never
// gives one for an ID that the last successful Rebuild's source yielded, or
// that was added since the Rebuild before it published its filter. Each
// Rebuild copies in every ID added during the generation it replaces,
// whatever its source says; so an ID deleted at the origin leaves the
// filter at the second successful Rebuild after its last Add (it survives
// the first one), and one never added leaves at the first Rebuild whose
// source no longer yields it:
//
//   - Before the first successful Rebuild it answers "maybe" to everything
//     (fail open).
//   - A published Bloom filter is never written again, so reads need no
//     lock. Add records the ID in a small exact set beside the filter,
//     which MayContain consults when the filter says no.
//   - Rebuild streams every (tenant, id) from the source into a new filter
//     and then, under a mutex that Add also takes, copies in every ID added
//     since the current filter was published, including those added while
//     the source was being read, before it swaps the new filter in. An Add
//     therefore lands either in the set that is copied or in the new
//     filter's set.
//   - A failed Rebuild keeps the current filter.
//   - With Config.MaxAge, a filter whose source was read longer ago than
//     MaxAge answers "maybe" again, so a stalled rebuild schedule cannot
//     outlive whatever covers creations made elsewhere meanwhile.
//
// The caller's part: call Add for every ID it creates once the ID is stored
// at the origin (so every later source yields it) and before it
// acknowledges the creation, and rebuild often enough that IDs created by
// other processes arrive (or cover them otherwise; productd checks a
// recent-creations set in Redis).
//
// # Partitioning
//
// IDs are stored as an injective encoding of (tenant, id), so an ID of one
// tenant makes another tenant's lookup "maybe" only as an ordinary false
// positive, at the configured rate.
//
// # Memory
//
// One filter sized with bloom.EstimateParameters for Config.ExpectedItems
// at Config.FalsePositiveRate; a Rebuild holds two filters until the swap.
//
//	expected IDs   FP rate   bits (m)        memory     hash functions (k)
//	1,000,000      1 %       9,585,059       1.1 MiB    7
//	1,000,000      0.1 %     14,377,588      1.7 MiB    10
//	100,000,000    1 %       958,505,838     114.3 MiB  7
//	100,000,000    0.1 %     1,437,758,757   171.4 MiB  10
//
// Each ID added since the last Rebuild also costs its bytes plus a map
// entry in the exact set, until the next Rebuild folds it into the filter.
// A filter holding more IDs than it was sized for answers more false
// positives (never false negatives); Stats reports the estimate, and the
// next Rebuild sizes for at least 5/4 of the IDs the previous one saw.
package bloomguard
