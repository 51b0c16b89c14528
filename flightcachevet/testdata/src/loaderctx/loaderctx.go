package loaderctx

import (
	"context"
	"time"
	"web"

	"facade"
	"loaderlib"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/singleflight"
)

type Product struct{ Name string }

func fetch(ctx context.Context, id string) (*Product, error) { return &Product{Name: id}, ctx.Err() }

func fetchInt(ctx context.Context, id string) (int, error) { return len(id), ctx.Err() }

func withTrace(ctx context.Context) context.Context { return ctx }

type Server struct {
	cache *flightcache.Cache[*Product]
	group *singleflight.Group[string, *Product]
	ints  *flightcache.Cache[int]
}

// The plain case: the caller's ctx instead of the unnamed parameter.
func (s *Server) Get(ctx context.Context, id string) (*Product, error) {
	return s.cache.Get(ctx, id, func(context.Context) (*Product, error) {
		return fetch(ctx, id) // want `loader passed to Cache.Get uses ctx from the enclosing function instead of its own context parameter: the first caller to leave would cancel the load shared by every waiter`
	})
}

// A Refresh's loader is shared as a Get's is.
func (s *Server) Refresh(ctx context.Context, id string) (*Product, error) {
	return s.cache.Refresh(ctx, id, func(context.Context) (*Product, error) {
		return fetch(ctx, id) // want `loader passed to Cache.Refresh uses ctx from the enclosing function`
	})
}

// A blank parameter gets named.
func (s *Server) Blank(ctx context.Context, id string) (*Product, error) {
	p, _, err := s.group.Do(ctx, id, func(_ context.Context) (*Product, error) {
		return fetch(ctx, id) // want `loader passed to Group.Do uses ctx from the enclosing function`
	})
	return p, err
}

// A named parameter is used; the caller's context has another name.
func (s *Server) Named(reqCtx context.Context, id string) (flightcache.Result[*Product], error) {
	return s.cache.Fetch(reqCtx, id, func(lctx context.Context) (*Product, error) {
		_ = lctx
		return fetch(reqCtx, id) // want `loader passed to Cache.Fetch uses reqCtx from the enclosing function instead of its own context parameter lctx`
	})
}

// The caller's ctx shadowed by a derived one, still outside the loader.
func (s *Server) Shadowed(ctx context.Context, id string) (*Product, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return s.cache.Get(ctx, id, func(lctx context.Context) (*Product, error) {
		_ = lctx
		return fetch(ctx, id) // want `uses ctx from the enclosing function instead of its own context parameter lctx`
	})
}

// The loader's parameter shadows the caller's ctx: correct.
func (s *Server) ShadowOK(ctx context.Context, id string) (*Product, error) {
	return s.cache.Get(ctx, id, func(ctx context.Context) (*Product, error) {
		return fetch(ctx, id)
	})
}

// A context declared inside the loader is not the caller's.
func (s *Server) Inner(ctx context.Context, id string) (*Product, error) {
	return s.cache.Get(ctx, id, func(context.Context) (*Product, error) {
		ctx := context.Background()
		return fetch(ctx, id)
	})
}

// The caller's ctx passed on through a helper inside the loader.
func (s *Server) Helper(ctx context.Context, id string) (*Product, error) {
	return s.cache.Get(ctx, id, func(context.Context) (*Product, error) {
		return fetch(withTrace(ctx), id) // want `loader passed to Cache.Get uses ctx from the enclosing function`
	})
}

// The request's context, through r.Context().
func (s *Server) ServeHTTP(w web.ResponseWriter, r *web.Request) {
	_, _ = s.cache.Get(r.Context(), "k", func(lctx context.Context) (*Product, error) {
		_ = lctx
		return fetch(r.Context(), "k") // want `loader passed to Cache.Get uses r.Context\(\) from the enclosing function`
	})
}

// A loader held in a local variable first.
func (s *Server) Var(ctx context.Context, id string) (*Product, error) {
	load := func(context.Context) (*Product, error) {
		return fetch(ctx, id) // want `loader passed to Cache.Get uses ctx`
	}
	return s.cache.Get(ctx, id, load)
}

// Method values: the parameter type is still flightcache.LoadFunc, and a
// local variable holding g.Do is followed.
func (s *Server) MethodValues(ctx context.Context, id string) {
	get := s.cache.Get
	_, _ = get(ctx, id, func(context.Context) (*Product, error) {
		return fetch(ctx, id) // want `loader passed to Cache.Get uses ctx`
	})
	do := s.group.Do
	_, _, _ = do(ctx, id, func(context.Context) (*Product, error) {
		return fetch(ctx, id) // want `loader passed to Group.Do uses ctx`
	})
	// A method expression.
	_, _, _ = (*singleflight.Group[string, *Product]).Do(s.group, ctx, id, func(context.Context) (*Product, error) {
		return fetch(ctx, id) // want `loader passed to Group.Do uses ctx`
	})
}

