package memstore_test

import (
	"fmt"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/memstore"
)

func Example() {
	store, err := memstore.New(memstore.Options[string]{
		// Bound by bytes of value rather than by count.
		Cost:    func(key string, it driver.Item[string]) uint32 { return uint32(len(key) + len(it.Value)) },
		MaxCost: 64 << 20,
	})
	if err != nil {
		panic(err)
	}
	defer store.Close()

	now := time.Now()
	store.Set("user:42", driver.Item[string]{
		Value: "Ada",
		Meta:  driver.Meta{FreshUntil: now.Add(time.Minute), StaleUntil: now.Add(time.Hour)},
	})
	if it, ok := store.Get("user:42"); ok {
		fmt.Println(it.Value, "fresh:", now.Before(it.FreshUntil))
	}

	// An item already past its StaleUntil is never stored.
	store.Set("user:43", driver.Item[string]{Value: "gone", Meta: driver.Meta{StaleUntil: now.Add(-time.Second)}})
	_, ok := store.Get("user:43")
	fmt.Println("user:43 found:", ok)
	// Output:
	// Ada fresh: true
	// user:43 found: false
}
