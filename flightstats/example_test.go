package flightstats_test

import (
	"context"
	"fmt"

	"github.com/flightcache/flightcache/flightstats"
	"github.com/flightcache/flightcache/singleflight"
)

func Example() {
	stats := flightstats.New()
	g := singleflight.New[string, string](singleflight.WithObserver(stats))
	load := func(context.Context) (string, error) { return "Ada", nil }
	for range 4 {
		g.Do(context.Background(), "user:42", load) // one after another: no coalescing
	}

	s := stats.Snapshot()
	fmt.Println("requests:", s.Requests, "flights:", s.FlightsStarted)
	fmt.Printf("requests per flight: %.1f, suppression ratio: %.2f\n", s.RequestsPerFlight(), s.SuppressionRatio())
	// Output:
	// requests: 4 flights: 4
	// requests per flight: 1.0, suppression ratio: 0.00
}
