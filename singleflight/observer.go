package singleflight

import "github.com/flightcache/flightcache/internal/flightgroup"

// EventKind says what happened in a Group. Every kind is cheap to count, and
// together they are enough to build the whole metric set of an operator's
// dashboard: requests, loader executions, shared waiters, outcomes, in-flight
// keys and the two latency distributions.
//
// Its String method returns a short, stable, lower-case name usable as a
// metric label ("request", "loader_succeeded", "in_flight", …; "unknown"
// for a value that is not one of the constants below).
type EventKind = flightgroup.EventKind

// The events a Group reports to its Observer. The comment on each says which
// Event fields are set.
const (
	// EventRequest: a Do or DoChan call arrived (before admission). Ctx is
	// the caller's context.
	EventRequest EventKind = flightgroup.EventRequest
	// EventRejected: admission refused the call without running fn. Err is
	// ErrTooManyInFlight, ErrTooManyWaiters, ErrClosed or ErrNilFunc.
	EventRejected EventKind = flightgroup.EventRejected
	// EventLoaderStarted: a new execution was registered and fn is about to
	// run. Ctx is the loader's context.
	EventLoaderStarted EventKind = flightgroup.EventLoaderStarted
	// EventShared: a caller joined an execution that was already in flight
	// instead of starting its own. Ctx is the caller's context.
	EventShared EventKind = flightgroup.EventShared
	// EventLoaderSucceeded: fn returned a nil error. Duration is how long fn
	// ran. Ctx is the loader's context.
	EventLoaderSucceeded EventKind = flightgroup.EventLoaderSucceeded
	// EventLoaderFailed: fn returned a non-nil error (Err). Duration is how
	// long fn ran.
	EventLoaderFailed EventKind = flightgroup.EventLoaderFailed
	// EventLoaderPanicked: fn panicked or called runtime.Goexit. Err is the
	// error every waiter received (a *PanicError for a panic).
	EventLoaderPanicked EventKind = flightgroup.EventLoaderPanicked
	// EventTimeout: the loader timeout expired before fn returned; waiters
	// were released with an error matching context.DeadlineExceeded.
	// Duration is the configured timeout.
	EventTimeout EventKind = flightgroup.EventTimeout
	// EventAbandoned: every caller left and WithCancelWhenAbandoned cancelled
	// the loader.
	EventAbandoned EventKind = flightgroup.EventAbandoned
	// EventLateResult: fn returned after its execution had already been
	// completed by a timeout, Close or abandonment. The result was dropped.
	// Duration is how long fn ran; Err is what it returned.
	EventLateResult EventKind = flightgroup.EventLateResult
	// EventInFlight: the number of registered keys changed by InFlightDelta
	// (+1 or -1). InFlight is the count right after this change; events from
	// concurrent changes may reach the Observer out of order, so a gauge
	// should add InFlightDelta rather than set InFlight.
	EventInFlight EventKind = flightgroup.EventInFlight
	// EventWaitDone: one caller's Do returned. Duration is how long the
	// caller waited (leader included), Leader says whether it started the
	// execution, Shared is the shared result it got, and Err is its error.
	// Ctx is the caller's context.
	EventWaitDone EventKind = flightgroup.EventWaitDone
)

// Event describes one thing that happened in a Group. It deliberately carries
// no key: keys are unbounded (often attacker-chosen) and must never become
// metric labels. Flight identifies one execution, so an adapter can correlate
// the events of one execution (for tracing) without seeing its key.
//
// Its fields, set per EventKind as each constant above says:
//
//	Kind          EventKind
//	Ctx           context.Context // the context the event belongs to, so that tracing
//	                              // adapters find the current span; may be nil for EventInFlight
//	Flight        uint64          // the execution; 0 when there is none
//	                              // (EventRequest, EventRejected, EventInFlight)
//	Leader        bool            // on EventWaitDone, for the caller that started the execution
//	Shared        bool            // on EventWaitDone, when the result went to several callers
//	Duration      time.Duration   // the loader's or the waiter's duration
//	InFlight      int             // on EventInFlight, registered keys right after the change
//	InFlightDelta int             // on EventInFlight, the change, +1 or -1; summing it is
//	                              // exact whatever order concurrent events arrive in
//	Err           error           // the event's error
type Event = flightgroup.Event

// Observer receives a Group's events through its one method,
// ObserveFlight(Event). ObserveFlight is called synchronously on the hot
// path, possibly from many goroutines at once, so it must be fast, safe for
// concurrent use, and must not call back into the Group. A Group built
// without an Observer skips all of this at the cost of one nil check.
type Observer = flightgroup.Observer

// ObserverFunc adapts a function to the Observer interface: its
// ObserveFlight(e) calls f(e).
type ObserverFunc = flightgroup.ObserverFunc
