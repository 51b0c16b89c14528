module github.com/flightcache/flightcache/httpflight

go 1.26.0

require github.com/flightcache/flightcache v0.0.0-00010101000000-000000000000

replace github.com/flightcache/flightcache => ..
