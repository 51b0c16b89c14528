// Command coldget counts the functions of this module that one cold
// single-key Get enters, the depth of the read path a reader has to follow.
// `make api-report` builds it with coverage of the module's packages and
// runs it; it clears the counters after New and a warm-up, makes one cold
// Get (memstore local tier, default options), and writes the counters, so
// that `go tool covdata func` lists exactly the functions that Get entered.
//
// COLDGET_COUNTERS names the directory the counters and meta-data go to.
// Run without it (or without coverage) it only checks that the cold Get
// works.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime/coverage"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/memstore"
)

func main() {
	if err := run(os.Getenv("COLDGET_COUNTERS")); err != nil {
		fmt.Fprintln(os.Stderr, "coldget:", err)
		os.Exit(1)
	}
}

func run(coverDir string) error {
	local, err := memstore.New(memstore.Options[string]{MaxEntries: 1000})
	if err != nil {
		return err
	}
	c, err := flightcache.New(flightcache.Options[string]{Local: local})
	if err != nil {
		return err
	}
	defer c.Close()
	load := func(context.Context) (string, error) { return "v", nil }
	// A first cold Get of another key, so that one-time work (lazy
	// initialisation in the engine and the store) is not counted.
	if _, err := c.Get(context.Background(), "warm", load); err != nil {
		return err
	}
	if coverDir != "" {
		if err := coverage.ClearCounters(); err != nil {
			return err
		}
	}
	v, err := c.Get(context.Background(), "cold", load)
	if err != nil || v != "v" {
		return fmt.Errorf("cold Get = %q, %v; want \"v\", nil", v, err)
	}
	if coverDir != "" {
		if err := coverage.WriteMetaDir(coverDir); err != nil {
			return err
		}
		return coverage.WriteCountersDir(coverDir)
	}
	return nil
}
