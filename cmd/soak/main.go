// Command soak runs productd for minutes under a steady load and checks
// that it stays healthy: four productd processes in cluster mode on a
// private redis-server and a PostgreSQL schema of the run's own, driven by
// a bounded load generator on loopback (GETs of 100,000 products with Zipf
// popularity, 1% PUTs), with a short TTL and early refresh. It samples
// every process's heap, goroutines and open descriptors, and Redis's
// clients, and checks, after the warm-up, that they stay flat, that origin
// queries stay within one per hot key per TTL, that the GETs' p99 stays
// within its bound, that no request failed, and that the recorded history
// keeps the consistency promises cmd/chaos checks (without faults here).
// It prints a table and exits 1 when a check failed.
//
//	go run ./cmd/soak                 # 2 minutes
//	go run ./cmd/soak -duration 10m -workers 32
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/chaos"
)

func main() {
	fs := flag.NewFlagSet("soak", flag.ExitOnError)
	var cfg chaos.SoakConfig
	fs.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "how long the load runs (at least 10s)")
	fs.DurationVar(&cfg.Warmup, "warmup", 0, "the start of the run the checks leave out (default a quarter of -duration)")
	fs.IntVar(&cfg.Instances, "instances", 4, "productd processes")
	fs.IntVar(&cfg.Products, "products", 100_000, "products in the catalog")
	fs.IntVar(&cfg.Workers, "workers", 16, "requests in flight at most")
	fs.Float64Var(&cfg.PutPercent, "put-percent", 1, "the share of requests that are PUTs, in percent")
	fs.Float64Var(&cfg.Zipf, "zipf", 1.1, "the exponent of the products' Zipf popularity (above 1)")
	fs.DurationVar(&cfg.P99Bound, "p99", 500*time.Millisecond, "the bound on the GETs' 99th percentile latency after the warm-up")
	fs.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()), "drives the load's choices (printed, to repeat a run)")
	fs.StringVar(&cfg.Postgres, "postgres", chaos.DefaultPostgres, "the PostgreSQL database in which a schema of the run's own is the origin (a SQLite file if it does not answer)")
	quiet := fs.Bool("q", false, "do not print the resource samples as they are taken")
	asJSON := fs.Bool("json", false, "print the report as JSON instead of a table")
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !*quiet {
		cfg.Progress = os.Stderr
	}
	rep, err := chaos.Soak(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		fmt.Printf("seed %d\n", cfg.Seed)
		err = rep.WriteText(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if !rep.Passed() {
		os.Exit(1)
	}
}
