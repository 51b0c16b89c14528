// Package testlocal is a map-backed driver.LocalStore for the tests and
// examples of the core module, which cannot take memstore: memstore is a
// module of its own (it requires otter), and the core requires no
// third-party module, not even for its tests (see docs/ARCHITECTURE.md).
//
// A Store keeps every item until its StaleUntil, as memstore does, and
// implements driver.LocalRanger and the Now method a Cache takes its clock
// from. It does not bound its size: it is for tests, not for services.
package testlocal

import (
	"iter"
	"sync"
	"time"

	"github.com/flightcache/flightcache/clock"
	"github.com/flightcache/flightcache/driver"
)

// Store is an unbounded, concurrent map from key to *driver.Item[V].
type Store[V any] struct {
	now func() time.Time
	mu  sync.RWMutex
	m   map[string]*driver.Item[V]
}

var (
	_ driver.LocalStore[int]  = (*Store[int])(nil)
	_ driver.LocalRanger[int] = (*Store[int])(nil)
)

// New returns an empty Store on the clock now (clock.Monotonic when nil).
func New[V any](now func() time.Time) *Store[V] {
	if now == nil {
		now = clock.Monotonic
	}
	return &Store[V]{now: now, m: make(map[string]*driver.Item[V])}
}

// Get returns the item stored under key unless its StaleUntil has passed.
// The Item is shared: the caller must not modify it.
func (s *Store[V]) Get(key string) (*driver.Item[V], bool) {
	s.mu.RLock()
	it, ok := s.m[key]
	s.mu.RUnlock()
	if !ok || !s.now().Before(it.StaleUntil) {
		return nil, false
	}
	return it, true
}

// Set stores a copy of it under key; an item already past its StaleUntil
// removes the key instead.
func (s *Store[V]) Set(key string, it driver.Item[V]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !it.StaleUntil.After(s.now()) {
		delete(s.m, key)
		return
	}
	s.m[key] = &it
}

// Delete removes key.
func (s *Store[V]) Delete(key string) {
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
}

// All yields the items not past their StaleUntil, from a snapshot of the
// keys taken when the iteration starts; no lock is held while the loop body
// runs, so it may Set and Delete.
func (s *Store[V]) All() iter.Seq2[string, *driver.Item[V]] {
	return func(yield func(string, *driver.Item[V]) bool) {
		s.mu.RLock()
		keys := make([]string, 0, len(s.m))
		for k := range s.m {
			keys = append(keys, k)
		}
		s.mu.RUnlock()
		for _, k := range keys {
			if it, ok := s.Get(k); ok && !yield(k, it) {
				return
			}
		}
	}
}

// Len returns the number of items held, expired ones included.
func (s *Store[V]) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.m)
}

// Clock returns the Store's clock. A Cache without Options.Now keeps time
// by it, as it does by memstore's.
func (s *Store[V]) Clock() func() time.Time { return s.now }
