// Package facade re-exports flightcache's types under its own names, as a
// service's internal package might: aliases, a generic alias, an embedding.
package facade

import (
	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/singleflight"
)

type Product struct{ Name string }

// Group is a generic alias of singleflight.Group.
type Group[K comparable, V any] = singleflight.Group[K, V]

// ProductGroup is an alias of one instantiation.
type ProductGroup = singleflight.Group[string, *Product]

// ProductCache is an alias of one instantiation of Cache.
type ProductCache = flightcache.Cache[*Product]

// Loader embeds a Group: its Do is promoted.
type Loader struct {
	*singleflight.Group[string, *Product]
}
