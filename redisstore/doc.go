// Package redisstore is the shared tier of flightcache: a
// flightcache.SharedStore on any redis.UniversalClient (single node,
// Sentinel failover or Cluster), so every instance of a service sees the
// value one of them loaded.
//
// # Commands
//
// Every operation is exactly one command and one round trip on one key,
// which is also what keeps it valid on Cluster (no multi-key commands, no
// scripts):
//
//	Get:    GET    <prefix><key>
//	Set:    SET    <prefix><key> <envelope> PX <ms until StaleUntil>
//	        (DEL   <prefix><key> instead, when StaleUntil is less than 1ms away)
//	Delete: DEL    <prefix><key>
//
// Redis therefore drops an entry by itself at its StaleUntil; the PX is
// rounded down so Redis never keeps an entry past it.
//
// # Envelope
//
// The value is stored in a compact binary envelope so Meta travels with it
// in the same GET (all integers are unsigned LEB128 varints, minimally
// encoded; times are Unix nanoseconds):
//
//	offset  size  field
//	0       1     magic 0xFC
//	1       1     version 0x02
//	2       1     flags: bit 0 = NotFound (tombstone), bit 1 = LoadedAt
//	              present; bits 2-7 must be 0
//	3       var   StaleUntil (Unix ns, > 0)
//	.       var   StaleUntil - FreshUntil (ns; FreshUntil <= StaleUntil and >= 1970)
//	.       var   StaleUntil - LoadedAt (ns; LoadedAt <= StaleUntil and >= 1970),
//	              only with flag bit 1; without it LoadedAt is unknown (zero)
//	.       var   LoadDuration (ns)
//	.       var   n = length of the value
//	.       n     value: the codec's bytes; n = 0 for a tombstone
//	end-4   4     CRC-32C (Castagnoli), little endian, of every byte before it
//
// A typical header is 3 + 9 + 6 + 6 + 4 + 2 bytes plus the 4-byte checksum,
// about 34 bytes. Version 0x01 is version 0x02 without flag bit 1 (and so
// without LoadedAt); Decode still reads it, so entries written by an older
// binary stay hits (of unknown age) across an upgrade. Decode checks every field (magic, version, reserved flag
// bits, varint bounds and minimality, exact length, checksum), so a
// truncated, foreign or corrupted payload is reported as a *CorruptError
// (errors.Is(err, ErrCorrupt)) and never returned as a value. A future
// version byte is reported the same way: an old binary treats a new
// envelope as a miss, not as garbage.
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
//   - A payload that does not decode is a *CorruptError. It is left in Redis;
//     the next successful Set overwrites it.
//   - A Set whose envelope exceeds MaxPayload sends nothing to Redis and
//     returns a *PayloadTooLargeError (errors.Is(err, ErrPayloadTooLarge)).
//   - An invalid key is a *flightcache.KeyError; invalid Meta is an
//     *EntryError. Neither reaches Redis.
//
// How long an operation may block is governed by ctx (and Options.Timeout,
// if set). go-redis only honours context deadlines on the socket when the
// client is built with ContextTimeoutEnabled: true; otherwise its
// ReadTimeout/WriteTimeout bound a stuck server instead. Use
// ContextTimeoutEnabled: true with this package.
package redisstore
