// Command shortlivedmain builds its Cache in main and in run, which only
// main calls; a handler literal is still per request.
package main

import (
	"context"
	"web"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/singleflight"
)

func load(context.Context) (int, error) { return 1, nil }

func main() {
	c, _ := flightcache.New(flightcache.Options[int]{})
	defer c.Close()
	_, _ = c.Get(context.Background(), "k", load)
	if err := run(); err != nil {
		panic(err)
	}
	web.HandleFunc("/", func(w web.ResponseWriter, r *web.Request) {
		g := singleflight.New[string, int]() // want `singleflight.Group is created`
		_, _, _ = g.Do(r.Context(), "k", load)
	})
	for range 3 {
		perIteration()
	}
}

// run is called once, by main only.
func run() error {
	c, err := flightcache.New(flightcache.Options[int]{})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Get(context.Background(), "k", load)
	return err
}

// perIteration is called in a loop: not once per program.
func perIteration() {
	g := singleflight.New[string, int]() // want `singleflight.Group is created`
	_, _, _ = g.Do(context.Background(), "k", load)
}

// handler is referred to as a value: it runs per request.
func handler(w web.ResponseWriter, r *web.Request) {
	g := singleflight.New[string, int]() // want `singleflight.Group is created`
	_, _, _ = g.Do(r.Context(), "k", load)
}

func init() { web.HandleFunc("/h", handler) }
