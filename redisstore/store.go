package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/redis/go-redis/v9"
)

// Defaults applied by New to zero Options fields.
const (
	// DefaultPrefix namespaces flightcache's keys in a shared Redis.
	DefaultPrefix = "flightcache:"
	// DefaultMaxPayload is 1 MiB: big enough for ordinary cached objects,
	// small enough that one value cannot stall Redis' single thread or the
	// network for everyone else.
	DefaultMaxPayload = 1 << 20
	// MaxKeyLen bounds prefix+key in bytes. Redis accepts far longer keys,
	// but a key this long is almost always a bug (an unbounded input used
	// as a key) and every byte of it is paid on every command.
	MaxKeyLen = 1024
	// maxRedisString is Redis' own limit on a string value (proto-max-bulk-len).
	maxRedisString = 512 << 20
	// MinEntryKeyLen is the shortest entry key (Options.EntryKeys) New
	// accepts, in bytes: 128 bits. Use 32 random bytes (openssl rand -hex 32).
	MinEntryKeyLen = 16
)

// Options configures a Store. The zero value is valid.
type Options struct {
	// Prefix is prepended to every key, so several caches (or several
	// versions of one value type) can share a Redis without colliding.
	// Empty means DefaultPrefix; there is no way to use no prefix at all,
	// since an unprefixed cache could overwrite other data in the database.
	Prefix string
	// MaxPayload bounds the size in bytes of a stored envelope (value plus
	// about 40 bytes of metadata, 32 more with EntryKeys). Zero means
	// DefaultMaxPayload; at most 512 MiB, Redis' own limit. Reads are
	// bounded by it too: Get deletes a larger value (see Store.Get), so
	// every Store sharing a prefix must use the same MaxPayload.
	MaxPayload int
	// Timeout, when positive, bounds each operation on top of the caller's
	// ctx. Zero leaves the caller's ctx in charge. Needs the client's
	// ContextTimeoutEnabled to bound a stuck socket (see the package doc).
	Timeout time.Duration
	// HashTag, when set, stores key under <prefix>{<h>}<key>, where <h> is
	// 16 hex digits of the SHA-256 of key. The braces are a Redis Cluster
	// hash tag: every Redis key derived from that name by appending to it
	// (package redislease's lease, token and markers) lands in the same
	// slot as the value, whatever the key itself contains ('{' and '}'
	// included), so a script can touch them together. It costs 18 bytes per
	// key, counted against MaxKeyLen, and requires a Prefix without '{' or
	// '}'. The layout differs from the untagged one, so switching it on
	// starts from an empty shared tier. Default off.
	HashTag bool
	// EntryKeys, when not empty, authenticates entries: every envelope the
	// Store writes (Set, SetMany, Envelope) carries an HMAC-SHA256 of the
	// Redis key and the envelope made with EntryKeys[0], and every read
	// (Get, GetMany, OpenEnvelope) accepts only an envelope whose MAC
	// verifies with one of the keys. Anything else (no MAC, a wrong one, a
	// truncated envelope) is a *CorruptError matching ErrUnauthenticated
	// or ErrCorrupt, which the Cache reads as a miss: someone who can write
	// to Redis but does not hold a key cannot make the Cache serve a value.
	// Each key must be at least MinEntryKeyLen bytes; they should be random
	// (32 bytes) and secret, and the same on every instance sharing the
	// prefix. To rotate: put the new key first, keeping the old one after
	// it, on every instance; drop the old one once every entry written
	// with it has expired (the longest StaleUntil of the Caches, TTL plus
	// StaleFor). Turning keys on (or off) makes every entry already stored a
	// miss: it costs one load per key. New copies the keys. Default none:
	// entries carry no MAC, as before.
	EntryKeys [][]byte
}

// Store is a driver.SharedStore on Redis. It is safe for concurrent
// use. It does not own the client: closing the client is the caller's job.
type Store struct {
	client     redis.UniversalClient
	prefix     string
	maxPayload int
	timeout    time.Duration
	hashTag    bool
	// keys are Options.EntryKeys, copied; keys[0] signs. Empty: entries
	// are neither signed nor verified.
	keys []*entryKey
}

