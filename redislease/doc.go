// Package redislease is flightcache's cluster coalescing on Redis: a
// flightcache.Coordinator that makes one instance of a service load a
// missing key while the others wait for its result, with leases, monotonic
// fencing tokens, result broadcast and crash takeover.
//
// # Wiring
//
// It shares the client and the key layout of the shared tier, so the store
// must be built with redisstore.Options.HashTag:
//
//	store, err := redisstore.New(client, redisstore.Options{Prefix: "product:", HashTag: true})
//	coord, err := redislease.New(ctx, client, store, redislease.Options{LeaseTTL: 3 * time.Second})
//	if err != nil {
//		return err // Redis unreachable (ErrUnreachable): a configuration error, reported at start
//	}
//	defer coord.Close()
//	cache, err := flightcache.New(flightcache.Options[*Product]{Local: local, Shared: store, Coordinator: coord})
//
// Process-local coalescing is the same code without Coordinator; it is
// never a silent fallback for a Coordinator that New refused.
//
// # Keys
//
// For a cache key k, with the store's Redis key V = <prefix>{<h>}k (h: 16
// hex digits of SHA-256(k)):
//
//	V           the value (redisstore's envelope, bound to V)
//	V|lease     the lease: the holder's token, PX LeaseTTL
//	V|token     the key's newest fencing token, PX 1h
//	V|done      the token of the last completed load, PX LeaseTTL
//	V|fail      "<token> <message>" of the last failed load, PX FailureWindow
//	V|ch        the pub/sub channel of the key's completions
//
// Every name begins with V's hash tag, so on Redis Cluster all of them are in
// one slot whatever k contains, braces included, and every script touches a
// single slot. A derived name cannot be another key's value name short of a
// 64-bit hash collision, since that would need the same h for two keys.
// Tenants never share a lease or a result: the names derive from the
// canonical key the Cache is given, tenant included.
//
// # Protocol
//
// Claim, run inside the instance's own flight (so an instance asks once per
// key at a time), runs the acquire script: a failure marker answers
// ErrLeaderFailed; a completion newer than the caller has seen answers
// "done"; a lease held by another makes the caller a follower; otherwise it
// sets the lease (SET NX-style, PX LeaseTTL) and issues a token (INCR, kept
// above the server clock in microseconds so it never repeats even after the
// token key expired or Redis restarted empty), in one atomic step.
//
// The leader's heartbeat extends the lease every LeaseTTL/3 with a script
// that checks the token. Complete is one script: the fenced write (SET of the
// value only if the leader's token is still the key's newest), the done
// marker, and the release (compare-and-delete of the lease); then a PUBLISH
// (SPUBLISH on a Cluster) on the key's channel. Fail records the failure
// marker and releases the lease the same way, then publishes.
//
// A follower subscribes to the key's channel (reference-counted, over one
// subscription connection per instance, or per master for sharded pub/sub
// on a Cluster) and waits for confirmation before it looks at the lease
// again, so no completion can fall between the look and the subscription.
// Any message, or a safety-net timer (jittered, doubling from 50 ms to 1 s,
// and due just after the lease's remaining TTL), makes it run the acquire
// script again: it then learns of the completion or failure, or takes the
// lease over if it expired without a result (exactly one follower wins the
// atomic acquire; its token is higher, so the old leader's write, should it
// come back, is refused).
//
// Invalidate (called by Cache.Set and Cache.Delete) issues a new token no
// lease holds and clears the markers, so an explicit write on any instance
// wins over every load in flight.
//
// # Failures
//
// Every Redis call is bounded by Options.Timeout. A Claim that cannot reach
// Redis returns the error, and the Cache applies its
// Options.OnCoordinatorFailure (degrade to process-local by default, or
// fail). A leader that cannot extend its lease for a whole LeaseTTL reports
// it lost; its write is then likely fenced. A lost publish costs followers
// one safety-net re-check, no more.
package redislease
