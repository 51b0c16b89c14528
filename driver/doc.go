// Package driver holds the contracts between a flightcache.Cache and the
// parts plugged into it, as database/sql/driver does for database/sql.
// People who use a Cache need only package flightcache; people who
// implement a part import this package:
//
//   - tiers: LocalStore (typed, in-process; memstore), SharedStore and
//     BatchSharedStore (bytes, shared; redisstore), with their Item, Entry,
//     Meta and Lookup, a Codec between the two, and a SharedBreaker;
//   - cluster mode: Coordinator, Grant and Lease, and BatchCoordinator
//     with its BatchGrant for batches (redislease);
//   - cross-instance invalidation: Bus, BusHandler and Invalidation
//     (redislease);
//   - penetration: Guard (bloomguard);
//   - observation: Observer, Event, Tracer and SpanInfo (promflight,
//     otelflight, flightstats), and the Outcome, Scope and Tier they report.
//
// In the doc comments here, Cache, Options, Result and the Err variables
// without a package name are those of package flightcache.
//
// The vocabulary, each word once: an Item is what a LocalStore holds (a
// typed value and its Meta); an Entry is what a SharedStore holds (the
// Codec's bytes and the same Meta); a Lookup is one key's answer from
// BatchSharedStore.GetMany; a Grant is Coordinator.Claim's answer, which
// carries a Lease when this instance must load; a BatchGrant is one key's
// answer from BatchCoordinator.ClaimMany.
//
// This package imports only the standard library.
package driver
