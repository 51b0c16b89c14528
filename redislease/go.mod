module github.com/flightcache/flightcache/redislease

go 1.26.0

require (
	github.com/flightcache/flightcache v0.1.0
	github.com/flightcache/flightcache/memstore v0.1.0
	github.com/flightcache/flightcache/redisstore v0.1.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/maypok86/otter/v2 v2.4.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace (
	github.com/flightcache/flightcache => ..
	github.com/flightcache/flightcache/memstore => ../memstore
	github.com/flightcache/flightcache/redisstore => ../redisstore
)
