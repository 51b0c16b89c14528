package bloomguard_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/flightcache/flightcache/bloomguard"
)

func Example() {
	f, err := bloomguard.New(bloomguard.Config{ExpectedItems: 1000, FalsePositiveRate: 0.01})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	fmt.Println("before the first build:", f.MayContain("acme", "sku-404"))

	// Build from the origin; productd streams (tenant, id) from its database.
	origin := func(ctx context.Context, add func(tenant, id string)) error {
		add("acme", "sku-1")
		add("globex", "sku-2")
		return nil
	}
	if err := f.Rebuild(context.Background(), origin); err != nil {
		panic(err)
	}
	fmt.Println("acme/sku-1:", f.MayContain("acme", "sku-1"))
	fmt.Println("acme/sku-404:", f.MayContain("acme", "sku-404"))
	fmt.Println("acme/sku-2 (globex's):", f.MayContain("acme", "sku-2"))

	// A creation is added before it is acknowledged.
	f.Add("acme", "sku-3")
	fmt.Println("acme/sku-3:", f.MayContain("acme", "sku-3"))

	// As a driver.Guard, with cache keys of the form "tenant/id".
	g := bloomguard.Guard{Filter: f, Split: func(key string) (string, string, bool) {
		return strings.Cut(key, "/")
	}}
	fmt.Println("guard acme/sku-404:", g.MayExist(context.Background(), "acme/sku-404"))
	fmt.Println("filtered:", f.Stats().Filtered)
	// Output:
	// before the first build: true
	// acme/sku-1: true
	// acme/sku-404: false
	// acme/sku-2 (globex's): false
	// acme/sku-3: true
	// guard acme/sku-404: false
	// filtered: 3
}
