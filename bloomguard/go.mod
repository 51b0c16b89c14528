module github.com/flightcache/flightcache/bloomguard

go 1.25.0

require (
	github.com/bits-and-blooms/bloom/v3 v3.7.1
	github.com/flightcache/flightcache v0.1.0
)

require github.com/bits-and-blooms/bitset v1.24.2 // indirect

replace github.com/flightcache/flightcache => ..
