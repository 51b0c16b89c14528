package singleflight

import "github.com/flightcache/flightcache/internal/flightgroup"

// The errors are the engine's own values, so errors.Is matches them whether
// they came through this package or through the Cache.
var (
	// ErrClosed is returned by calls made after Close, and is the cause with
	// which Close cancels running loaders. Waiters of an execution that Close
	// interrupted receive it too.
	ErrClosed = flightgroup.ErrClosed
	// ErrTooManyInFlight rejects a call that would start a new execution
	// when WithMaxInFlight loaders are already running. Calls for keys
	// already in flight are still admitted.
	ErrTooManyInFlight = flightgroup.ErrTooManyInFlight
	// ErrTooManyWaiters rejects a call that would exceed WithMaxWaiters
	// callers on one key.
	ErrTooManyWaiters = flightgroup.ErrTooManyWaiters
	// ErrAbandoned is the cause with which WithCancelWhenAbandoned cancels a
	// loader whose callers all left.
	ErrAbandoned = flightgroup.ErrAbandoned
	// ErrNilFunc is returned when fn is nil; nothing runs.
	ErrNilFunc = flightgroup.ErrNilFunc
)

// PanicError is the error every waiter receives when the loader panicked. The
// panic is never re-raised: a loader bug must not take the process down from
// a goroutine nobody can recover in.
//
// Value is what the loader passed to panic, and Stack the loader goroutine's
// stack at the panic. Error prints both. Unwrap returns Value when it is an
// error, so errors.Is and errors.As see through a panic(err).
type PanicError = flightgroup.PanicError
