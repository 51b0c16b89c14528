// Command chaos tries to break flightcache's cross-instance consistency
// promises under faults: K instances on a private redis-server, readers
// and writers on a few keys, Redis paused, killed, its pub/sub connections
// cut, scripts and PUBLISH refused, the codec panicking, write-backs
// slowed. The instances are in-process Caches in the modes cluster, local
// and nobus, and productd processes (built once per run, sharing a
// PostgreSQL schema of the run's own) in the mode productd, where the
// process leading a load is also killed, or frozen past its lease. Then it
// checks the recorded history against the promised bounds and prints a
// table per mode: fault, operations, violations per invariant, the worst
// staleness. It exits 1 when it found a violation.
//
//	go run ./cmd/chaos
//	go run ./cmd/chaos -duration 60s -instances 4 -seed 7 -json
//	go run ./cmd/chaos -modes productd -duration 40s
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/chaos"
)

func main() {
	fs := flag.NewFlagSet("chaos", flag.ExitOnError)
	duration := fs.Duration("duration", 2*time.Minute, "how long the run lasts, shared by the modes")
	instances := fs.Int("instances", 3, "instances per mode (in mode productd, processes)")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "orders the faults and drives the workload (printed, to repeat a run)")
	asJSON := fs.Bool("json", false, "print the reports as JSON instead of tables")
	quiet := fs.Bool("q", false, "do not print the faults as they are injected")
	modes := fs.String("modes", strings.Join(chaos.Modes, ","), "the modes to run, comma-separated, each on a fresh Redis: "+
		"cluster, local, nobus (in-process Caches) and productd (productd processes, built with go build; SIGKILL and SIGSTOP of the leader too); "+
		"a mode written mode=duration (productd=12s) runs that long, the others share the rest of -duration")
	postgres := fs.String("postgres", chaos.DefaultPostgres, "mode productd: the PostgreSQL database in which a schema of the run's own is the processes' shared origin (a SQLite file if it does not answer)")
	history := fs.String("history", "", "write every mode's recorded operations and faults to this file, as JSON")
	extraSlack := fs.Duration("extra-slack", 0, "added to every time bound on top of the built-in slack, for a run beside other heavy work (make test's short run uses 250ms)")
	_ = fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := chaos.Config{Duration: *duration, Instances: *instances, Seed: *seed, Postgres: *postgres, ExtraSlack: *extraSlack}
	if err := parseModes(*modes, &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if !*quiet {
		cfg.Progress = os.Stderr
	}
	type recorded struct {
		Mode   string        `json:"mode"`
		Ops    []chaos.Op    `json:"ops"`
		Faults []chaos.Fault `json:"faults"`
	}
	var histories []recorded
	if *history != "" {
		cfg.Recorded = func(mode string, ops []chaos.Op, faults []chaos.Fault) {
			histories = append(histories, recorded{mode, ops, faults})
		}
	}
	reports, err := chaos.Run(ctx, cfg)
	if *history != "" && len(histories) > 0 {
		if b, jerr := json.Marshal(histories); jerr == nil {
			jerr = os.WriteFile(*history, b, 0o644)
			if jerr != nil {
				fmt.Fprintln(os.Stderr, jerr)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(reports)
	} else {
		fmt.Printf("seed %d\n\n", *seed)
		err = chaos.WriteText(os.Stdout, reports)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	for _, r := range reports {
		if r.Violations() > 0 {
			os.Exit(1)
		}
	}
}

// parseModes reads -modes into cfg's Modes and ModeDurations.
func parseModes(s string, cfg *chaos.Config) error {
	for m := range strings.SplitSeq(s, ",") {
		name, d, timed := strings.Cut(m, "=")
		cfg.Modes = append(cfg.Modes, name)
		if !timed {
			continue
		}
		v, err := time.ParseDuration(d)
		if err != nil {
			return fmt.Errorf("chaos: -modes %s: %w", m, err)
		}
		if cfg.ModeDurations == nil {
			cfg.ModeDurations = map[string]time.Duration{}
		}
		cfg.ModeDurations[name] = v
	}
	return nil
}
