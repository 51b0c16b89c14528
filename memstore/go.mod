module github.com/flightcache/flightcache/memstore

go 1.25.0

require (
	github.com/flightcache/flightcache v0.0.0-00010101000000-000000000000
	github.com/maypok86/otter/v2 v2.4.0
)

replace github.com/flightcache/flightcache => ..
