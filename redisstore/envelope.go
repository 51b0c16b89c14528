package redisstore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"hash/crc32"
	"math"
	"sync"
	"time"

	"github.com/flightcache/flightcache/driver"
)

const (
	envelopeMagic = 0xFC
	// envelopeVersion is what Encode writes and the only version Decode
	// reads. Version 3 added the key hash. Versions 1 and 2 carry none, so
	// an entry they wrote cannot be shown to belong to the key it is found
	// under: Decode rejects them, and Store.Get reads them as a plain miss
	// (the next Set overwrites them), so an upgrade costs one load per key
	// and is not reported as a failure.
	envelopeVersion = 0x03
	// authVersion is what a Store with Options.EntryKeys writes and the
	// only version it reads: version 3's layout followed by an
	// HMAC-SHA256 of the Redis key and every byte before it (see entryKey).
	// A Store without keys refuses it as it refuses any version it cannot
	// verify, and a Store with keys refuses every other version.
	authVersion = 0x04
	// oldestVersion is the first envelope version ever written.
	oldestVersion = 0x01

	flagNotFound = 1 << 0
	// flagLoadedAt says the StaleUntil - LoadedAt field is present; without
	// it LoadedAt is unknown (the zero time).
	flagLoadedAt = 1 << 1
	// flagTags says the tags (driver.Meta.Tags) follow LoadDuration: a
	// count, then each tag's length and bytes. An entry without tags
	// leaves the flag clear and is encoded exactly as before tags
	// existed, so entries written before, and by stores that know no tags,
	// still decode (with no tags).
	flagTags   = 1 << 2
	flagsKnown = flagNotFound | flagLoadedAt | flagTags

	// maxTags and maxTagLen bound an entry's tags, as the Cache does.
	maxTags   = 16
	maxTagLen = 128

	keyHashSize  = 8
	checksumSize = 4
	// macSize is the size of an authenticated envelope's HMAC-SHA256.
	macSize = sha256.Size
	// minEnvelope is magic, version, flags, the key hash, four one-byte
	// varints and the checksum.
	minEnvelope = 3 + keyHashSize + 4 + checksumSize
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maxUnixNano is the latest instant whose Unix nanoseconds fit an int64
// (year 2262).
var maxUnixNano = time.Unix(0, math.MaxInt64)

// keyHash binds an envelope to its key: the first 64 bits of the SHA-256 of
// the Redis key (prefix included, so two stores with different prefixes never
// accept each other's entries).
//
// SHA-256 rather than FNV-1a, although this is not authentication (anyone
// who can write to Redis can write a valid envelope for any key): FNV-1a
// has structure, and keys that differ in a few bytes, like tenant ids, can
// be made to collide; a prefix of SHA-256 collides for a given pair of keys
// with probability 2^-64 whatever the keys are. It costs a few hundred
// nanoseconds per call, against a Redis round trip of tens of microseconds
// at best.
func keyHash(redisKey string) uint64 {
	sum := sha256.Sum256([]byte(redisKey))
	return binary.LittleEndian.Uint64(sum[:keyHashSize])
}

// keyHandle names a key in an error without revealing it: the first 8 hex
// digits of the SHA-256 of the Redis key, prefix included. An operator who
// suspects a key can check it with
//
//	printf %s 'flightcache:user:42' | sha256sum | cut -c1-8
func keyHandle(redisKey string) string {
	sum := sha256.Sum256([]byte(redisKey))
	return hex.EncodeToString(sum[:4])
}

// Encode returns e in the envelope format described in the package
// documentation, bound to redisKey: the Redis key the envelope will be
// stored under, prefix included. It reports an *EntryError for Meta that the format cannot
// represent: StaleUntil not after 1970 or after 2262, FreshUntil before 1970
// or after StaleUntil, a non-zero LoadedAt before 1970 or after StaleUntil,
// negative LoadDuration. A zero LoadedAt (unknown) is stored as absent. A
// tombstone's Value is not stored: it decodes as nil.
//
// Encode writes version 3, which carries no MAC: a Store with
// Options.EntryKeys writes (and reads) authenticated envelopes of its own,
// through Set, SetMany and Envelope.
func Encode(redisKey string, e driver.Entry) ([]byte, error) {
	return appendEnvelope(nil, redisKey, e, nil)
}

// appendEnvelope appends e's envelope for redisKey to dst: version 3
// without mac, version 4 authenticated with mac otherwise.
func appendEnvelope(dst []byte, redisKey string, e driver.Entry, mac *entryKey) ([]byte, error) {
	if !e.StaleUntil.After(time.Unix(0, 0)) || e.StaleUntil.After(maxUnixNano) {
		return nil, &EntryError{Reason: "StaleUntil must be between 1970 and 2262"}
	}
	if e.FreshUntil.After(e.StaleUntil) {
		return nil, &EntryError{Reason: "FreshUntil is after StaleUntil"}
	}
	if e.FreshUntil.Before(time.Unix(0, 0)) {
		return nil, &EntryError{Reason: "FreshUntil is before 1970"}
	}
	if e.LoadDuration < 0 {
		return nil, &EntryError{Reason: "LoadDuration is negative"}
	}
	if len(e.Tags) > maxTags {
		return nil, &EntryError{Reason: "more than 16 tags"}
	}
	tagBytes := 0
	for _, t := range e.Tags {
		if t == "" || len(t) > maxTagLen {
			return nil, &EntryError{Reason: "a tag is empty or longer than 128 bytes"}
		}
		tagBytes += uvarintLen(uint64(len(t))) + len(t)
	}
	stale := e.StaleUntil.UnixNano()
	freshBefore := stale - e.FreshUntil.UnixNano()

	var flags byte
	var loadedBefore int64
	if !e.LoadedAt.IsZero() {
		if e.LoadedAt.Before(time.Unix(0, 0)) {
			return nil, &EntryError{Reason: "LoadedAt is before 1970"}
		}
		if e.LoadedAt.After(e.StaleUntil) {
			return nil, &EntryError{Reason: "LoadedAt is after StaleUntil"}
		}
		flags |= flagLoadedAt
		loadedBefore = stale - e.LoadedAt.UnixNano()
	}
	if len(e.Tags) > 0 {
		flags |= flagTags
		tagBytes += uvarintLen(uint64(len(e.Tags)))
	}
	value := e.Value
	if e.NotFound {
		flags |= flagNotFound
		value = nil
	}

	start := len(dst)
	size := minEnvelope - 4 + // fixed bytes, without the four varints
		uvarintLen(uint64(stale)) + uvarintLen(uint64(freshBefore)) +
		uvarintLen(uint64(e.LoadDuration)) + tagBytes + uvarintLen(uint64(len(value))) + len(value)
	if flags&flagLoadedAt != 0 {
		size += uvarintLen(uint64(loadedBefore))
	}
	version := byte(envelopeVersion)
	if mac != nil {
		version = authVersion
		size += macSize
	}
	if cap(dst)-start < size {
		grown := make([]byte, start, start+size)
		copy(grown, dst)
		dst = grown
	}
	dst = append(dst, envelopeMagic, version, flags)
	dst = binary.LittleEndian.AppendUint64(dst, keyHash(redisKey))
	dst = binary.AppendUvarint(dst, uint64(stale))
	dst = binary.AppendUvarint(dst, uint64(freshBefore))
	if flags&flagLoadedAt != 0 {
		dst = binary.AppendUvarint(dst, uint64(loadedBefore))
	}
	dst = binary.AppendUvarint(dst, uint64(e.LoadDuration))
	if flags&flagTags != 0 {
		dst = binary.AppendUvarint(dst, uint64(len(e.Tags)))
		for _, t := range e.Tags {
			dst = binary.AppendUvarint(dst, uint64(len(t)))
			dst = append(dst, t...)
		}
	}
	dst = binary.AppendUvarint(dst, uint64(len(value)))
	dst = append(dst, value...)
	sum := crc32.Checksum(dst[start:], castagnoli)
	dst = binary.LittleEndian.AppendUint32(dst, sum)
	if mac != nil {
		dst = mac.sum(dst, redisKey, dst[start:])
	}
	return dst, nil
}

// Decode parses an envelope produced by Encode for redisKey, the Redis key
// the payload was read from (prefix included). Any deviation from the format
// is a *CorruptError; so is a well-formed envelope encoded for another key,
// which also matches ErrKeyMismatch, and an authenticated envelope (version
// 4, written by a Store with Options.EntryKeys), which Decode has no key to
// verify. Decode never panics and never returns a partly decoded Entry. The
// returned Value is a copy: it does not alias payload.
func Decode(redisKey string, payload []byte) (driver.Entry, error) {
	return decodeEnvelope(redisKey, payload, nil)
}

// decodeEnvelope is Decode for a reader with the entry keys keys: with
// none, it accepts version 3 only; with some, version 4 only, and only
// when its MAC verifies with one of them.
func decodeEnvelope(redisKey string, payload []byte, keys []*entryKey) (driver.Entry, error) {
	corrupt := func(reason string) (driver.Entry, error) {
		return driver.Entry{}, &CorruptError{KeyHandle: keyHandle(redisKey), Reason: reason}
	}
	unauthenticated := func(reason string) (driver.Entry, error) {
		return driver.Entry{}, &CorruptError{KeyHandle: keyHandle(redisKey), Reason: reason, Err: ErrUnauthenticated}
	}
	if len(payload) < minEnvelope {
		return corrupt("shorter than the smallest envelope")
	}
	if payload[0] != envelopeMagic {
		return corrupt("bad magic byte")
	}
	authenticated := len(keys) > 0
	switch v := payload[1]; {
	case authenticated && v >= oldestVersion && v <= envelopeVersion:
		// Anyone who can write to Redis can write these.
		return unauthenticated("envelope without an entry MAC")
	case !authenticated && v == authVersion:
		return corrupt("authenticated envelope, and no entry key to verify it")
	case v >= oldestVersion && v < envelopeVersion:
		return corrupt("envelope version without a key hash")
	case v != envelopeVersion && v != authVersion:
		return corrupt("unknown envelope version")
	}
	// Invariant from here: authenticated if and only if payload is a
	// version 4 envelope, whose MAC is cut off into mac.
	var mac []byte
	if authenticated {
		if len(payload) < minEnvelope+macSize {
			return corrupt("shorter than the smallest authenticated envelope")
		}
		payload, mac = payload[:len(payload)-macSize], payload[len(payload)-macSize:]
	}
	body, tail := payload[:len(payload)-checksumSize], payload[len(payload)-checksumSize:]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(tail) {
		return corrupt("checksum mismatch")
	}
	flags := body[2]
	if flags&^flagsKnown != 0 {
		return corrupt("unknown flag bits")
	}
	// Checked after the checksum, so that a mismatch means a well-formed
	// entry of another key, not a damaged one.
	if binary.LittleEndian.Uint64(body[3:]) != keyHash(redisKey) {
		return driver.Entry{}, &CorruptError{KeyHandle: keyHandle(redisKey), Reason: "entry belongs to another key", Err: ErrKeyMismatch}
	}
	// Verified before the times and the value are parsed: nothing of an
	// entry that fails is used.
	if authenticated && !verifyMAC(keys, redisKey, payload, mac) {
		return unauthenticated("entry MAC does not verify with any entry key")
	}

	rest := body[3+keyHashSize:]
	// stale, freshBefore, loadedBefore, loadDuration, valueLen; loadedBefore
	// is on the wire only with flagLoadedAt, and the tags come before
	// valueLen with flagTags.
	var (
		fields [5]uint64
		tags   []string
	)
	for i := range fields {
		if i == 2 && flags&flagLoadedAt == 0 {
			continue
		}
		if i == 4 && flags&flagTags != 0 {
			var bad string
			if tags, rest, bad = decodeTags(rest); bad != "" {
				return corrupt(bad)
			}
		}
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return corrupt("truncated or overflowing varint")
		}
		if n != uvarintLen(v) {
			return corrupt("non-minimal varint")
		}
		fields[i] = v
		rest = rest[n:]
	}
	stale, freshBefore, loadedBefore, load, valueLen := fields[0], fields[1], fields[2], fields[3], fields[4]
	switch {
	case stale == 0 || stale > math.MaxInt64:
		return corrupt("StaleUntil out of range")
	case freshBefore > stale:
		return corrupt("FreshUntil before 1970")
	case loadedBefore > stale:
		return corrupt("LoadedAt before 1970")
	case load > math.MaxInt64:
		return corrupt("LoadDuration out of range")
	case valueLen != uint64(len(rest)):
		return corrupt("value length does not match payload length")
	}

	e := driver.Entry{Meta: driver.Meta{
		StaleUntil:   time.Unix(0, int64(stale)),
		FreshUntil:   time.Unix(0, int64(stale-freshBefore)),
		LoadDuration: time.Duration(load),
		NotFound:     flags&flagNotFound != 0,
		Tags:         tags,
	}}
	if flags&flagLoadedAt != 0 {
		e.LoadedAt = time.Unix(0, int64(stale-loadedBefore))
	}
	if e.NotFound {
		if len(rest) != 0 {
			return corrupt("tombstone carries a value")
		}
		return e, nil
	}
	e.Value = make([]byte, len(rest))
	copy(e.Value, rest)
	return e, nil
}

