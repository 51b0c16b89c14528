package flightcache_test

import (
	"context"
	"errors"
	"fmt"
	"log"
)

// Refresh reloads a value now, say after the origin changed, while Gets go
// on being served the held value; a failed Refresh keeps it.
func ExampleCache_Refresh() {
	c, closeCache := newProductCache()
	defer closeCache()
	ctx := context.Background()

	name := "Teapot"
	load := func(ctx context.Context) (*Product, error) { return &Product{ID: "42", Name: name}, nil }
	if _, err := c.Get(ctx, "product:42", load); err != nil {
		log.Fatal(err)
	}

	name = "Teapot, blue" // the origin changed
	p, err := c.Refresh(ctx, "product:42", load)
	fmt.Println(p.Name, err)

	down := errors.New("origin down")
	_, err = c.Refresh(ctx, "product:42", func(ctx context.Context) (*Product, error) { return nil, down })
	fmt.Println(errors.Is(err, down))

	p, _ = c.Get(ctx, "product:42", load)
	fmt.Println(p.Name)
	// Output:
	// Teapot, blue <nil>
	// true
	// Teapot, blue
}

// Peek answers from the tiers only: it never calls a loader.
func ExampleCache_Peek() {
	c, closeCache := newProductCache()
	defer closeCache()
	ctx := context.Background()

	_, ok := c.Peek(ctx, "product:42")
	fmt.Println(ok)

	load := func(ctx context.Context) (*Product, error) { return &Product{ID: "42", Name: "Teapot"}, nil }
	if _, err := c.Get(ctx, "product:42", load); err != nil {
		log.Fatal(err)
	}
	p, ok := c.Peek(ctx, "product:42")
	fmt.Println(p.Name, ok)

	if err := c.Delete(ctx, "product:42"); err != nil {
		log.Fatal(err)
	}
	_, ok = c.Peek(ctx, "product:42")
	fmt.Println(ok)
	// Output:
	// false
	// Teapot true
	// false
}
