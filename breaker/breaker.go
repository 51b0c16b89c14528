// Package breaker is a circuit breaker for the shared tier of a
// flightcache.Cache, built on github.com/sony/gobreaker/v2.
//
// After ConsecutiveFailures shared-tier calls in a row fail or time out, the
// breaker opens: for CoolDown every call is refused at once with an error
// matching driver.ErrBreakerOpen, and the Cache treats the tier as a
// miss (a miss goes straight to the flight and the origin; local hits are
// unaffected). After the cool-down it is half-open: HalfOpenProbes calls go
// through; if that many succeed in a row it closes, and the first failure
// opens it again for another cool-down.
//
//	b, err := breaker.New(breaker.Options{ConsecutiveFailures: 5, CoolDown: 5 * time.Second})
//	if err != nil { ... }
//	c, err := flightcache.New(flightcache.Options[Product]{Shared: store, SharedBreaker: b})
//
// One Breaker may serve several Caches that share one store: they then trip
// and recover together, which is what one sick Redis deserves.
package breaker

import (
	"errors"
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// Defaults for the zero fields of Options.
const (
	// DefaultConsecutiveFailures is how many failures in a row open the
	// breaker. Five is enough to tell a sick tier from one unlucky timeout,
	// and at the default shared deadline (250 ms) costs at most a few
	// requests a slow answer before the breaker opens.
	DefaultConsecutiveFailures = 5
	// DefaultCoolDown is how long the breaker stays open before it lets a
	// probe through. Five seconds keeps the load on a struggling Redis low
	// (one probe per cool-down) while a restarted Redis is back in use
	// within seconds, well before the local tier's entries expire.
	DefaultCoolDown = 5 * time.Second
	// DefaultHalfOpenProbes is how many probe calls the half-open breaker
	// lets through at once; that many successes in a row close it.
	DefaultHalfOpenProbes = 1
)

// Limits beyond which Options are refused: a larger value is a typo (a
// cool-down of 5000 hours, a nanosecond count given as seconds), not a
// choice.
const (
	maxConsecutiveFailures = 1 << 20
	maxCoolDown            = time.Hour
	maxHalfOpenProbes      = 1 << 16
)

// Options configures a Breaker. The zero value is usable: every zero field
// takes its default.
type Options struct {
	// ConsecutiveFailures is how many failed calls in a row open the
	// breaker. Default DefaultConsecutiveFailures; must be in [1, 1<<20].
	ConsecutiveFailures int
	// CoolDown is how long the breaker stays open before it turns
	// half-open. Default DefaultCoolDown; must be in (0, 1h].
	CoolDown time.Duration
	// HalfOpenProbes is how many calls the half-open breaker lets through;
	// that many successes in a row close it, one failure opens it again.
	// Default DefaultHalfOpenProbes; must be in [1, 65536].
	HalfOpenProbes int
	// Interval, when positive, clears the failure counts of the closed
	// breaker at that period. Default 0: counts are cleared only when the
	// state changes, which is all ConsecutiveFailures needs (a success
	// already resets the run). Must not be negative.
	Interval time.Duration
	// OnStateChange, when set, is called at every state change, for
	// logging. It runs while the breaker holds its lock, on the goroutine
	// of the call that caused the change: it must be quick and must not
	// call the Breaker.
	OnStateChange func(from, to driver.BreakerState)
}

// Breaker is a driver.SharedBreaker. It is safe for concurrent use.
type Breaker struct {
	cb *gobreaker.TwoStepCircuitBreaker[struct{}]
}

var _ driver.SharedBreaker = (*Breaker)(nil)

// The errors Allow returns. Both match driver.ErrBreakerOpen; they are
// built once so that a refused call allocates nothing.
var (
	errOpen       = fmt.Errorf("breaker: open: %w", driver.ErrBreakerOpen)
	errProbesBusy = fmt.Errorf("breaker: half-open, probes already in flight: %w", driver.ErrBreakerOpen)
	// errFailed stands for a failed call in gobreaker, which counts errors.
	errFailed = errors.New("breaker: shared-tier call failed")
)

// New returns a closed Breaker, or a *flightcache.ConfigError when an option
// is out of range.
func New(o Options) (*Breaker, error) {
	bad := func(field, reason string) error {
		return &flightcache.ConfigError{Field: "breaker.Options." + field, Reason: reason}
	}
	if o.ConsecutiveFailures == 0 {
		o.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if o.ConsecutiveFailures < 1 || o.ConsecutiveFailures > maxConsecutiveFailures {
		return nil, bad("ConsecutiveFailures", "must be between 1 and 1048576")
	}
	if o.CoolDown == 0 {
		o.CoolDown = DefaultCoolDown
	}
	if o.CoolDown < 0 || o.CoolDown > maxCoolDown {
		return nil, bad("CoolDown", "must be positive and at most 1h")
	}
	if o.HalfOpenProbes == 0 {
		o.HalfOpenProbes = DefaultHalfOpenProbes
	}
	if o.HalfOpenProbes < 1 || o.HalfOpenProbes > maxHalfOpenProbes {
		return nil, bad("HalfOpenProbes", "must be between 1 and 65536")
	}
	if o.Interval < 0 {
		return nil, bad("Interval", "must not be negative")
	}

	// The limits above keep both counts within gobreaker's uint32.
	threshold := uint32(o.ConsecutiveFailures)
	st := gobreaker.Settings{
		Name:        "flightcache-shared",
		MaxRequests: uint32(o.HalfOpenProbes),
		Interval:    o.Interval,
		Timeout:     o.CoolDown,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= threshold },
	}
	if hook := o.OnStateChange; hook != nil {
		st.OnStateChange = func(_ string, from, to gobreaker.State) { hook(stateOf(from), stateOf(to)) }
	}
	return &Breaker{cb: gobreaker.NewTwoStepCircuitBreaker[struct{}](st)}, nil
}

// Allow asks to make one shared-tier call. When the breaker is open, or
// half-open with all its probes in flight, it returns an error matching
// driver.ErrBreakerOpen. Otherwise it returns done, which must be called
// exactly once with failed true when the call failed or timed out.
func (b *Breaker) Allow() (done func(failed bool), err error) {
	report, err := b.cb.Allow()
	switch {
	case err == nil:
	case errors.Is(err, gobreaker.ErrOpenState):
		return nil, errOpen
	case errors.Is(err, gobreaker.ErrTooManyRequests):
		return nil, errProbesBusy
	default:
		// gobreaker documents no other error; refuse the call all the same,
		// because a breaker that cannot decide must not let traffic through.
		return nil, fmt.Errorf("breaker: %v: %w", err, driver.ErrBreakerOpen)
	}
	return func(failed bool) {
		if failed {
			report(errFailed)
			return
		}
		report(nil)
	}, nil
}

// State returns the breaker's current state. An open breaker whose cool-down
// has passed reports (and becomes) half-open.
func (b *Breaker) State() driver.BreakerState { return stateOf(b.cb.State()) }

func stateOf(s gobreaker.State) driver.BreakerState {
	switch s {
	case gobreaker.StateOpen:
		return driver.BreakerOpen
	case gobreaker.StateHalfOpen:
		return driver.BreakerHalfOpen
	}
	return driver.BreakerClosed
}
