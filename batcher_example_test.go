package flightcache_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"

	"github.com/flightcache/flightcache"
)

// A Batcher turns the misses of independent Gets into shared origin calls:
// a lone miss goes at once, and the misses that arrive while a call is at
// the origin wait, and go together when it returns or when MaxKeys of them
// wait. Here ten requests each miss a different product while the first
// call is at the origin: the origin sees two calls, not ten.
func ExampleBatcher() {
	c, closeCache := newProductCache()
	defer closeCache()

	var (
		mu    sync.Mutex
		calls []int
	)
	firstCall, secondCall := make(chan struct{}), make(chan struct{})
	load := func(ctx context.Context, keys []string) (map[string]*Product, error) {
		mu.Lock()
		calls = append(calls, len(keys))
		n := len(calls)
		mu.Unlock()
		switch n {
		case 1:
			close(firstCall)
			<-secondCall // a slow origin: the others miss meanwhile
		case 2:
			close(secondCall)
		}
		// One query for all the keys: WHERE id = ANY($1).
		found := make(map[string]*Product, len(keys))
		for _, k := range keys {
			found[k] = &Product{ID: k, Name: "Product " + strings.TrimPrefix(k, "product:")}
		}
		return found, nil
	}
	b, err := flightcache.NewBatcher(load, flightcache.BatcherOptions{MaxKeys: 9})
	if err != nil {
		log.Fatal(err)
	}
	get := func(key string) {
		if _, err := c.Get(context.Background(), key, b.Load(key)); err != nil {
			log.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { get("product:0") })
	<-firstCall
	for i := 1; i < 10; i++ {
		wg.Go(func() { get(fmt.Sprint("product:", i)) })
	}
	wg.Wait()
	fmt.Println("keys per origin call:", calls)
	// Output:
	// keys per origin call: [1 9]
}

// A batch loader fails single keys with a *BatchError's Keys: the other
// keys of the call are served all the same, and a key absent from the map
// does not exist.
func ExampleBatcher_LoadMany() {
	c, closeCache := newProductCache()
	defer closeCache()

	errLocked := errors.New("row locked")
	load := func(ctx context.Context, keys []string) (map[string]*Product, error) {
		return map[string]*Product{"product:1": {ID: "1", Name: "Teapot"}},
			&flightcache.BatchError{Keys: map[string]error{"product:2": errLocked}}
	}
	b, err := flightcache.NewBatcher(load, flightcache.BatcherOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range c.FetchMany(context.Background(), []string{"product:1", "product:2", "product:3"}, b.LoadMany) {
		switch {
		case errors.Is(r.Err, flightcache.ErrNotFound):
			fmt.Println("not found")
		case r.Err != nil:
			fmt.Println("failed:", errors.Is(r.Err, errLocked))
		default:
			fmt.Println(r.Value.Name)
		}
	}
	// Output:
	// Teapot
	// failed: true
	// not found
}
