// Package chaos tries to break flightcache's cross-instance consistency
// promises under faults, and checks them over a recorded history.
//
// A run (Run) starts a private redis-server and K instances, each a
// flightcache.Cache with a memstore local tier, a redisstore shared tier
// and a redislease Bus (and Coordinator, in cluster mode), over one
// in-memory origin whose keys carry a version that each write bumps.
// Readers Get (one read in four a FetchMany of a few keys of one
// tenant, recorded as one read per key), writers bump the origin and then Set, Delete,
// InvalidatePrefix or InvalidateTag of a category (every key of it
// bumped), as a service answers a PUT or a reprice, and a raw reader reads
// the shared tier's entries straight from Redis. Meanwhile faults are
// injected on a schedule: Redis paused, killed and restarted empty, its
// pub/sub connections killed, scripts or PUBLISH refused, the codec
// panicking, write-backs slowed down. Every operation goes into a History
// on one monotonic clock, and Check holds it to the invariants
// (read-your-writes, monotonic reads, bounded staleness after an
// acknowledged write, no old write landing in Redis, no body of another
// tenant, no call beyond its time bound) within Bounds derived from the
// options. WriteText prints the verdict as a table per fault.
//
// In ModeProductd the instances are productd processes instead (built
// once per run, in cluster mode, on one origin database), read with HTTP
// GETs (one in four of the batch endpoint) and written with PUTs and category reprices, whose new revisions
// the harness reads: the same History, the same Check. Besides the Redis faults, the process
// leading the load of a cold key is killed mid-load and started again, or
// frozen past its lease and thawed.
//
// Soak runs productd processes the same way for minutes without faults,
// under a steady Zipf load with PUTs, samples their resources, and checks
// that they stay flat, that origin queries stay within one per hot key per
// TTL, the GETs' p99, zero errors, and the same History under Check.
package chaos
