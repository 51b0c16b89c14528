package shortlived

import (
	"context"
	"web"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/singleflight"
)

type Product struct{ Name string }

func load(context.Context) (*Product, error) { return &Product{}, nil }

// A Group per request: the classic mistake.
func Handler(w web.ResponseWriter, r *web.Request) {
	g := singleflight.New[string, *Product]() // want `singleflight.Group is created and used only within this call: every call gets its own registry, so no two callers ever share a load`
	_, _, _ = g.Do(r.Context(), "k", load)
}

// A Cache per call, closed on the way out.
func Lookup(ctx context.Context, id string) (*Product, error) {
	c, err := flightcache.New(flightcache.Options[*Product]{Name: "products"}) // want `flightcache.Cache is created and used only within this call: every call gets an empty cache and its own single-flight registry`
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Get(ctx, id, load)
}

// Zero values and new.
func Zero(ctx context.Context) {
	var g singleflight.Group[string, *Product] // want `singleflight.Group is created and used only within this call`
	_, _, _ = g.Do(ctx, "k", load)
	h := &singleflight.Group[string, *Product]{} // want `singleflight.Group is created`
	_, _, _ = h.Do(ctx, "k", load)
	n := new(singleflight.Group[string, *Product]) // want `singleflight.Group is created`
	_, _, _ = n.Do(ctx, "k", load)
}

// A Cache built only to check its options and closed loads nothing.
func Validate(opts flightcache.Options[*Product]) error {
	c, err := flightcache.New(opts)
	if err != nil {
		return err
	}
	return c.Close()
}

// A chained call on the constructor.
func Chained(ctx context.Context) {
	_, _, _ = singleflight.New[string, *Product]().Do(ctx, "k", load) // want `singleflight.Group is created`
}

// A handler literal is a function of its own.
func Routes(mux *web.ServeMux) {
	mux.HandleFunc("/p", func(w web.ResponseWriter, r *web.Request) {
		g := singleflight.New[string, *Product]() // want `singleflight.Group is created`
		_, _, _ = g.Do(r.Context(), "k", load)
	})
}

// Negatives: each of these outlives the call or coalesces within it.

type Server struct {
	group *singleflight.Group[string, *Product]
	cache *flightcache.Cache[*Product]
}

var global = singleflight.New[string, int]()

func NewServer() (*Server, error) {
	c, err := flightcache.New(flightcache.Options[*Product]{})
	if err != nil {
		return nil, err
	}
	s := &Server{cache: c}
	s.group = singleflight.New[string, *Product]()
	return s, nil
}

func Returned() *singleflight.Group[string, int] {
	g := singleflight.New[string, int]()
	g.Forget("warm")
	return g
}

func Passed(ctx context.Context) {
	g := singleflight.New[string, *Product]()
	use(g)
}

func use(*singleflight.Group[string, *Product]) {}

func Stored(s *Server) {
	g := singleflight.New[string, *Product]()
	s.group = g
}

// Goroutines sharing a Group within one call do coalesce.
func FanOut(ctx context.Context, ids []string) {
	g := singleflight.New[string, *Product]()
	done := make(chan struct{}, len(ids))
	for _, id := range ids {
		go func() {
			_, _, _ = g.Do(ctx, id, load)
			done <- struct{}{}
		}()
	}
	for range ids {
		<-done
	}
}

// DoChan calls run concurrently, so duplicate keys in one batch coalesce.
func Batch(ctx context.Context, ids []string) {
	g := singleflight.New[string, *Product]()
	chs := make([]<-chan singleflight.Result[*Product], len(ids))
	for i, id := range ids {
		chs[i] = g.DoChan(ctx, id, load)
	}
	for _, ch := range chs {
		<-ch
	}
}

// go g.Do(...) runs concurrently too.
func GoStmt(ctx context.Context) {
	g := singleflight.New[string, *Product]()
	go g.Do(ctx, "a", load)
	go g.Do(ctx, "a", load)
}

// A method value escapes.
func MethodValue(ctx context.Context) func(string) {
	g := singleflight.New[string, *Product]()
	return g.Forget
}

// Ignored, with a reason.
func Ignored(ctx context.Context) {
	//flightcachevet:ignore a one-shot tool that dedups within one call on purpose
	g := singleflight.New[string, *Product]()
	_, _, _ = g.Do(ctx, "k", load)
}
