module github.com/flightcache/flightcache/httpflight

go 1.26.0

require github.com/flightcache/flightcache v0.1.0

replace github.com/flightcache/flightcache => ..
