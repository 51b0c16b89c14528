// Command flightproxy is a caching reverse proxy on httpflight: a shared
// HTTP cache (RFC 9111) in front of one upstream that collapses the
// requests that miss together into one upstream request, on this process
// or, with -redis, across every flightproxy sharing that Redis.
//
//	go build -o flightproxy ./cmd/flightproxy
//	./flightproxy -upstream http://127.0.0.1:9000                   # on 127.0.0.1:8080, in memory
//	./flightproxy -upstream http://127.0.0.1:9000 -redis redis://127.0.0.1:6379/0 -listen :8081
//	./flightproxy -h                                                # every flag
//
// It stops gracefully on SIGINT or SIGTERM. Run the built binary rather
// than go run, which does not pass SIGTERM on.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/flightcache/flightcache/cmd/internal/flightproxy"
)

func main() {
	cfg, err := flightproxy.ParseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := flightproxy.Run(ctx, cfg, log); err != nil {
		log.Error("flightproxy failed", "error", err)
		os.Exit(1)
	}
}
