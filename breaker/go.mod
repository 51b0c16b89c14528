module github.com/flightcache/flightcache/breaker

go 1.25.0

require (
	github.com/flightcache/flightcache v0.1.0
	github.com/sony/gobreaker/v2 v2.4.0
)

require github.com/stretchr/testify v1.12.1 // indirect

replace github.com/flightcache/flightcache => ..
