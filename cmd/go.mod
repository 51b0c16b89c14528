module github.com/flightcache/flightcache/cmd

go 1.26.0

require (
	github.com/flightcache/flightcache v0.1.0
	github.com/flightcache/flightcache/bloomguard v0.1.0
	github.com/flightcache/flightcache/breaker v0.1.0
	github.com/flightcache/flightcache/memstore v0.1.0
	github.com/flightcache/flightcache/promflight v0.1.0
	github.com/flightcache/flightcache/redislease v0.1.0
	github.com/flightcache/flightcache/redisstore v0.1.0
	github.com/jackc/pgx/v5 v5.13.0
	github.com/prometheus/client_golang v1.25.0
	github.com/redis/go-redis/v9 v9.23.0
	go.uber.org/goleak v1.3.0
	google.golang.org/grpc v1.85.0
	modernc.org/sqlite v1.62.0
)

require (
	golang.org/x/net v0.61.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/bits-and-blooms/bitset v1.24.2 // indirect
	github.com/bits-and-blooms/bloom/v3 v3.7.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/flightcache/flightcache/grpcflight v0.1.0
	github.com/flightcache/flightcache/httpflight v0.1.0
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/maypok86/otter/v2 v2.4.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/ncruces/go-strftime v1.1.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	google.golang.org/protobuf v1.36.12
	modernc.org/libc v1.80.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
)

replace (
	github.com/flightcache/flightcache => ..
	github.com/flightcache/flightcache/bloomguard => ../bloomguard
	github.com/flightcache/flightcache/breaker => ../breaker
	github.com/flightcache/flightcache/memstore => ../memstore
	github.com/flightcache/flightcache/promflight => ../promflight
	github.com/flightcache/flightcache/redislease => ../redislease
	github.com/flightcache/flightcache/redisstore => ../redisstore
)

replace github.com/flightcache/flightcache/httpflight => ../httpflight

replace github.com/flightcache/flightcache/grpcflight => ../grpcflight
