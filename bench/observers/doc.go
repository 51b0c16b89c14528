// Package observers holds the benchmarks of the observer adapters side by
// side (none, flightstats, promflight, otelflight), and the test that a
// Cache hit allocates nothing with any of them. It has no code.
package observers