// hashTagLen is the length of "{<16 hex digits>}".
const hashTagLen = 18

var _ driver.SharedStore = (*Store)(nil)

// New returns a Store that keeps entries in Redis through client. Options
// out of range are reported as a *flightcache.ConfigError. A client with
// go-redis client-side caching on is refused with an error matching
// ErrClientSideCaching; see CheckClient.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if client == nil {
		return nil, &flightcache.ConfigError{Field: "client", Reason: "is nil"}
	}
	if err := CheckClient(client); err != nil {
		return nil, err
	}
	s := &Store{client: client, prefix: opts.Prefix, maxPayload: opts.MaxPayload, timeout: opts.Timeout, hashTag: opts.HashTag}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.maxPayload == 0 {
		s.maxPayload = DefaultMaxPayload
	}
	switch {
	case s.hashTag && strings.ContainsAny(s.prefix, "{}"):
		// A brace in the prefix could end or start the hash tag early
		// ("x{}" makes Redis hash the whole name), splitting a key's
		// derived names over several slots.
		return nil, &flightcache.ConfigError{Field: "Prefix", Reason: "must not contain '{' or '}' with HashTag"}
	case len(s.prefix)+s.tagLen() >= MaxKeyLen:
		return nil, &flightcache.ConfigError{Field: "Prefix", Reason: fmt.Sprintf("must be shorter than %d bytes", MaxKeyLen)}
	case s.maxPayload < 0 || s.maxPayload > maxRedisString:
		return nil, &flightcache.ConfigError{Field: "MaxPayload", Reason: "must be between 0 and 512 MiB"}
	case s.maxPayload < minEnvelope:
		return nil, &flightcache.ConfigError{Field: "MaxPayload", Reason: fmt.Sprintf("must be at least %d bytes, the smallest envelope", minEnvelope)}
	case len(opts.EntryKeys) > 0 && s.maxPayload < minEnvelope+macSize:
		return nil, &flightcache.ConfigError{Field: "MaxPayload", Reason: fmt.Sprintf("must be at least %d bytes with EntryKeys, the smallest authenticated envelope", minEnvelope+macSize)}
	case s.timeout < 0:
		return nil, &flightcache.ConfigError{Field: "Timeout", Reason: "must not be negative"}
	}
	for i, k := range opts.EntryKeys {
		// Neither the key nor its length is told: only which one.
		if len(k) < MinEntryKeyLen {
			return nil, &flightcache.ConfigError{Field: "EntryKeys", Reason: fmt.Sprintf("key %d (counting from 0) is shorter than %d bytes", i, MinEntryKeyLen)}
		}
		s.keys = append(s.keys, newEntryKey(k))
	}
	return s, nil
}

// Prefix returns the prefix in use, so operators can find the store's keys.
func (s *Store) Prefix() string { return s.prefix }

var _ driver.KeyLimiter = (*Store)(nil)

// MaxKeyLen is the longest key, in bytes, the Store accepts: MaxKeyLen less
// the prefix. It makes the Store a driver.KeyLimiter, so a Cache refuses
// at New a MaxKeyLen this tier could not store.
func (s *Store) MaxKeyLen() int { return MaxKeyLen - len(s.prefix) - s.tagLen() }

// HashTag reports whether keys carry a Redis Cluster hash tag; see
// Options.HashTag.
func (s *Store) HashTag() bool { return s.hashTag }

// Authenticated reports whether entries carry a MAC; see Options.EntryKeys.
func (s *Store) Authenticated() bool { return len(s.keys) > 0 }

// encode is Encode for this Store: authenticated with its first entry key,
// if it has any.
func (s *Store) encode(rk string, e driver.Entry) ([]byte, error) {
	var mac *entryKey
	if len(s.keys) > 0 {
		mac = s.keys[0]
	}
	return appendEnvelope(nil, rk, e, mac)
}

func (s *Store) tagLen() int {
	if s.hashTag {
		return hashTagLen
	}
	return 0
}

