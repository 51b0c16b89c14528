package key

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrInvalid is matched (errors.Is) by every *Error, so callers that only
// need "was the key rejected?" do not have to know the individual reasons.
var ErrInvalid = errors.New("key: invalid cache key")

// Reason says why a key was rejected. The set is closed: callers may switch
// on it.
type Reason string

// Reasons reported in Error.Reason.
const (
	// ReasonEmpty: a dimension was set to "". Empty is rejected rather than
	// treated as "absent" because a caller passing an empty tenant ID almost
	// always has a bug, and silently dropping the dimension would widen the
	// key to every tenant.
	ReasonEmpty Reason = "empty value"
	// ReasonTooLong: a value is longer than MaxValueLen bytes.
	ReasonTooLong Reason = "value too long"
	// ReasonKeyTooLong: the encoded key is longer than the builder's MaxLen.
	ReasonKeyTooLong Reason = "key too long"
	// ReasonInvalidUTF8: a value is not valid UTF-8.
	ReasonInvalidUTF8 Reason = "invalid UTF-8"
	// ReasonControlChar: a value contains a C0 or C1 control character or
	// DEL; they corrupt logs and terminals (redis-cli) and are never part of
	// a legitimate identifier.
	ReasonControlChar Reason = "control character"
	// ReasonMissing: a required dimension (or the namespace) was not set.
	ReasonMissing Reason = "missing required dimension"
	// ReasonDuplicate: the same extra dimension was added twice.
	ReasonDuplicate Reason = "duplicate dimension"
	// ReasonTooManyDims: more than MaxDims extra dimensions.
	ReasonTooManyDims Reason = "too many extra dimensions"
	// ReasonInvalidName: an extra dimension name (in Dim or Require) is not
	// of the form [a-z][a-z0-9_-]* up to MaxNameLen bytes, or is the name
	// of a built-in dimension.
	ReasonInvalidName Reason = "invalid dimension name"
	// ReasonPrefixGap: Prefix was asked for the prefix of a Builder that
	// leaves a dimension unset before a later one it sets, so the prefix
	// would miss keys that carry that dimension (see Builder.Prefix).
	ReasonPrefixGap Reason = "gap in key prefix"
	// ReasonMalformed: Parse was given a string that is not a canonical key.
	ReasonMalformed Reason = "malformed key"
)

// Error reports why a key could not be built or parsed. It never contains
// the offending value: values are often request input, and echoing them into
// logs would invite log injection and leak identifiers.
type Error struct {
	// Dim is the dimension at fault: one of the Dim* constants, an extra
	// dimension name, or "" when the fault is in the key as a whole (length,
	// count of extra dimensions, unrecognised syntax).
	Dim    string
	Reason Reason
	// detail is human-only context such as measured lengths.
	detail string
}

// Error formats as "key: <dim>: <reason> (<detail>)", omitting absent parts.
func (e *Error) Error() string {
	msg := "key: "
	if e.Dim != "" {
		dim := e.Dim
		// Dim can be a caller-supplied invalid name; quote and cap it so it
		// can neither forge log lines nor flood them.
		if !validName(dim) {
			if len(dim) > MaxNameLen {
				dim = dim[:MaxNameLen] + "..."
			}
			dim = strconv.Quote(dim)
		}
		msg += dim + ": "
	}
	msg += string(e.Reason)
	if e.detail != "" {
		msg += " (" + e.detail + ")"
	}
	return msg
}

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }

func newError(dim string, r Reason) *Error { return &Error{Dim: dim, Reason: r} }

func lengthError(dim string, r Reason, got, limit int) *Error {
	return &Error{Dim: dim, Reason: r, detail: fmt.Sprintf("%d bytes, max %d", got, limit)}
}

func prefixGap(dim string) *Error {
	return &Error{Dim: dim, Reason: ReasonPrefixGap, detail: "unset, but a later dimension is set"}
}

func tooManyDims(got int) *Error {
	return &Error{Reason: ReasonTooManyDims, detail: fmt.Sprintf("%d, max %d", got, MaxDims)}
}
