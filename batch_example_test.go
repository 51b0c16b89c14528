package flightcache_test

import (
	"context"
	"fmt"
	"log"
	"maps"
	"slices"
	"strings"
)

// GetMany loads only the keys no tier has, in one loader call; a key the
// loader leaves out does not exist and is cached as such.
func ExampleCache_GetMany() {
	c, closeCache := newProductCache()
	defer closeCache()

	catalog := map[string]string{"product:1": "Teapot", "product:2": "Kettle", "product:3": "Cup"}
	load := func(ctx context.Context, keys []string) (map[string]*Product, error) {
		fmt.Println("origin asked for", strings.Join(keys, ", ")) // one query: WHERE id IN (...)
		found := make(map[string]*Product, len(keys))
		for _, k := range keys {
			if name, ok := catalog[k]; ok {
				found[k] = &Product{ID: k, Name: name}
			}
		}
		return found, nil
	}
	ctx := context.Background()
	if _, err := c.Get(ctx, "product:1", func(ctx context.Context) (*Product, error) {
		return &Product{ID: "product:1", Name: "Teapot"}, nil
	}); err != nil {
		log.Fatal(err)
	}
	m, err := c.GetMany(ctx, []string{"product:1", "product:2", "product:3", "product:9"}, load)
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Println(k, m[k].Name)
	}
	// Output:
	// origin asked for product:2, product:3, product:9
	// product:1 Teapot
	// product:2 Kettle
	// product:3 Cup
}

// FetchMany says how each key was served, in the order of the keys.
func ExampleCache_FetchMany() {
	c, closeCache := newProductCache()
	defer closeCache()

	load := func(ctx context.Context, keys []string) (map[string]*Product, error) {
		found := map[string]*Product{}
		if slices.Contains(keys, "product:1") {
			found["product:1"] = &Product{ID: "1", Name: "Teapot"}
		}
		return found, nil // product:2 does not exist
	}
	ctx := context.Background()
	c.FetchMany(ctx, []string{"product:1"}, load)
	for _, r := range c.FetchMany(ctx, []string{"product:1", "product:2"}, load) {
		fmt.Println(r.Outcome, r.Err)
	}
	// Output:
	// hit_local <nil>
	// loaded flightcache: not found
}
