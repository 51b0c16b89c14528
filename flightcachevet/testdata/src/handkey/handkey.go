package handkey

import (
	"context"
	"fmt"
	"strings"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/key"
	"github.com/flightcache/flightcache/singleflight"
)

type Product struct{ Name string }

func load(context.Context) (*Product, error) { return &Product{}, nil }

type Server struct {
	cache *flightcache.Cache[*Product]
	group *singleflight.Group[string, *Product]
	byID  *singleflight.Group[int, *Product]
}

const prefix = "product:"

var productKey = key.New("product")

func (s *Server) Positives(ctx context.Context, tenant, id string, parts []string) {
	_, _ = s.cache.Get(ctx, fmt.Sprintf("product:%s", id), load)    // want `cache key built by hand with fmt.Sprintf: build it with package key`
	_, _ = s.cache.Fetch(ctx, "product:"+tenant+":"+id, load)       // want `cache key built by hand with \+`
	_ = s.cache.Set(ctx, strings.Join(parts, ":"), &Product{})      // want `cache key built by hand with strings.Join`
	_ = s.cache.Delete(ctx, prefix+id)                              // want `cache key built by hand with \+`
	_, _, _ = s.group.Do(ctx, "p/"+id, load)                        // want `cache key built by hand with \+`
	_ = s.group.DoChan(ctx, fmt.Sprintf("%s/%s", tenant, id), load) // want `cache key built by hand with fmt.Sprintf`
	s.group.Forget("p/" + id)                                       // want `cache key built by hand with \+`
	_, _ = s.cache.Refresh(ctx, "product:"+id, load)                // want `cache key built by hand with \+`
	_, _ = s.cache.Peek(ctx, "product:"+id)                         // want `cache key built by hand with \+`
	k := fmt.Sprintf("product:%s", id)
	_, _ = s.cache.Get(ctx, k, load) // want `cache key built by hand with fmt.Sprintf \(line 37\)`
}

func (s *Server) Negatives(ctx context.Context, tenant, id string, n int) error {
	k, err := productKey.Tenant(tenant).ID(id).Build()
	if err != nil {
		return err
	}
	_, _ = s.cache.Get(ctx, k, load)
	_, _ = s.cache.Get(ctx, id, load)                      // a plain identifier
	_, _ = s.cache.Get(ctx, prefix+"all", load)            // a constant
	_, _ = s.cache.Get(ctx, fmt.Sprintf("constant"), load) // no arguments to format
	_, _, _ = s.byID.Do(ctx, n+1, load)                    // not a string key
	k2 := "p/" + id
	k2 = "q/" + id // assigned twice: not followed
	_, _ = s.cache.Get(ctx, k2, load)
	_ = s.cache.InvalidatePrefix(ctx, "product:"+tenant) // prefixes are not keys
	return nil
}

func (s *Server) Ignored(ctx context.Context, id string) {
	//flightcachevet:ignore the legacy key format, kept until the migration ends
	_, _ = s.cache.Get(ctx, "legacy:"+id, load)
	_, _ = s.cache.Get(ctx, "legacy:"+id, load) //flightcachevet:ignore same, on the line itself
	//flightcachevet:ignore
	_, _ = s.cache.Get(ctx, "legacy:"+id, load) // want `cache key built by hand with \+`
}
