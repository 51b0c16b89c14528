package redisstore

import (
	"errors"
	"fmt"
)

// ErrCorrupt is matched (errors.Is) by every *CorruptError.
var ErrCorrupt = errors.New("redisstore: corrupt payload")

// ErrPayloadTooLarge is matched (errors.Is) by every *PayloadTooLargeError.
var ErrPayloadTooLarge = errors.New("redisstore: payload too large")

// ErrInvalidEntry is matched (errors.Is) by every *EntryError.
var ErrInvalidEntry = errors.New("redisstore: invalid entry")

// CorruptError reports a stored payload that is not a valid envelope:
// truncated, written by something else, or from a newer format version.
type CorruptError struct {
	// Key is the cache key (without prefix) the payload was read from; empty
	// when the error comes from Decode directly.
	Key string
	// Reason names the first check that failed.
	Reason string
}

func (e *CorruptError) Error() string {
	if e.Key == "" {
		return "redisstore: corrupt payload: " + e.Reason
	}
	return fmt.Sprintf("redisstore: corrupt payload under key %q: %s", e.Key, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// PayloadTooLargeError reports a Set refused because its envelope is larger
// than Options.MaxPayload. Nothing was sent to Redis.
type PayloadTooLargeError struct {
	Key  string // cache key, without prefix
	Size int    // envelope size in bytes
	Max  int    // Options.MaxPayload
}

func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("redisstore: payload for key %q is %d bytes, more than the maximum %d", e.Key, e.Size, e.Max)
}

// Unwrap returns ErrPayloadTooLarge.
func (e *PayloadTooLargeError) Unwrap() error { return ErrPayloadTooLarge }

// EntryError reports an Entry whose Meta cannot be encoded (for example a
// zero StaleUntil, or FreshUntil after StaleUntil). Nothing was sent to Redis.
type EntryError struct {
	Reason string
}

func (e *EntryError) Error() string { return "redisstore: invalid entry: " + e.Reason }

// Unwrap returns ErrInvalidEntry.
func (e *EntryError) Unwrap() error { return ErrInvalidEntry }
