package flightcache_test

import (
	"context"
	"fmt"
	"log"

	"github.com/flightcache/flightcache"
)

// A loader tags what it loads with SetTags; InvalidateTag then drops every
// value carrying the tag at once, here both variants of one product.
func ExampleSetTags() {
	c, closeCache := newProductCache()
	defer closeCache()
	ctx := context.Background()

	name := "Teapot"
	loads := 0
	load := func(ctx context.Context) (*Product, error) {
		flightcache.SetTags(ctx, "product:42")
		loads++
		return &Product{ID: "42", Name: name}, nil
	}
	for _, k := range []string{"product:42:en", "product:42:fr"} {
		if _, err := c.Get(ctx, k, load); err != nil {
			log.Fatal(err)
		}
	}

	name = "Kettle" // the origin changes
	if err := c.InvalidateTag(ctx, "product:42"); err != nil {
		log.Fatal(err)
	}
	for _, k := range []string{"product:42:en", "product:42:fr"} {
		p, _ := c.Get(ctx, k, load)
		fmt.Println(k, p.Name)
	}
	fmt.Println("loads:", loads)
	// Output:
	// product:42:en Kettle
	// product:42:fr Kettle
	// loads: 4
}

// Set takes its tags from WithTags on its ctx.
func ExampleWithTags() {
	c, closeCache := newProductCache()
	defer closeCache()
	ctx := context.Background()

	err := c.Set(flightcache.WithTags(ctx, "category:kitchen"), "product:42", &Product{ID: "42", Name: "Teapot"})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.InvalidateTag(ctx, "category:kitchen"); err != nil {
		log.Fatal(err)
	}
	r, _ := c.Fetch(ctx, "product:42", func(ctx context.Context) (*Product, error) {
		return &Product{ID: "42", Name: "Kettle"}, nil
	})
	fmt.Println(r.Value.Name, r.Outcome)
	// Output: Kettle loaded
}
