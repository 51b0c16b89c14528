package driver_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// mapStore is a LocalStore on a map: the smallest tier a Cache accepts. A
// real one must bound its memory (memstore does).
type mapStore[V any] struct {
	mu    sync.RWMutex
	items map[string]*driver.Item[V] // never modified once stored
}

func (s *mapStore[V]) Get(key string) (*driver.Item[V], bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	it, ok := s.items[key]
	return it, ok
}

func (s *mapStore[V]) Set(key string, it driver.Item[V]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items[key] = &it
}

func (s *mapStore[V]) Delete(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.items, key)
}

// Implementing a tier: a LocalStore is three methods on Items.
func Example_localStore() {
	c, err := flightcache.New(flightcache.Options[string]{
		Local: &mapStore[string]{items: map[string]*driver.Item[string]{}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	load := func(context.Context) (string, error) { return "from the origin", nil }
	for range 2 {
		r, err := c.Fetch(context.Background(), "greeting", load)
		fmt.Println(r.Value, r.Outcome, err)
	}
	// Output:
	// from the origin loaded <nil>
	// from the origin hit_local <nil>
}

// An Observer sees every Event of a Cache; its labels never hold a key.
func ExampleObserver() {
	var seen sync.Map
	obs := observerFunc(func(e driver.Event) {
		if e.Kind == driver.EventGet {
			seen.Store(e.Outcome.String(), true)
		}
	})
	c, err := flightcache.New(flightcache.Options[int]{
		Local:    &mapStore[int]{items: map[string]*driver.Item[int]{}},
		Observer: obs,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	load := func(context.Context) (int, error) { return 42, nil }
	c.Get(context.Background(), "answer", load)
	c.Get(context.Background(), "answer", load)
	_, loaded := seen.Load("loaded")
	_, hit := seen.Load("hit_local")
	fmt.Println(loaded, hit)
	// Output: true true
}

type observerFunc func(driver.Event)

func (f observerFunc) ObserveCache(e driver.Event) { f(e) }
