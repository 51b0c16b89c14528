package mutatehit

import (
	"context"

	"github.com/flightcache/flightcache"
)

type Product struct {
	Name  string
	Views int
	Tags  []string
	Attrs map[string]string
	Inner struct{ N int }
}

func load(context.Context) (*Product, error) { return &Product{}, nil }

func loadMap(context.Context) (map[string]int, error) { return map[string]int{}, nil }

func loadValue(context.Context) (Product, error) { return Product{}, nil }

func cloneProduct(p *Product) *Product { c := *p; return &c }

type Server struct {
	products *flightcache.Cache[*Product]            // built without Clone
	cloned   *flightcache.Cache[*Product]            // built with Clone
	counts   *flightcache.Cache[map[string]int]      // built without Clone
	values   *flightcache.Cache[Product]             // V is not a pointer
	given    *flightcache.Cache[*Product]            // assigned from outside
	Exported *flightcache.Cache[*Product]            // other packages may assign it
	viaOpts  *flightcache.Cache[*Product]            // options in a variable, no Clone
	setLater *flightcache.Cache[*Product]            // options in a variable, Clone set later
	cloneNil *flightcache.Cache[*Product]            // Clone: nil is no Clone
	_        *flightcache.Cache[map[string]struct{}] // unused
}

func NewServer(given *flightcache.Cache[*Product]) (*Server, error) {
	s := &Server{given: given}
	var err error
	s.products, err = flightcache.New(flightcache.Options[*Product]{Name: "products"})
	if err != nil {
		return nil, err
	}
	cloned, err := flightcache.New(flightcache.Options[*Product]{Name: "cloned", Clone: cloneProduct})
	if err != nil {
		return nil, err
	}
	s.cloned = cloned
	counts, err := flightcache.New(flightcache.Options[map[string]int]{})
	if err != nil {
		return nil, err
	}
	s.counts = counts
	s.values, _ = flightcache.New(flightcache.Options[Product]{})
	s.Exported, _ = flightcache.New(flightcache.Options[*Product]{})
	opts := flightcache.Options[*Product]{Name: "via"}
	s.viaOpts, _ = flightcache.New(opts)
	s.cloneNil, _ = flightcache.New(flightcache.Options[*Product]{Clone: nil})
	return s, nil
}

func (s *Server) Writes(ctx context.Context, id string) error {
	p, err := s.products.Get(ctx, id, load)
	if err != nil {
		return err
	}
	p.Views++                      // want `write through the value Get returned: without Options.Clone the Cache hands this same value to every caller of the key and may keep it in its local tier; copy it before changing it, or set Options.Clone`
	p.Name = "x"                   // want `write through the value Get returned`
	p.Tags = append(p.Tags, "new") // want `write through the value Get returned`
	p.Attrs["k"] = "v"             // want `write through the value Get returned`
	p.Inner.N = 2                  // want `write through the value Get returned`
	*p = Product{}                 // want `write through the value Get returned`
	delete(p.Attrs, "k")           // want `write through the value Get returned`

	res, err := s.products.Fetch(ctx, id, load)
	if err != nil {
		return err
	}
	res.Value.Views += 2 // want `write through the value Fetch returned`
	if fresh, err := s.products.Refresh(ctx, id, load); err == nil {
		fresh.Views = 0 // want `write through the value Refresh returned`
	}
	if held, ok := s.products.Peek(ctx, id); ok {
		held.Views = 0 // want `write through the value Peek returned`
	}
	v := res.Value
	v.Name = "y" // want `write through the value Fetch returned`
	res.Age = 0  // the Result is the caller's own copy

	m, _ := s.counts.Get(ctx, id, loadMap)
	m["hits"]++ // want `write through the value Get returned`
	clear(m)    // want `write through the value Get returned`
	q, _ := s.viaOpts.Get(ctx, id, load)
	q.Views = 1 // want `write through the value Get returned`
	r, _ := s.cloneNil.Get(ctx, id, load)
	r.Views = 1 // want `write through the value Get returned`
	return nil
}

// Every one of these is either the caller's own copy or not provably
// shared, so nothing is reported.
func (s *Server) Fine(ctx context.Context, id string, param *flightcache.Cache[*Product]) {
	p, _ := s.cloned.Get(ctx, id, load) // Clone set: each caller has a copy
	p.Views++
	pv, _ := s.values.Get(ctx, id, loadValue) // V is a struct: a copy
	pv.Views++
	g, _ := s.given.Get(ctx, id, load) // built elsewhere
	g.Views++
	e, _ := s.Exported.Get(ctx, id, load) // exported: maybe assigned elsewhere
	e.Views++
	x, _ := param.Get(ctx, id, load) // a parameter
	x.Views++
	l, _ := s.setLater.Get(ctx, id, load) // options whose Clone is assigned
	l.Views++
	c, _ := s.products.Get(ctx, id, load)
	cp := *c // a copy, then changed
	cp.Views++
	r, _ := s.products.Get(ctx, id, load)
	r = cloneProduct(r) // reassigned: not followed
	r.Views++
}

func (s *Server) Later() {
	opts := flightcache.Options[*Product]{}
	opts.Clone = cloneProduct
	s.setLater, _ = flightcache.New(opts)
}

// A local Cache in one function.
func Local(ctx context.Context) {
	c, _ := flightcache.New(flightcache.Options[*Product]{})
	p, _ := c.Get(ctx, "k", load)
	p.Name = "changed" //flightcachevet:ignore the value is never handed to another caller in this test
}
