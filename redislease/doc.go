// Package redislease is flightcache's cluster coalescing on Redis: a
// driver.Coordinator that makes one instance of a service load a
// missing key while the others wait for its result, with leases, monotonic
// fencing tokens, result broadcast and crash takeover. The same
// Coordinator is a driver.Bus, which carries invalidations between
// the instances over the subscription connection the leases already use.
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
//	cache, err := flightcache.New(flightcache.Options[*Product]{Local: local, Shared: store, Coordinator: coord, Bus: coord})
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
//	V|token     the key's newest fencing token, PX LeaseTTL, extended with the lease
//	V|done      the token of the last completed load, PX LeaseTTL
//	V|fail      "<token> <class>" of the last failed load, PX FailureWindow
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
// "done" (with the value key's payload when the Claim asks to read,
// driver.ClaimRequest.Read); with read, a value present answers with that
// value and no lease (read-or-claim: the Cache's double-check and the
// claim in one round trip); a lease held by another makes the caller a
// follower. A look (driver.ClaimRequest.Wait 0 with Read: a Get's shared
// read, which a flightcache.Cache sends as its flight's first Claim with
// Options.ReadInClaim, see Coordinator.ClaimReads) reads the value key
// before any marker, and answers "held" at once instead of following: a
// warm shared hit is that one script, and a cold miss two with Complete.
// By default the Cache reads the value key itself with a plain bounded GET
// before its flight (a warm shared hit is that GET, cheaper for Redis than
// any script), and a cold miss costs three round trips. Otherwise it
// sets the lease (SET NX-style, PX LeaseTTL) and issues a token (INCR, kept
// above the server clock in microseconds so it never repeats even after the
// token key expired or Redis restarted empty), in one atomic step.
//
// The leader's heartbeat extends the lease every LeaseTTL/3 with a script
// that checks the token, and the token key with it while it holds the
// lease's token: a token key lives LeaseTTL past its last use, not longer
// (see scripts.go for why that is safe for fencing). Complete is one
// script: the fenced write (SET of the value only if the leader's token is
// still the key's newest), the done marker, the release
// (compare-and-delete of the lease) and a PUBLISH (SPUBLISH on a Cluster)
// on the key's channel: one round trip, and no follower hears of the
// completion before it is written. A refused write's script also returns the
// entry the key holds, which Complete hands back checked as a Get would
// (driver.Completion.Current): the fenced leader's callers get the newer
// value without a second round trip. Fail records the failure marker,
// releases the lease and publishes in one script the same way. The marker
// carries only the failure's class (timeout, not-found or error), never the
// origin's error text, which can hold SQL, host names or credentials:
// followers on other instances get a fixed error matching
// flightcache.ErrLeaderFailed that names the class, and the leader's own
// callers keep the full error.
//
// A batch (flightcache's GetMany and FetchMany) uses the Coordinator as a
// driver.BatchCoordinator: ClaimMany sends one small claim script per key
// (the failure marker, the value when read is asked, the lease), all in
// one pipeline, so a batch claims its keys in one round trip on one
// Redis and one per master on a Redis Cluster; CompleteMany and FailMany
// pipeline the complete and fail scripts the same way. A key another
// instance holds is reported busy, and the Cache waits for it with Claim.
// Each granted lease has its own heartbeat, as Claim's has.
//
// Single keys' scripts are grouped the same way when they are concurrent,
// as the misses of a flightcache.Batcher are (each key's flight claims on
// its own): per script (acquire, complete, fail) and per master, a call
// that finds none of its kind in progress goes at once, alone, so a lone
// Claim pays no window and no extra round trip; the calls that arrive
// while one is in progress wait and go together, in one pipeline, when it
// returns. N concurrent Claims of distinct keys then cost two round trips
// on one Redis, not N, and two per master on a Cluster. Options.Timeout
// bounds each round trip from the moment it is sent, not the wait before.
// A caller whose ctx ends while its call waits returns at once and its
// script is not sent; once its pipeline is taken, it waits for its answer,
// so that no lease Redis grants is left without its caller. Heartbeats are
// not grouped (a late one would lose its lease), nor are calls through a
// Ring (its pipelines wait for every shard) or, on a Cluster, calls whose
// master the slot map cannot name at the moment. Each call gets its own reply or error;
// scripts answered NOSCRIPT are sent again with their text. At most 256
// calls go in one pipeline and 1,024 wait per group; a call that finds its
// group's queue full goes alone.
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
//
// When a Redis Cluster gives a slot to another master, the old master ends
// the sharded subscriptions of the slot's channels (an SUNSUBSCRIBE push):
// followers waiting on such a channel look at the lease again at once and
// subscribe anew, on the new master; the bus goes down, moves its channels
// and comes back up. When a sharded subscription connection is cut,
// go-redis subscribes its channels again with one SSUBSCRIBE, which the
// Cluster refuses whole if they span slots (CROSSSLOT); the bus, whose
// heartbeats then stop coming back, subscribes its own channels again
// after DownAfter, and followers on that connection are woken by their
// safety-net re-check.
//
// # Bus
//
// The bus has two channels and one key per cache, with the store's prefix
// P and the Coordinator's origin O (below):
//
//	P{bus}              the bus channel, shared by every instance on P
//	P{bus}|hb|O         the Coordinator's own heartbeat channel
//	P{bus}|bulk|<cache> the cache's retained bulk invalidations (below)
//
// All carry the hash tag {bus}, so on a Cluster they live in one slot, on
// one master, which carries all of the bus's traffic. Publish sends one
// message per invalidation on the bus channel (PUBLISH, or SPUBLISH on a
// Cluster); every Coordinator on P whose Subscribe is active receives it,
// except the one that published it.
// Redis pub/sub delivers at most once: the bus's state tells a Cache when
// it may have missed something, and the Cache resynchronises.
//
// A Publish returns only once its message came back on the Coordinator's
// own subscription of the bus channel (when it has one, as a Cache's
// always does). Redis writes a published message to every subscriber of
// the channel at once, in the order it runs the publishes, so the echo
// says every other subscriber's connection has been handed the message
// too: a write that returned has been announced, and what remains before
// another instance drops its older copy is the last network hop to it and
// its handler (measured on loopback: the other handler had run before
// Publish returned in most rounds, p99 under 0.4 ms after it otherwise;
// see docs/ARCHITECTURE.md). A message that does not come back within the
// call's deadline fails the Publish with ErrNotDelivered, although Redis
// took it, and the Cache redoes the invalidation later; that costs one
// more delivery, never a lost one. The wait makes a Publish about one
// delivery slower.
//
// A message is small, versioned and strict:
//
//	fc1 <origin> <k|p|a> <version> <n>:<cache><target>
//
// origin is a random 64-bit id the Coordinator draws at New, in 16
// lowercase hex digits; a Coordinator never delivers messages of its own
// origin. The kind is k (one key), p (a prefix) or a (the whole cache);
// version is the Invalidation's Version in Unix microseconds; n is the
// cache name's length (1 to 255 bytes), and the target (empty for a, up
// to 64 KiB otherwise) runs to the end. An invalidation of key
// "product:1234567" in cache "product" is 64 bytes. A message carries
// the raw cache key, never the value: the Redis key names already contain
// it (V above), so the bus discloses nothing that listing the keyspace
// does not, and a prefix invalidation needs raw keys to match. Redis ACLs
// restrict the channels (&P{bus}*) as they restrict the keys (~P*, which
// covers the retained sets). The decoder accepts exactly what the encoder
// writes, nothing else; other messages (another version, malformed,
// oversized) are dropped and counted in BusStats.Dropped, and never reach
// a handler.
//
// Resynchronising empties an instance's local tier, but a bulk
// invalidation (InvalidationPrefix, InvalidationAll) or a tag one
// (InvalidationTag, InvalidationTagExpire) also tells the
// instances to ignore the shared tier's entries it covers, which stay
// there until they expire; an instance that missed it (its bus was down,
// it restarted, it started later) would serve them. So the bus retains
// bulk invalidations: Publish records each in the cache's sorted set
// P{bus}|bulk|<cache> (member: p and the prefix, t or e and the tag, or
// a; score: the
// Version in microseconds; a member keeps its newest Version) and
// publishes it, in one script. The script drops the members older than
// Options.BulkRetention (default 25 hours; it must cover the Caches' TTL
// plus StaleFor), keeps the set to 10,000 members, folding the oldest
// into one "a" as new as the newest of them, which covers all they
// covered, and sets the key to expire after the retention window. Before
// every BusChanged(BusUp) of a subscription, the first one included, the
// bus reads the set within the window and delivers its invalidations,
// oldest first (more than 16 MiB of targets are delivered as one
// InvalidationAll as new as the newest); it reads only once the bus
// channel's subscription is confirmed, so what it does not find arrives
// as a message. A subscription whose read fails stays down and reads
// again at the next heartbeat. BusStats.Replayed counts what was
// replayed.
//
// The bus runs while at least one Subscribe is active. It adds its two
// channels to the Coordinator's one subscription connection (per master
// on a Cluster), and publishes a heartbeat, a sequence number, to its own
// heartbeat channel every Options.HeartbeatInterval. It is up once the bus
// channel's subscription is confirmed and a heartbeat published after
// that confirmation came back. It goes down when a heartbeat cannot be
// published (at once for a refused connection, within Options.Timeout
// otherwise), when no heartbeat came back for Options.DownAfter (noticed
// within one more HeartbeatInterval), and when the bus channel's
// subscription is confirmed again: go-redis reconnects and subscribes
// again silently, and only that new confirmation says messages may have
// been lost. It is up again when a heartbeat published since came back.
// With the defaults, a dead Redis is noticed within 250ms, a hung one
// within 500ms (a heartbeat times out), a dropped connection as soon as
// go-redis has reconnected (or when the heartbeats stop, if it cannot).
//
// Each subscription has its own goroutine and a queue bounded by 4096
// invalidations and 16 MiB of targets, so the connection's reader, which
// also wakes the lease followers, never waits for a handler; messages for
// caches that are not subscribed are not queued. When the bus goes down,
// the queue is emptied and BusDown is the handler's next call, after the
// one in progress: a slow handler does not work through invalidations
// that the move back to BusUp makes up for anyway. A handler that falls
// further behind than the queue holds loses everything queued for it
// (counted in BusStats.Overflowed), is told BusDown next, and BusUp once
// it caught up, after the replay; the Cache resynchronises on that as on
// any other outage. Each cache name has one subscription per Coordinator:
// a Coordinator never delivers its own messages, so two Caches of one
// name on one Coordinator would never hear each other.
package redislease
