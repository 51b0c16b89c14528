// Package flightcachevet holds go/analysis analyzers that catch, in source,
// the mistakes that defeat single-flight loading before they ship. The
// command flightcachevet/cmd/flightcachevet (a module of its own with this
// package) runs them, standalone or as a vet tool:
//
//	go install github.com/flightcache/flightcache/flightcachevet/cmd/flightcachevet@latest
//	go vet -vettool=$(which flightcachevet) ./...
//
// The checks, each its own analyzer:
//
//   - loaderctx (LoaderCtx): a loader literal passed to Cache.Get, Fetch,
//     GetMany, FetchMany, Refresh or Group.Do, DoChan that uses the caller's
//     context from the enclosing function instead of its own parameter.
//     The first caller to leave would then cancel the load shared by every
//     waiter. A suggested fix uses the parameter.
//   - shortlived (ShortLived): a Cache or Group created inside a function,
//     used there and dropped, which coalesces nothing. Tests and func main
//     are exempt.
//   - mutatehit (MutateHit): a write through a pointer, map or slice that
//     Get, Fetch, Refresh or Peek returned from a Cache provably built without
//     Options.Clone, which changes the value every other caller shares.
//   - handkey (HandKey): a key built at the call site with fmt.Sprintf,
//     strings.Join or +, where package key would name every dimension.
//     Off by default; the command's -handkey flag turns it on.
//   - directive (Directive): a //flightcachevet:ignore comment without a
//     reason.
//
// Any finding is silenced by a comment //flightcachevet:ignore <reason> on
// its line or the line before; the reason is required.
//
// # What is identified, and how
//
// Functions and methods are identified by the package that declares them
// and the name of their receiver's type, after resolving instantiations
// (Cache[*Product].Get is Cache[V].Get) and aliases (a user's type
// ProductGroup = singleflight.Group[string, *Product], a generic alias, or
// singleflight's own aliases of its engine's types, internal/flightgroup).
// A loader is recognised by the parameter it is passed to: any parameter of
// type flightcache.LoadFunc or BatchLoadFunc (so through method values and
// interfaces as well), and the fn of Group.Do and DoChan, including through
// a local variable holding the method value (do := g.Do).
//
// # Why mutatehit is conservative
//
// Whether a value is shared depends on Options.Clone, which belongs to the
// Cache, not to the call: at a Get the analyzer usually cannot know how the
// Cache it reads was built. mutatehit therefore reports only when the
// construction is visible in the same package and provably leaves Clone
// unset, and when the write is plainly through the returned value. It
// misses the rest (a Cache passed in as a parameter, options built
// elsewhere, writes through methods) rather than guess; see MutateHit.
package flightcachevet

import "golang.org/x/tools/go/analysis"

// Analyzers are the checks that the flightcachevet command runs by default:
// every one but HandKey.
var Analyzers = []*analysis.Analyzer{LoaderCtx, ShortLived, MutateHit, Directive}
