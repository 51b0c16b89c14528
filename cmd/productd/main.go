// Command productd is the flightcache reference service: a product-detail
// HTTP API over SQLite or PostgreSQL with a stampede-proof cache in front.
//
//	go build -o productd ./cmd/productd
//	(umask 077; head -c 32 /dev/urandom | base64 > write-token)   # the bearer token of PUTs and POSTs, for its owner only
//	./productd -write-token-file write-token    # SQLite file productd.db, memory cache, on 127.0.0.1:8080
//	./productd -write-token-file write-token -db 'postgres://postgres@127.0.0.1:5432/productd?sslmode=disable'
//	./productd -write-token-file write-token -redis redis://127.0.0.1:6379/0
//	./productd -writes disabled                 # read-only: no token needed, every write refused
//	./productd -h                               # every flag and PRODUCTD_* variable
//
// Run the built binary rather than go run: go run does not pass SIGTERM on
// to the server, so it would not shut down gracefully. SIGINT and SIGTERM
// drain and stop it; SIGHUP reloads -write-token-file and keeps it
// running.
//
// See docs/productd.md.
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

	"github.com/flightcache/flightcache/cmd/internal/productd"
)

func main() {
	// SIGHUP reloads the write token file (productd.Server.Reload) and
	// never ends the process: caught from the start, so that one arriving
	// while productd starts waits for it instead of killing it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	cfg, err := productd.FromEnvironment()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := cfg.NewLogger(os.Stderr)
	// Process-wide loggers (go-redis' own lines among them) write through
	// slog.Default(): in the same format as the rest.
	slog.SetDefault(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := productd.Run(ctx, cfg, log, hup); err != nil {
		log.Error("productd failed", "error", err)
		os.Exit(1)
	}
}
