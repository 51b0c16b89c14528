// Package grpccluster holds the end-to-end test of grpcflight in cluster
// mode: servers whose Caches share the real Redis (redisstore with
// grpcflight.Codec, redislease as the Coordinator) run a herd's handler
// once in the fleet. It lives in the cmd module because grpcflight's own
// module must not require the Redis adapters, not even for a test (Go has
// no test-only requirements; see docs/ARCHITECTURE.md).
package grpccluster