// decodeTags reads the tags of an envelope with flagTags from the start of
// rest: a count of 1 to 16, then each tag's length (1 to 128) and bytes.
// It returns the rest after them, or why they are malformed.
func decodeTags(rest []byte) (tags []string, after []byte, bad string) {
	count, n := binary.Uvarint(rest)
	if n <= 0 || n != uvarintLen(count) {
		return nil, nil, "malformed tag count"
	}
	if count == 0 || count > maxTags {
		return nil, nil, "tag count out of range"
	}
	rest = rest[n:]
	tags = make([]string, 0, count)
	for range count {
		l, n := binary.Uvarint(rest)
		switch {
		case n <= 0 || n != uvarintLen(l):
			return nil, nil, "malformed tag length"
		case l == 0 || l > maxTagLen:
			return nil, nil, "tag length out of range"
		case uint64(len(rest)-n) < l:
			return nil, nil, "truncated tag"
		}
		tags = append(tags, string(rest[n:n+int(l)]))
		rest = rest[n+int(l):]
	}
	return tags, rest, ""
}

// uvarintLen is the length of the minimal LEB128 encoding of v.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// entryKey is one entry-authentication key (Options.EntryKeys): it makes
// the MAC of an authenticated envelope, HMAC-SHA256 under the key of
//
//	uvarint(len(redisKey)) || redisKey || envelope up to its MAC
//
// (the Redis key, prefix included, with its length first so that no
// key-and-envelope pair reads as another). The key is copied at New and
// never leaves the value; it appears in no error and no String.
type entryKey struct {
	// pool holds hmac.New(sha256.New, key) hashes, in their keyed initial
	// state when put back (sum resets them first): building one hashes the
	// key twice and allocates, so reads and writes share them.
	pool sync.Pool
}

func newEntryKey(key []byte) *entryKey {
	key = append([]byte(nil), key...) // the caller's slice may change
	k := &entryKey{}
	k.pool.New = func() any { return hmac.New(sha256.New, key) }
	return k
}

// sum appends to dst the MAC of env, an envelope without its MAC, stored
// under redisKey.
func (k *entryKey) sum(dst []byte, redisKey string, env []byte) []byte {
	h := k.pool.Get().(hash.Hash)
	h.Reset()
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(redisKey)))])
	h.Write([]byte(redisKey))
	h.Write(env)
	dst = h.Sum(dst)
	k.pool.Put(h)
	return dst
}

// verifyMAC reports whether mac is env's MAC under redisKey with one of
// keys, each compared in constant time.
func verifyMAC(keys []*entryKey, redisKey string, env, mac []byte) bool {
	var buf [macSize]byte
	for _, k := range keys {
		if hmac.Equal(k.sum(buf[:0], redisKey, env), mac) {
			return true
		}
	}
	return false
}
