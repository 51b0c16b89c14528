package flightcache

import (
	"errors"
	"sync"
	"time"
)

// ThrottledError is what callers get during Options.FailureThrottle after a
// failed load of their key: the origin was not called again. It wraps the
// error of that load, so errors.Is and errors.As see through it to the cause.
type ThrottledError struct {
	// Err is the error of the load that started the throttle.
	Err error
	// Until is when the throttle ends and the next Get loads again.
	Until time.Time
}

// Error says the origin was throttled, followed by the failed load's error.
func (e *ThrottledError) Error() string {
	return "flightcache: origin throttled after a failed load: " + e.Err.Error()
}

// Unwrap returns the error of the failed load.
func (e *ThrottledError) Unwrap() error { return e.Err }

// errLoaderAborted stands for the error of a loader that panicked or called
// runtime.Goexit, from the throttle's point of view (the callers get the
// engine's *singleflight.PanicError).
var errLoaderAborted = errors.New("flightcache: loader panicked or exited")

// maxThrottled bounds the throttle's memory when many distinct keys fail at
// once (an origin outage under attacker-chosen keys). Beyond it, failures
// are not recorded: the throttle fails open, costing origin calls, never
// memory.
const maxThrottled = 10_000

// throttle remembers recent load failures per key. Invariant: every entry's
// until is at most window after it was recorded; expired entries are
// ignored by check and swept on insert when the map is full.
type throttle struct {
	window time.Duration
	mu     sync.Mutex
	m      map[string]throttled // guarded by mu; at most maxThrottled records
	// nextSweep is when a full m may next be swept for expired records.
	// Guarded by mu.
	nextSweep time.Time
}

type throttled struct {
	err   error
	until time.Time
}

func newThrottle(window time.Duration) *throttle {
	if window <= 0 {
		return nil
	}
	return &throttle{window: window, m: make(map[string]throttled)}
}

// check returns the *ThrottledError for key at now, or nil.
func (t *throttle) check(key string, now time.Time) error {
	t.mu.Lock()
	e, ok := t.m[key]
	if ok && !now.Before(e.until) {
		delete(t.m, key)
		ok = false
	}
	t.mu.Unlock()
	if !ok {
		return nil
	}
	return &ThrottledError{Err: e.err, Until: e.until}
}

// fail records a failed load of key that ended at now.
func (t *throttle) fail(key string, err error, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.m) >= maxThrottled {
		// Full: sweep expired records, but at most once per window, so that
		// a flood of failures over distinct keys (an outage under
		// attacker-chosen keys) costs one O(n) pass per window, not one per
		// failure.
		if now.Before(t.nextSweep) {
			return
		}
		t.nextSweep = now.Add(t.window)
		for k, e := range t.m {
			if !now.Before(e.until) {
				delete(t.m, k)
			}
		}
		if len(t.m) >= maxThrottled {
			return
		}
	}
	t.m[key] = throttled{err: err, until: now.Add(t.window)}
}

// succeed forgets key's failure: the origin answered.
func (t *throttle) succeed(key string) {
	t.mu.Lock()
	if len(t.m) > 0 {
		delete(t.m, key)
	}
	t.mu.Unlock()
}
