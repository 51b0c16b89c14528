package flightgroup

import (
	"fmt"
	"time"
)

// Option configures New.
//
// Options validate their argument: a negative limit or timeout is a
// programmer error, and the Option panics with a message naming it (the same
// contract as regexp.MustCompile). Zero means "no limit" / "no timeout".
type Option func(*config)

// config is immutable once New returns.
type config struct {
	timeout         time.Duration
	maxInFlight     int64
	maxWaiters      int
	cancelAbandoned bool
	obs             Observer
}

// WithLoaderTimeout bounds every execution to d. The loader's context has
// deadline d; if the loader ignores it, waiters are still released at d with
// an error matching context.DeadlineExceeded, and the key is free for a new
// execution at once. The late result is dropped (EventLateResult). Until it
// returns, such a loader still counts against WithMaxInFlight.
func WithLoaderTimeout(d time.Duration) Option {
	if d < 0 {
		panic(fmt.Sprintf("singleflight: WithLoaderTimeout(%v): negative timeout", d))
	}
	return func(c *config) { c.timeout = d }
}

// WithMaxInFlight is a bulkhead: at most n loaders run at once. A call that
// would start a new execution beyond that fails with ErrTooManyInFlight
// without running fn; a call that joins an execution in flight is still
// admitted. A loader holds its slot from the moment it starts until fn
// actually returns, including after its key was forgotten (Forget) and after
// the loader timeout released its waiters: a hung origin whose loaders ignore
// their context fills the limit and new keys are refused, instead of
// goroutines piling up without bound. It bounds memory and goroutines against
// attacker-chosen key cardinality.
func WithMaxInFlight(n int) Option {
	if n < 0 {
		panic(fmt.Sprintf("singleflight: WithMaxInFlight(%d): negative limit", n))
	}
	return func(c *config) { c.maxInFlight = int64(n) }
}

// WithMaxWaiters admits at most n callers (leader included) on one key at
// once; the next fails with ErrTooManyWaiters.
func WithMaxWaiters(n int) Option {
	if n < 0 {
		panic(fmt.Sprintf("singleflight: WithMaxWaiters(%d): negative limit", n))
	}
	return func(c *config) { c.maxWaiters = n }
}

// WithCancelWhenAbandoned cancels the loader (cause ErrAbandoned) as soon as
// every caller has left, and frees the key at once. Without it the loader
// runs to completion so that its result can still fill a cache.
func WithCancelWhenAbandoned() Option {
	return func(c *config) { c.cancelAbandoned = true }
}

// WithObserver reports the Group's events to o (metrics, tracing). A nil o
// means none.
func WithObserver(o Observer) Option {
	return func(c *config) { c.obs = o }
}