// RedisKey returns the Redis key the Store keeps key under: the prefix, the
// hash tag (with Options.HashTag) and key. An invalid key is a
// *flightcache.KeyError.
func (s *Store) RedisKey(key string) (string, error) {
	if key == "" {
		return "", &flightcache.KeyError{Reason: "empty"}
	}
	if len(s.prefix)+s.tagLen()+len(key) > MaxKeyLen {
		return "", &flightcache.KeyError{Reason: fmt.Sprintf("longer than %d bytes with the prefix", MaxKeyLen)}
	}
	if !s.hashTag {
		return s.prefix + key, nil
	}
	sum := sha256.Sum256([]byte(key))
	var b strings.Builder
	b.Grow(len(s.prefix) + hashTagLen + len(key))
	b.WriteString(s.prefix)
	b.WriteByte('{')
	b.WriteString(hex.EncodeToString(sum[:8]))
	b.WriteByte('}')
	b.WriteString(key)
	return b.String(), nil
}

func (s *Store) redisKey(key string) (string, error) { return s.RedisKey(key) }

// Envelope returns what Set would write for key: the Redis key, the
// envelope bound to it and the PX (until e.StaleUntil on this host's wall
// clock, rounded down; below a millisecond means "delete instead"). It
// lets a writer that must make the write conditional (package redislease's
// fenced write) store exactly what Get reads. Errors are Set's: an invalid
// key, invalid Meta, an envelope over MaxPayload.
func (s *Store) Envelope(key string, e driver.Entry) (redisKey string, payload []byte, px time.Duration, err error) {
	rk, err := s.redisKey(key)
	if err != nil {
		return "", nil, 0, err
	}
	payload, err = s.encode(rk, e)
	if err != nil {
		return "", nil, 0, err
	}
	if len(payload) > s.maxPayload {
		return "", nil, 0, &PayloadTooLargeError{KeyHandle: keyHandle(rk), Size: len(payload), Max: s.maxPayload}
	}
	// Rounded down: Redis must never serve an entry past its StaleUntil.
	return rk, payload, time.Until(e.StaleUntil).Truncate(time.Millisecond), nil
}

// OpenEnvelope is Get's answer for payload, an envelope read under key's
// Redis key by another client (package redislease's fenced write reads
// the entry that refused it in the same script): the same checks (the
// key hash, the MAC with Options.EntryKeys, StaleUntil against this host's
// wall clock), the same errors.
func (s *Store) OpenEnvelope(key string, payload []byte) (driver.Entry, bool, error) {
	rk, err := s.redisKey(key)
	if err != nil {
		return driver.Entry{}, false, err
	}
	return s.decode(rk, payload, time.Now())
}

// withTimeout applies Options.Timeout; the returned cancel is never nil.
func (s *Store) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout > 0 {
		return context.WithTimeout(ctx, s.timeout)
	}
	return ctx, func() {}
}

