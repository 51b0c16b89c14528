// Command stampede shows the cache stampede and its cure in numbers. With
// no arguments it starts productd in-process on loopback (SQLite in a
// temporary directory, memory tier, 100ms origin latency), lets the hot
// product's entry expire, fires 1,000 concurrent requests at it in each
// mode (naive cache-aside, flightcache, flightcache with early refresh
// under continuous traffic), prints a table and writes an HTML report.
//
//	go run ./cmd/stampede
//	go run ./cmd/stampede -json
//	go run ./cmd/stampede -target http://127.0.0.1:8080,http://127.0.0.1:8081 -mode flightcache
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/flightcache/flightcache/cmd/internal/stampede"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := stampede.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, isTerminal(os.Stderr))
	stop()
	os.Exit(code)
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
