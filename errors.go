package flightcache

import (
	"errors"
	"fmt"

	"github.com/flightcache/flightcache/singleflight"
)

// ErrNotFound is returned by a loader (possibly wrapped) to say that the value
// does not exist at the origin. The Cache stores a tombstone for NegativeTTL
// and answers later Gets with ErrNotFound without loading.
var ErrNotFound = errors.New("flightcache: not found")

// ErrClosed is returned by every call on a Cache after Close, and to callers
// whose load Close cancelled. It wraps singleflight.ErrClosed, so
// errors.Is(err, singleflight.ErrClosed) holds too.
var ErrClosed = fmt.Errorf("flightcache: cache closed: %w", singleflight.ErrClosed)

// fromEngine is the Cache's error for err, an error out of its engine: the
// engine's ErrClosed (which does not match ErrClosed, the wrapper) becomes
// ErrClosed; anything else is kept. Every error from c.group goes through
// it before the Cache tests or returns it.
func fromEngine(err error) error {
	if errors.Is(err, singleflight.ErrClosed) {
		return ErrClosed
	}
	return err
}

// The errors of invalid input, each matched with errors.Is.
var (
	// ErrInvalidKey is matched by every *KeyError.
	ErrInvalidKey = errors.New("flightcache: invalid key")
	// ErrInvalidConfig is matched by every *ConfigError.
	ErrInvalidConfig = errors.New("flightcache: invalid config")
	// ErrInvalidTag is matched by the error of a call given a tag out of
	// bounds: empty, longer than 128 bytes, not valid UTF-8, or more than
	// 16 distinct tags on one value (see SetTags).
	ErrInvalidTag = errors.New("flightcache: invalid tag")
)

// KeyError reports a key the Cache refused.
type KeyError struct {
	Reason string
}

// Error says why the key was refused, without the key.
func (e *KeyError) Error() string { return "flightcache: invalid key: " + e.Reason }

// Unwrap returns ErrInvalidKey.
func (e *KeyError) Unwrap() error { return ErrInvalidKey }

// ConfigError reports an Options field out of range.
type ConfigError struct {
	Field  string // the Options field, e.g. "TTL"
	Reason string
}

// Error names the field and why its value was refused.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("flightcache: invalid config: %s: %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// ErrNotPublished is matched by the error of a write (Set, Delete,
// InvalidatePrefix, Clear) whose Invalidation could not be published: the
// write itself took effect, but other instances may serve their older
// copies until they expire.
var ErrNotPublished = errors.New("flightcache: invalidation not published to the other instances")
