package singleflight_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/flightcache/flightcache/singleflight"
)

type Product struct {
	ID   string
	Name string
}

func ExampleGroup_Do() {
	g := singleflight.New[string, *Product]()

	var loads int
	var mu sync.Mutex
	load := func(ctx context.Context) (*Product, error) {
		mu.Lock()
		loads++
		mu.Unlock()
		return &Product{ID: "42", Name: "Towel"}, nil
	}

	p, _, err := g.Do(context.Background(), "product:42", load)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(p.Name, loads)
	// Output: Towel 1
}

func ExampleGroup_DoChan() {
	g := singleflight.New[string, string]()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()

	ch := g.DoChan(ctx, "greeting", func(context.Context) (string, error) {
		return "hello", nil
	})
	select {
	case r := <-ch:
		fmt.Println(r.Val, r.Err)
	case <-ctx.Done():
		// The channel is buffered: leaving it unread leaks nothing.
		fmt.Println("gave up:", ctx.Err())
	}
	// Output: hello <nil>
}

// A caller that gives up gets its own ctx.Err() at once; the loader goes on
// for everyone else.
func ExampleGroup_Do_cancellation() {
	g := singleflight.New[string, string]()
	release := make(chan struct{})
	started := make(chan struct{})

	patient := g.DoChan(context.Background(), "report", func(context.Context) (string, error) {
		close(started)
		<-release // a slow origin
		return "done", nil
	})
	<-started

	impatient, cancel := context.WithCancel(context.Background())
	cancel() // e.g. the HTTP client went away
	_, _, err := g.Do(impatient, "report", func(context.Context) (string, error) { return "", nil })
	fmt.Println("impatient:", err)

	close(release)
	r := <-patient
	fmt.Println("patient:", r.Val, r.Err)
	// Output:
	// impatient: context canceled
	// patient: done <nil>
}

// Limits are admission control: a rejected call returns at once without
// running fn, so an attacker cannot grow memory by inventing keys.
func ExampleWithMaxInFlight() {
	g := singleflight.New[string, int](
		singleflight.WithMaxInFlight(1),
		singleflight.WithLoaderTimeout(5*time.Second),
	)
	release := make(chan struct{})
	started := make(chan struct{})
	busy := g.DoChan(context.Background(), "a", func(context.Context) (int, error) {
		close(started)
		<-release
		return 1, nil
	})
	<-started

	_, _, err := g.Do(context.Background(), "b", func(context.Context) (int, error) { return 2, nil })
	fmt.Println(errors.Is(err, singleflight.ErrTooManyInFlight))

	close(release)
	fmt.Println((<-busy).Val)
	// Output:
	// true
	// 1
}
