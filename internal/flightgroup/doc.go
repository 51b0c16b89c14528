// Package flightgroup is the single-flight engine behind package
// singleflight and the root flightcache.Cache: it collapses concurrent calls
// for the same key into one execution whose result every caller shares.
//
// Package singleflight is its public face, a thin wrapper with a fixed API
// that other code depends on; its documentation describes the behaviour in
// full, and this package's types are the same types (singleflight declares
// aliases of them). The engine lives here, out of reach of importers, so
// that the Cache can use primitives that are not part of that public API
// without widening it: Start and StartMany, with which a batch registers or
// joins each key's execution, learning at once which keys it leads, loads
// those itself in one call and delivers them with Flight.Complete;
// LoadContext, the origin call's own deadline inside an execution, whose
// cancel (the origin has answered) releases the execution from the loader
// timeout before the result is written back; and StopTimeout, which
// releases an execution by hand (a batch's other keys).
//
// Error strings and panic messages name package singleflight, since that
// is the name users see.
package flightgroup