// Generic code: Cache[V] and Group[K, V] with type parameters.
func GetAny[V any](ctx context.Context, c *flightcache.Cache[V], g *singleflight.Group[string, V], id string, load func(context.Context, string) (V, error)) {
	_, _ = c.Get(ctx, id, func(context.Context) (V, error) {
		return load(ctx, id) // want `loader passed to Cache.Get uses ctx`
	})
	_ = g.DoChan(ctx, id, func(context.Context) (V, error) {
		return load(ctx, id) // want `loader passed to Group.DoChan uses ctx`
	})
}

// Batch loaders: the other parameter gets a blank name.
func (s *Server) Batch(ctx context.Context, ids []string) {
	_, _ = s.ints.GetMany(ctx, ids, func(context.Context, []string) (map[string]int, error) {
		n, err := fetchInt(ctx, "x") // want `loader passed to Cache.GetMany uses ctx`
		return map[string]int{"x": n}, err
	})
	_ = s.ints.FetchMany(ctx, ids, func(bctx context.Context, keys []string) (map[string]int, error) {
		_ = bctx
		n, err := fetchInt(ctx, keys[0]) // want `loader passed to Cache.FetchMany uses ctx`
		return map[string]int{keys[0]: n}, err
	})
}

// Aliases through a façade: a generic alias, an instantiated alias, an
// embedded Group.
func Facade(ctx context.Context, g *facade.Group[string, int], pg *facade.ProductGroup, pc *facade.ProductCache, l facade.Loader) {
	_, _, _ = g.Do(ctx, "k", func(context.Context) (int, error) {
		return fetchInt(ctx, "k") // want `loader passed to Group.Do uses ctx`
	})
	_, _, _ = pg.Do(ctx, "k", func(context.Context) (*facade.Product, error) {
		_, err := fetchInt(ctx, "k") // want `loader passed to Group.Do uses ctx`
		return nil, err
	})
	_, _ = pc.Get(ctx, "k", func(context.Context) (*facade.Product, error) {
		_, err := fetchInt(ctx, "k") // want `loader passed to Cache.Get uses ctx`
		return nil, err
	})
	_, _, _ = l.Do(ctx, "k", func(context.Context) (*facade.Product, error) {
		_, err := fetchInt(ctx, "k") // want `loader passed to Group.Do uses ctx`
		return nil, err
	})
}

// A goroutine inside the loader still uses the caller's ctx.
func (s *Server) Nested(ctx context.Context, id string) (*Product, error) {
	return s.cache.Get(ctx, id, func(lctx context.Context) (*Product, error) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = fetch(ctx, id) // want `uses ctx from the enclosing function instead of its own context parameter lctx`
		}()
		<-done
		return fetch(lctx, id)
	})
}

// A loader inside a loader must use its own context, not the outer
// loader's.
func (s *Server) LoaderInLoader(ctx context.Context, id string) (*Product, error) {
	return s.cache.Get(ctx, id, func(outer context.Context) (*Product, error) {
		n, err := s.ints.Get(outer, id, func(context.Context) (int, error) {
			return fetchInt(outer, id) // want `loader passed to Cache.Get uses outer from the enclosing function`
		})
		_ = n
		return nil, err
	})
}

// Loader factories, in this package and in another: reported at the
// context argument they capture.
func byID(ctx context.Context, id string) flightcache.LoadFunc[*Product] { // want byID:`loaderFactory\[0\]`
	return func(context.Context) (*Product, error) { return fetch(ctx, id) }
}

func (s *Server) Factories(ctx context.Context, id string) {
	_, _ = s.cache.Get(ctx, id, byID(ctx, id))                 // want `the loader returned by byID uses ctx, passed here, instead of its own context parameter`
	_, _ = s.ints.Get(ctx, id, loaderlib.ByID(ctx, id))        // want `the loader returned by ByID uses ctx, passed here`
	_, _ = s.ints.Get(ctx, id, loaderlib.Good(ctx, id))        // a factory whose loader uses its own context
	_, _, _ = singleflight.New[string, int]().Do(ctx, id, nil) // no loader at all
}

// The fix must not name the parameter ctx when ctx means something else in
// the loader: here it is a string, so there is no fix.
func (s *Server) NoFix(w web.ResponseWriter, r *web.Request) {
	ctx := "label"
	_, _ = s.cache.Get(r.Context(), "k", func(context.Context) (*Product, error) {
		_ = ctx
		return fetch(r.Context(), "k") // want `loader passed to Cache.Get uses r.Context\(\) from the enclosing function`
	})
}

// Uses of the loader's own context are fine, as are loaders that need none.
func (s *Server) Fine(ctx context.Context, id string) {
	_, _ = s.cache.Get(ctx, id, func(ctx context.Context) (*Product, error) { return fetch(ctx, id) })
	_, _ = s.ints.Get(ctx, id, func(context.Context) (int, error) { return 42, nil })
	_, _, _ = s.group.Do(ctx, id, func(lctx context.Context) (*Product, error) { return fetch(lctx, id) })
}

// Ignored, with a reason.
func (s *Server) Ignored(ctx context.Context, id string) (*Product, error) {
	return s.cache.Get(ctx, id, func(context.Context) (*Product, error) {
		//flightcachevet:ignore the test suite cancels the leader on purpose
		return fetch(ctx, id)
	})
}
