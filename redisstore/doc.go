// Package redisstore is the shared tier of flightcache: a
// driver.SharedStore on any redis.UniversalClient (single node,
// Sentinel failover or Cluster), so every instance of a service sees the
// value one of them loaded.
//
// # Commands
//
// Every operation is exactly one command and one round trip on one key,
// which is also what keeps it valid on Cluster (no multi-key commands, no
// scripts):
//
//	Get:    GETRANGE <prefix><key> 0 <MaxPayload>
//	        (then DEL <prefix><key> when it held more than MaxPayload
//	        bytes or another type than a string: see Store.Get)
//	Set:    SET    <prefix><key> <envelope> PX <ms until StaleUntil>
//	        (DEL   <prefix><key> instead, when StaleUntil is less than 1ms away)
//	Delete: DEL    <prefix><key>
//
// The batch operations (driver.BatchSharedStore) take one round trip
// for many keys:
//
//	GetMany: GETRANGE <prefix><key> 0 <MaxPayload> per key, pipelined
//	         (Cluster, Ring: the client sends one pipeline per node; never
//	         MGET, which would copy a planted oversized value whole)
//	SetMany: SET … PX (or DEL) per key, pipelined
//
// Redis therefore drops an entry by itself at its StaleUntil; the PX is
// rounded down so Redis never keeps an entry past it.
//
// With Options.HashTag the Redis key is <prefix>{<h>}<key>, h being 16 hex
// digits of SHA-256(key): a Redis Cluster hash tag that package redislease
// extends (<prefix>{<h>}<key>|lease, |token, …) so that a key's value and
// its coordination keys share one slot, whatever the key contains. Store.RedisKey
// and Store.Envelope expose the layout and the exact bytes Set would write,
// for redislease's fenced write.
//
// # Envelope
//
// The value is stored in a compact binary envelope so Meta travels with it
// in the same GET (all integers are unsigned LEB128 varints, minimally
// encoded, except the fixed-size key hash and checksum; times are Unix
// nanoseconds):
//
//	offset  size  field
//	0       1     magic 0xFC
//	1       1     version 0x03
//	2       1     flags: bit 0 = NotFound (tombstone), bit 1 = LoadedAt
//	              present, bit 2 = tags present; bits 3-7 must be 0
//	3       8     key hash: the first 8 bytes of SHA-256(<prefix><key>),
//	              little endian
//	11      var   StaleUntil (Unix ns, > 0)
//	.       var   StaleUntil - FreshUntil (ns; FreshUntil <= StaleUntil and >= 1970)
//	.       var   StaleUntil - LoadedAt (ns; LoadedAt <= StaleUntil and >= 1970),
//	              only with flag bit 1; without it LoadedAt is unknown (zero)
//	.       var   LoadDuration (ns)
//	.       var   t = number of tags (1 to 16), then t times: the tag's
//	              length (1 to 128) and its bytes; only with flag bit 2
//	.       var   n = length of the value
//	.       n     value: the codec's bytes; n = 0 for a tombstone
//	end-4   4     CRC-32C (Castagnoli), little endian, of every byte before it
//
// An authenticated envelope (version 0x04, written and read only by a Store
// with Options.EntryKeys; see "Authenticated entries" below) is the same
// with version byte 0x04, followed by 32 more bytes:
//
//	end-32  32    HMAC-SHA256, under the first entry key, of
//	              uvarint(len(<prefix><key>)) || <prefix><key> || every byte
//	              before it (the envelope, checksum included)
//
// A typical header is 3 + 8 + 9 + 6 + 6 + 4 + 2 bytes plus the 4-byte
// checksum, about 42 bytes. Decode checks every field (magic, version,
// reserved flag bits, key hash, varint bounds and minimality, exact length,
// checksum), so a truncated, foreign or corrupted payload is reported as a
// *CorruptError (errors.Is(err, ErrCorrupt)) and never returned as a value.
// A future version byte is reported the same way: an old binary treats a new
// envelope as a miss, not as garbage. Tags came without a new version: an
// untagged entry is encoded exactly as before, so entries written before
// decode unchanged; a binary that knows no tags treats a tagged entry (an
// unknown flag bit) as a miss, never as an untagged value.
//
// # Entries are bound to their key
//
// The key hash ties an envelope to the Redis key it was written for, prefix
// included. A well-formed entry found under any other key (copied or renamed
// in Redis, restored into the wrong place, or written under another prefix)
// is a *CorruptError that also matches ErrKeyMismatch, and the Cache reads it
// as a miss: one tenant's entry copied under another tenant's key is never
// served to the other tenant. The hash is SHA-256 cut to 64 bits rather than
// a faster non-cryptographic hash such as FNV-1a because FNV has structure
// that lets chosen keys collide, while for SHA-256 any given pair of keys
// collides with probability 2^-64; its cost (a few hundred nanoseconds) is
// noise against a Redis round trip. It is a check, not authentication: a
// client that can write to Redis can write a valid entry for any key. To
// keep such a client from choosing what the Cache serves, give the Store
// entry keys (below); in any case, control access to Redis as for any data
// store.
//
// # Authenticated entries
//
// With Options.EntryKeys, every envelope the Store writes (Set, SetMany, and
// Envelope for redislease's fenced write) is version 0x04 and ends with an
// HMAC-SHA256 (crypto/hmac) of the Redis key and the whole envelope, made
// with the first key. Every read (Get, GetMany, and OpenEnvelope for the
// entry a refused fenced write hands back) accepts an envelope only if its
// MAC verifies with one of the keys, compared in constant time, and checks
// it before parsing the entry's times and value. Anything else, an envelope of any other
// version (a Store without keys, an older release, a forger), a wrong or
// missing MAC, a truncated envelope, is a *CorruptError (matching
// ErrUnauthenticated when the envelope was whole but not authenticated),
// never a value: the Cache reads it as a miss, loads the key's value and
// overwrites the entry; the breaker does not count it (it matches
// driver.ErrEntryRejected). A Store without keys reads and writes exactly as
// before (version 0x03) and refuses version 0x04, which it cannot verify.
//
// Keys are at least MinEntryKeyLen (16) bytes; use 32 random bytes, the same
// on every instance sharing the prefix, and keep them as secret as Redis'
// password: a key lets its holder write entries every instance serves.
// Rotation: deploy [new, old] everywhere (new entries are signed with the
// new key, both verify), then, once every entry signed with the old key has
// expired (the Caches' TTL plus StaleFor), deploy [new]. Turning keys on or
// off makes every entry already in Redis a miss, one load per key, spread
// over the keys' next reads; while a rollout mixes Stores with and without
// keys, each refuses the other's entries and overwrites them.
//
// The MAC authenticates an entry's origin, not its age: someone who can
// write to Redis can put back an older authenticated entry of the same key
// (the MAC covers the key, so not another key's), until its StaleUntil. The
// Cache bounds how long any entry read back stays fresh (Options.MaxTTL in
// package flightcache), and its fences refuse entries older than writes it
// knows of.
//
// Versions 0x01 and 0x02 of the envelope had no key hash, so their entries
// cannot be verified. Decode rejects them; Get reads them as a plain miss,
// without an error (an upgrade leaves one under every key, which is not a
// failure), and the next Set for the key overwrites it. An upgrade therefore
// costs one load per key, spread over the keys' next reads.
//
// # Times are wall-clock
//
// FreshUntil, StaleUntil and LoadedAt are instants other processes, on other
// hosts, compare with their own clocks, so the Store stores and reads them as
// wall-clock times (Unix nanoseconds) and takes the PX of a Set from the
// wall clock. It does not convert anything: the Cache hands it wall-clock
// Meta, whatever clock it uses for its own hot path, and converts what Get
// returns. Hosts are expected to run NTP; with skew, an entry may look fresh
// or stale up to the skew early or late, and one past its StaleUntil on the
// reader's clock is a miss (see below).
//
// # Keys never appear in errors
//
// Keys can carry tenant ids and personal data, and the Cache logs the
// Store's errors and puts them in events. Where an error must name its key
// (*CorruptError, *PayloadTooLargeError) it carries a KeyHandle instead: the
// first 8 hex digits of SHA-256(<prefix><key>), which an operator can compute
// for a key they suspect:
//
//	printf %s 'flightcache:user:42' | sha256sum | cut -c1-8
//
// MaxKeyLen (the method) is the longest key the Store accepts, MaxKeyLen
// (the constant) less the prefix; it makes the Store a driver.KeyLimiter,
// so a Cache that would admit keys this tier cannot hold is refused at New.
//
// # Failure policy
//
// The shared tier is an optimisation, never a source of truth, so the Store
// reports every failure and decides nothing on the cache's behalf:
//
//   - A missing key is (Entry{}, false, nil). So is an entry whose StaleUntil
//     has passed by this process's clock, which can happen with clock skew
//     between the writer and the reader.
//   - A Redis error (unreachable, timeout, READONLY, …) is returned wrapped;
//     flightcache.Cache treats a failed read as a miss and a failed write as
//     best effort. Nothing is retried here beyond what the client itself is
//     configured to do.
//   - A payload that does not decode, that is an entry of another key, or
//     (with Options.EntryKeys) that fails authentication, is a
//     *CorruptError. It is left in Redis; the next successful Set
//     overwrites it. Without EntryKeys, an entry of an envelope version
//     without a key hash is a plain miss.
//   - A Set whose envelope exceeds MaxPayload sends nothing to Redis and
//     returns a *PayloadTooLargeError (errors.Is(err, ErrPayloadTooLarge)).
//   - An invalid key is a *flightcache.KeyError; invalid Meta is an
//     *EntryError. Neither reaches Redis.
//
// # Timeouts and retries
//
// Two layers bound a call, and they must agree:
//
//   - The Cache gives every shared-tier call its own deadline,
//     flightcache.Options.SharedTimeout (default 250 ms), independent of the
//     caller's context and of the loader timeout; its SharedBreaker, if set,
//     skips the tier altogether after a run of failures. Options.Timeout here
//     adds a bound of the Store's own, for callers other than the Cache.
//   - go-redis has its own: DialTimeout (default 5 s), ReadTimeout and
//     WriteTimeout (default 3 s) on the socket, PoolTimeout (default
//     ReadTimeout + 1 s) to wait for a free connection, and MaxRetries
//     (default 3) with a backoff of 10 ms to 1 s between attempts. Without ContextTimeoutEnabled, go-redis ignores the
//     context's deadline on the socket and only these bound a stuck server:
//     a hung Redis then costs a call up to (MaxRetries+1) × ReadTimeout plus
//     the backoffs, over ten seconds with the defaults, whatever
//     SharedTimeout says.
//
// Recommended for a client that serves a Cache on the request path:
//
//	redis.UniversalOptions{
//		ContextTimeoutEnabled: true,                   // the Cache's deadline reaches the socket
//		DialTimeout:           500 * time.Millisecond, // a dead host fails fast
//		ReadTimeout:           500 * time.Millisecond, // backstop; SharedTimeout is the real bound
//		WriteTimeout:          500 * time.Millisecond,
//		PoolTimeout:           500 * time.Millisecond,
//		MaxRetries:            -1,                     // no retry (0 means go-redis' default, 3); or 1
//	}
//
// With ContextTimeoutEnabled the shortest of SharedTimeout and the socket
// timeouts wins, so keep the socket timeouts at or above SharedTimeout:
// they then only matter to callers without a deadline. Retries spend the
// same deadline; on the hot path a failed read is a miss anyway, so a retry
// buys little and a breaker (package breaker) does the job better: it stops
// paying even the one deadline per call while Redis is down.
package redisstore
