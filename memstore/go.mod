module github.com/flightcache/flightcache/memstore

go 1.25.0

require (
	github.com/flightcache/flightcache v0.1.0
	github.com/maypok86/otter/v2 v2.4.0
)

replace github.com/flightcache/flightcache => ..
