package flightcache

import "time"

// Waiting counts the keys queued in b and not yet sent to the origin, so
// that tests can wait for a state instead of sleeping.
func (b *Batcher[V]) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, l := range b.lanes {
		n += len(l.pending)
	}
	return n
}

// SetHold makes every hold after a return last d (MaxDelay still bounds
// it), whatever the call took.
func (b *Batcher[V]) SetHold(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fixedHold = d
}
