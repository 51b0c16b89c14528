package flightgroup

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrClosed is returned by calls made after Close, and is the cause with
	// which Close cancels running loaders. Waiters of an execution that Close
	// interrupted receive it too.
	ErrClosed = errors.New("singleflight: group closed")
	// ErrTooManyInFlight rejects a call that would start a new execution
	// when WithMaxInFlight loaders are already running. Calls for keys
	// already in flight are still admitted.
	ErrTooManyInFlight = errors.New("singleflight: too many keys in flight")
	// ErrTooManyWaiters rejects a call that would exceed WithMaxWaiters
	// callers on one key.
	ErrTooManyWaiters = errors.New("singleflight: too many waiters on key")
	// ErrAbandoned is the cause with which WithCancelWhenAbandoned cancels a
	// loader whose callers all left.
	ErrAbandoned = errors.New("singleflight: every caller left")
	// ErrNilFunc is returned when fn is nil; nothing runs.
	ErrNilFunc = errors.New("singleflight: nil function")

	// errGoexit is what waiters receive when the loader called
	// runtime.Goexit: they must not hang, and there is no value to give.
	errGoexit = errors.New("singleflight: loader called runtime.Goexit")
)

// PanicError is the error every waiter receives when the loader panicked. The
// panic is never re-raised: a loader bug must not take the process down from
// a goroutine nobody can recover in.
type PanicError struct {
	// Value is what the loader passed to panic.
	Value any
	// Stack is the loader goroutine's stack at the panic.
	Stack []byte
}

// Error gives the panic value and the stack of the panicking goroutine.
func (p *PanicError) Error() string {
	return fmt.Sprintf("singleflight: loader panicked: %v\n\n%s", p.Value, p.Stack)
}

// Unwrap returns Value when it is an error, so errors.Is and errors.As see
// through a panic(err).
func (p *PanicError) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

// timeoutError is what waiters receive when the loader timeout expires first.
type timeoutError struct{ after string }

// Error says after how long the loader timed out.
func (e *timeoutError) Error() string {
	return "singleflight: loader timed out after " + e.after
}

// Unwrap makes errors.Is(err, context.DeadlineExceeded) hold.
func (e *timeoutError) Unwrap() error { return context.DeadlineExceeded }
