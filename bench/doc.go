// Package bench holds the benchmarks that compare flightcache with its
// peers side by side (otter, sturdyc, go-redis/cache) and the cache's
// benchmarks on Redis. It is a module of its own, so that the peers are
// requirements of this module only, never of the library's; see
// docs/PERFORMANCE.md for the commands and the numbers. It has no code;
// its command perfreport (make perf-report) runs the scaling benchmarks
// (BenchmarkCurve*, here and in bench/singleflight) and charts them.
package bench
