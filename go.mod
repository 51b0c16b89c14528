module github.com/flightcache/flightcache

go 1.25.0
