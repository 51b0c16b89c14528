// Package singleflight holds the benchmarks of package
// github.com/flightcache/flightcache/singleflight side by side with
// golang.org/x/sync/singleflight and resenje.org/singleflight. It has no
// code.
package singleflight
