package redisstore

import (
	"errors"
	"fmt"

	"github.com/flightcache/flightcache/driver"
)

// ErrCorrupt is matched (errors.Is) by every *CorruptError, as is
// driver.ErrEntryRejected.
var ErrCorrupt = errors.New("redisstore: corrupt payload")

// ErrKeyMismatch is matched (errors.Is) by the *CorruptError of a
// well-formed entry found under a key it was not written for: copied or
// renamed in Redis, by mistake or by someone with write access to it. It is
// never returned as a value.
var ErrKeyMismatch = errors.New("redisstore: entry belongs to another key")

// ErrWrongType is matched (errors.Is) by the *CorruptError of a Redis key
// that holds another type than a string (a list, a hash, …): written by
// something else than a Store. Get deletes such a key. It is never
// returned as a value.
var ErrWrongType = errors.New("redisstore: key holds another type than a string")

// ErrUnauthenticated is matched (errors.Is) by the *CorruptError of an
// entry that a Store with Options.EntryKeys cannot authenticate: one
// without a MAC (written by a Store without keys, by an older version, or
// by anyone else who can write to Redis) or whose MAC verifies with none
// of the keys (forged, damaged, or written with a key since removed). It
// is never returned as a value.
var ErrUnauthenticated = errors.New("redisstore: entry not authenticated")

// ErrPayloadTooLarge is matched (errors.Is) by every *PayloadTooLargeError,
// as is driver.ErrEntryRejected.
var ErrPayloadTooLarge = errors.New("redisstore: payload too large")

// ErrInvalidEntry is matched (errors.Is) by every *EntryError, as is
// driver.ErrEntryRejected.
var ErrInvalidEntry = errors.New("redisstore: invalid entry")

// Errors never contain keys: keys can carry tenant ids and personal data, and
// the Cache logs these errors and puts them in events. Where an error needs
// to name its key it carries a KeyHandle instead: the first 8 hex digits of
// the SHA-256 of the Redis key (prefix included), which an operator can
// compute for a key they suspect:
//
//	printf %s 'flightcache:user:42' | sha256sum | cut -c1-8

// CorruptError reports a stored payload that is not a valid envelope for its
// key: truncated, written by something else, from another format version, a
// well-formed entry of another key (then it also matches ErrKeyMismatch),
// with Options.EntryKeys an entry whose MAC is missing or does not verify
// (then it also matches ErrUnauthenticated), a value larger than
// MaxPayload (then it also matches ErrPayloadTooLarge) or a key of another
// Redis type (then it also matches ErrWrongType).
type CorruptError struct {
	// KeyHandle names the key the payload was read under; see above.
	KeyHandle string
	// Reason names the first check that failed.
	Reason string
	// Err is ErrKeyMismatch for an entry of another key,
	// ErrUnauthenticated for an entry that fails authentication,
	// ErrPayloadTooLarge for a value larger than MaxPayload, ErrWrongType
	// for a key of another Redis type, nil otherwise.
	Err error
}

// Error names the key by its handle and the check that failed.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("redisstore: corrupt payload under key #%s: %s", e.KeyHandle, e.Reason)
}

// Unwrap returns ErrCorrupt, and Err when it is set.
func (e *CorruptError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrCorrupt, e.Err}
	}
	return []error{ErrCorrupt}
}

// Is reports whether target is driver.ErrEntryRejected: a corrupt or
// foreign entry is that entry's problem, not a failure of Redis.
func (e *CorruptError) Is(target error) bool { return target == driver.ErrEntryRejected }

// PayloadTooLargeError reports a Set refused because its envelope is larger
// than Options.MaxPayload. Nothing was sent to Redis.
type PayloadTooLargeError struct {
	KeyHandle string // names the key; see above
	Size      int    // envelope size in bytes
	Max       int    // Options.MaxPayload
}

// Error names the key by its handle, the size and the limit.
func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("redisstore: payload for key #%s is %d bytes, more than the maximum %d", e.KeyHandle, e.Size, e.Max)
}

// Unwrap returns ErrPayloadTooLarge.
func (e *PayloadTooLargeError) Unwrap() error { return ErrPayloadTooLarge }

// Is reports whether target is driver.ErrEntryRejected: a value too
// large is that entry's problem, not a failure of Redis.
func (e *PayloadTooLargeError) Is(target error) bool { return target == driver.ErrEntryRejected }

// EntryError reports an Entry whose Meta cannot be encoded (for example a
// zero StaleUntil, or FreshUntil after StaleUntil). Nothing was sent to Redis.
type EntryError struct {
	Reason string
}

// Error says why the entry cannot be encoded.
func (e *EntryError) Error() string { return "redisstore: invalid entry: " + e.Reason }

// Unwrap returns ErrInvalidEntry.
func (e *EntryError) Unwrap() error { return ErrInvalidEntry }

// Is reports whether target is driver.ErrEntryRejected: an entry that
// cannot be encoded is that entry's problem, not a failure of Redis.
func (e *EntryError) Is(target error) bool { return target == driver.ErrEntryRejected }
