package coherence

import (
	"slices"
	"sync"
	"time"
)

// MaxPending bounds the writes kept for a redo; beyond it the oldest are
// dropped (key writes before bulk ones).
const MaxPending = 10_000

// Pending is a write of this instance the other instances may not have
// heard of: its invalidation was not published, or its update of the
// shared tier failed (Redis hung, partitioned, down). The redo removes the
// key's shared entry first when DeleteShared is set, then publishes the
// invalidation with its original Version. A failed Set is redone as a
// removal: writing its value later could overwrite a newer one written
// meanwhile by another instance.
type Pending struct {
	// Kind is the Cache's InvalidationKind, opaque here; Bulk tells a
	// prefix or all-keys invalidation from a key one.
	Kind         uint8
	Bulk         bool
	Target       string
	Version      time.Time // wall clock
	DeleteShared bool
}

func (p Pending) id() pendingID { return pendingID{p.Kind, p.Target} }

// pendingID names a pending write's target: a later write of the same
// target replaces it.
type pendingID struct {
	kind   uint8
	target string
}

// Redo keeps the writes the other instances may not have heard of and
// redoes them, oldest first, in one background loop: from the moment one
// becomes pending (not only when the Bus comes back: it may never have
// gone down) until none is left, waiting Min doubling to Max between
// passes that met a failure. Kick cuts a wait short (the Bus is up again,
// a publish went through).
type Redo struct {
	// Do redoes one write; an error stops the pass. Set once, before use.
	Do func(Pending) error
	// Min and Max bound the wait between two passes. Set once, before use.
	Min, Max time.Duration

	mu      sync.Mutex
	pending map[pendingID]Pending // guarded by mu
	running bool                  // a loop runs; guarded by mu
	closed  bool                  // guarded by mu
	kick    chan struct{}         // buffered 1; made under mu
	closing chan struct{}         // closed by Close; made under mu
	wg      sync.WaitGroup
}

// Add keeps p, the newest pending write per target: p replaces a pending
// write of the same target that is not newer (p's own DeleteShared
// decides: a later write whose shared update succeeded left the newer
// entry, which must not be removed), and is itself dropped when a newer
// one is pending (writes of one target may reach Add out of order: the
// older one's redo would announce, or remove, what the newer one
// replaced). It starts the loop, and reports whether the oldest write was
// dropped to stay within MaxPending.
func (r *Redo) Add(p Pending) (dropped bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	if r.pending == nil {
		r.pending = make(map[pendingID]Pending)
	}
	if cur, ok := r.pending[p.id()]; !ok || !cur.Version.After(p.Version) {
		r.pending[p.id()] = p
	}
	if len(r.pending) > MaxPending {
		delete(r.pending, r.oldestLocked())
		dropped = true
	}
	r.startLocked()
	return dropped
}

// oldestLocked is the write to drop first: the oldest key write, or the
// oldest bulk one when every write is bulk (rare, and never retained by
// the Bus unless published).
func (r *Redo) oldestLocked() pendingID {
	var (
		oldest Pending
		found  bool
	)
	for _, p := range r.pending {
		switch {
		case !found, p.Bulk != oldest.Bulk && !p.Bulk:
			oldest, found = p, true
		case p.Bulk == oldest.Bulk && p.Version.Before(oldest.Version):
			oldest = p
		}
	}
	return oldest.id()
}

// Succeeded forgets a pending write of p's target that is not newer than
// p: a later write of the same target went through, and covers it. If
// other writes wait, the loop is kicked: whatever kept them is likely gone.
func (r *Redo) Succeeded(p Pending) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.pending[p.id()]; ok && !cur.Version.After(p.Version) {
		delete(r.pending, p.id())
	}
	if len(r.pending) > 0 {
		r.startLocked()
	}
}

// Kick runs a pass now if writes are pending.
func (r *Redo) Kick() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) > 0 {
		r.startLocked()
	}
}

// Len returns how many writes are pending.
func (r *Redo) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// Close stops the loop and waits for it. Pending writes are dropped.
func (r *Redo) Close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		if r.closing != nil {
			close(r.closing)
		}
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// startLocked starts the loop, or kicks the one running.
func (r *Redo) startLocked() {
	if r.closed {
		return
	}
	if r.kick == nil {
		r.kick, r.closing = make(chan struct{}, 1), make(chan struct{})
	}
	if r.running {
		select {
		case r.kick <- struct{}{}:
		default:
		}
		return
	}
	r.running = true
	r.wg.Add(1)
	go r.loop()
}

// loop makes passes until nothing is pending or Redo closes.
func (r *Redo) loop() {
	defer r.wg.Done()
	backoff := r.Min
	for {
		if r.pass() {
			r.mu.Lock()
			// A write made pending after the pass looked is seen here,
			// under the same lock Add takes: none can be left behind.
			if len(r.pending) == 0 || r.closed {
				r.running = false
				r.mu.Unlock()
				return
			}
			r.mu.Unlock()
			backoff = r.Min
			continue
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-r.kick:
			t.Stop()
		case <-r.closing:
			t.Stop()
			r.mu.Lock()
			r.running = false
			r.mu.Unlock()
			return
		}
		backoff = min(2*backoff, r.Max)
	}
}

// pass redoes every pending write once, oldest first, and reports whether
// all went through; it stops at the first failure.
func (r *Redo) pass() bool {
	r.mu.Lock()
	todo := make([]Pending, 0, len(r.pending))
	for _, p := range r.pending {
		todo = append(todo, p)
	}
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return true
	}
	slices.SortFunc(todo, func(a, b Pending) int { return a.Version.Compare(b.Version) })
	for _, p := range todo {
		r.mu.Lock()
		closed := r.closed
		r.mu.Unlock()
		if closed {
			return true
		}
		if err := r.Do(p); err != nil {
			return false
		}
		r.mu.Lock()
		if cur, ok := r.pending[p.id()]; ok && cur.Version.Equal(p.Version) {
			delete(r.pending, p.id())
		}
		r.mu.Unlock()
	}
	return true
}