// Get returns the entry stored under key with a single GETRANGE of at most
// MaxPayload+1 bytes, so that a value no Store could have written (larger
// than MaxPayload, planted by someone or something else) costs no more to
// read than the largest entry. A missing key (or an empty string, which
// GETRANGE cannot tell from one),
// an entry already past its StaleUntil, or (without Options.EntryKeys) an
// entry written by a version of this package whose envelopes carry no key
// hash (so cannot be verified), is (Entry{}, false, nil). A payload that is
// not a valid envelope for key, including a valid entry of another key and,
// with Options.EntryKeys, any entry that fails authentication, is a
// *CorruptError; a Redis failure is returned wrapped.
//
// A value larger than MaxPayload (a *CorruptError matching
// ErrPayloadTooLarge) or of another Redis type than a string (a
// *CorruptError matching ErrWrongType) is deleted before Get returns, so
// the next read is a plain miss and the next load writes the key again:
// every instance sharing a prefix must therefore use the same MaxPayload.
// Both are entry-level errors (driver.ErrEntryRejected): a miss for the
// Cache, never a failure of the tier for its breaker.
func (s *Store) Get(ctx context.Context, key string) (driver.Entry, bool, error) {
	rk, err := s.redisKey(key)
	if err != nil {
		return driver.Entry{}, false, err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()

	// A missing key reads as "": no envelope is empty, so "" is a miss.
	payload, err := s.client.GetRange(ctx, rk, 0, int64(s.maxPayload)).Bytes()
	return s.read(ctx, rk, payload, err, time.Now())
}

// read turns the answer to GETRANGE rk 0 MaxPayload (payload, or the
// command's error) into Get's answer at now, repairing a key that holds
// something no Store writes: Get and GetMany both read through it, so they
// bound, repair and refuse exactly the same things.
func (s *Store) read(ctx context.Context, rk string, payload []byte, err error, now time.Time) (driver.Entry, bool, error) {
	switch {
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		return driver.Entry{}, false, s.repair(ctx, rk, "not a string", ErrWrongType)
	case err != nil:
		return driver.Entry{}, false, fmt.Errorf("redisstore: GETRANGE: %w", err)
	case len(payload) == 0:
		return driver.Entry{}, false, nil
	case len(payload) > s.maxPayload:
		return driver.Entry{}, false, s.repair(ctx, rk, fmt.Sprintf("larger than MaxPayload (%d bytes)", s.maxPayload), ErrPayloadTooLarge)
	}
	return s.decode(rk, payload, now)
}

// repair deletes the Redis key rk, which holds something no Store writes
// (too large, another type), and returns the *CorruptError that reports
// it; a failed delete is said in Reason, and the key is tried again on
// the next read.
func (s *Store) repair(ctx context.Context, rk, reason string, kind error) error {
	if err := s.client.Del(ctx, rk).Err(); err != nil {
		reason += "; not deleted: " + err.Error()
	} else {
		reason += "; deleted"
	}
	return &CorruptError{KeyHandle: keyHandle(rk), Reason: reason, Err: kind}
}

// MaxPayload returns the largest envelope, in bytes, the Store writes and
// reads (Options.MaxPayload after defaults).
func (s *Store) MaxPayload() int { return s.maxPayload }

// decode turns the payload read under the Redis key rk into Get's answer at
// now: every read (Get, GetMany) goes through it, so they accept and refuse
// exactly the same payloads.
func (s *Store) decode(rk string, payload []byte, now time.Time) (driver.Entry, bool, error) {
	if len(s.keys) == 0 && isUnverifiable(payload) {
		return driver.Entry{}, false, nil
	}
	e, err := decodeEnvelope(rk, payload, s.keys)
	if err != nil {
		return driver.Entry{}, false, err
	}
	if !e.StaleUntil.After(now) {
		return driver.Entry{}, false, nil
	}
	return e, true, nil
}

// Set stores e under key until e.StaleUntil with a single SET … PX. The
// times in e.Meta are wall-clock instants (see "Times are wall-clock" in the
// package documentation); the PX is measured on this host's wall clock. When
// StaleUntil is less than a millisecond away the key is deleted instead:
// Set means "this is the current value", and it is already gone. An
// envelope larger than MaxPayload, an invalid key or invalid Meta sends
// nothing to Redis and returns a typed error.
func (s *Store) Set(ctx context.Context, key string, e driver.Entry) error {
	rk, payload, ttl, err := s.Envelope(key, e)
	if err != nil {
		return err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()

	if ttl < time.Millisecond {
		if err := s.client.Del(ctx, rk).Err(); err != nil {
			return fmt.Errorf("redisstore: DEL expired entry: %w", err)
		}
		return nil
	}
	if err := s.client.Set(ctx, rk, payload, ttl).Err(); err != nil {
		return fmt.Errorf("redisstore: SET: %w", err)
	}
	return nil
}

// Delete removes key with a single DEL; removing a missing key is not an
// error.
func (s *Store) Delete(ctx context.Context, key string) error {
	rk, err := s.redisKey(key)
	if err != nil {
		return err
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	if err := s.client.Del(ctx, rk).Err(); err != nil {
		return fmt.Errorf("redisstore: DEL: %w", err)
	}
	return nil
}

// isUnverifiable reports an envelope of a version before the key hash. Such an
// entry may be served under a key it does not belong to, so it must not be
// used; but it is not damage either (an upgrade leaves every key like this),
// so a Store without entry keys reads it as a miss rather than as a
// failure. A Store with entry keys reports it as unauthenticated, as it
// does every entry without a MAC.
func isUnverifiable(payload []byte) bool {
	return len(payload) >= 2 && payload[0] == envelopeMagic &&
		payload[1] >= oldestVersion && payload[1] < envelopeVersion
}
