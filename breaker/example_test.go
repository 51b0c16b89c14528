package breaker_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/flightcache/flightcache/breaker"
	"github.com/flightcache/flightcache/driver"
)

// A Breaker goes into Options.SharedBreaker; the Cache calls Allow before each
// shared-tier call. Here we play the Cache against a tier that always fails.
func Example() {
	b, err := breaker.New(breaker.Options{
		ConsecutiveFailures: 3,
		CoolDown:            5 * time.Second,
		OnStateChange: func(from, to driver.BreakerState) {
			fmt.Printf("shared tier breaker: %v -> %v\n", from, to)
		},
	})
	if err != nil {
		panic(err)
	}
	// c, err := flightcache.New(flightcache.Options[Product]{Shared: store, SharedBreaker: b})

	for i := range 4 {
		done, err := b.Allow()
		if errors.Is(err, driver.ErrBreakerOpen) {
			fmt.Printf("call %d: skipped, the tier counts as a miss\n", i)
			continue
		}
		done(true) // the Redis call timed out
		fmt.Printf("call %d: failed\n", i)
	}
	fmt.Println("state:", b.State())
	// Output:
	// call 0: failed
	// call 1: failed
	// shared tier breaker: closed -> open
	// call 2: failed
	// call 3: skipped, the tier counts as a miss
	// state: open
}
