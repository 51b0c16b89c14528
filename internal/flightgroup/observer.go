package flightgroup

import (
	"context"
	"time"
)

// EventKind says what happened in a Group. Every kind is cheap to count, and
// together they are enough to build the whole metric set of an operator's
// dashboard: requests, loader executions, shared waiters, outcomes, in-flight
// keys and the two latency distributions.
type EventKind uint8

// The events a Group reports to its Observer. The comment on each says which
// Event fields are set.
const (
	// EventRequest: a Do or DoChan call arrived (before admission). Ctx is
	// the caller's context.
	EventRequest EventKind = iota + 1
	// EventRejected: admission refused the call without running fn. Err is
	// ErrTooManyInFlight, ErrTooManyWaiters, ErrClosed or ErrNilFunc.
	EventRejected
	// EventLoaderStarted: a new execution was registered and fn is about to
	// run. Ctx is the loader's context.
	EventLoaderStarted
	// EventShared: a caller joined an execution that was already in flight
	// instead of starting its own. Ctx is the caller's context.
	EventShared
	// EventLoaderSucceeded: fn returned a nil error. Duration is how long fn
	// ran. Ctx is the loader's context.
	EventLoaderSucceeded
	// EventLoaderFailed: fn returned a non-nil error (Err). Duration is how
	// long fn ran.
	EventLoaderFailed
	// EventLoaderPanicked: fn panicked or called runtime.Goexit. Err is the
	// error every waiter received (a *PanicError for a panic).
	EventLoaderPanicked
	// EventTimeout: the loader timeout expired before fn returned; waiters
	// were released with an error matching context.DeadlineExceeded.
	// Duration is the configured timeout.
	EventTimeout
	// EventAbandoned: every caller left and WithCancelWhenAbandoned cancelled
	// the loader.
	EventAbandoned
	// EventLateResult: fn returned after its execution had already been
	// completed by a timeout, Close or abandonment. The result was dropped.
	// Duration is how long fn ran; Err is what it returned.
	EventLateResult
	// EventInFlight: the number of registered keys changed by InFlightDelta
	// (+1 or -1). InFlight is the count right after this change; events from
	// concurrent changes may reach the Observer out of order, so a gauge
	// should add InFlightDelta rather than set InFlight.
	EventInFlight
	// EventWaitDone: one caller's Do returned. Duration is how long the
	// caller waited (leader included), Leader says whether it started the
	// execution, Shared is the shared result it got, and Err is its error.
	// Ctx is the caller's context.
	EventWaitDone
)

var kindNames = [...]string{
	EventRequest:         "request",
	EventRejected:        "rejected",
	EventLoaderStarted:   "loader_started",
	EventShared:          "shared",
	EventLoaderSucceeded: "loader_succeeded",
	EventLoaderFailed:    "loader_failed",
	EventLoaderPanicked:  "loader_panicked",
	EventTimeout:         "timeout",
	EventAbandoned:       "abandoned",
	EventLateResult:      "late_result",
	EventInFlight:        "in_flight",
	EventWaitDone:        "wait_done",
}

// String returns a short, stable, lower-case name usable as a metric label.
func (k EventKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "unknown"
}

// Event describes one thing that happened in a Group. It deliberately carries
// no key: keys are unbounded (often attacker-chosen) and must never become
// metric labels. Flight identifies one execution, so an adapter can correlate
// the events of one execution (for tracing) without seeing its key.
type Event struct {
	Kind EventKind
	// Ctx is the context the event belongs to (see each EventKind). It lets
	// tracing adapters find the current span. It may be nil for EventInFlight.
	Ctx context.Context
	// Flight identifies the execution the event belongs to; 0 when there is
	// none (EventRequest, EventRejected, EventInFlight).
	Flight uint64
	// Leader is set on EventWaitDone for the caller that started the execution.
	Leader bool
	// Shared is set on EventWaitDone when the result went to several callers.
	Shared bool
	// Duration is the loader's or the waiter's duration, per EventKind.
	Duration time.Duration
	// InFlight is the number of registered keys right after the change, on
	// EventInFlight.
	InFlight int
	// InFlightDelta is the change, +1 or -1, on EventInFlight. Summing it is
	// exact whatever order concurrent events arrive in.
	InFlightDelta int
	// Err is the error of the event, per EventKind.
	Err error
}

// Observer receives a Group's events. ObserveFlight is called synchronously on
// the hot path, possibly from many goroutines at once, so it must be fast,
// safe for concurrent use, and must not call back into the Group. A Group
// built without an Observer skips all of this at the cost of one nil check.
type Observer interface {
	ObserveFlight(Event)
}

// ObserverFunc adapts a function to the Observer interface.
type ObserverFunc func(Event)

// ObserveFlight calls f(e).
func (f ObserverFunc) ObserveFlight(e Event) { f(e) }
