package chaos

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
)

// chaosDuration turns the full run on: go test -run TestChaosFindsNoViolations
// ./cmd/internal/chaos -chaos 60s (make chaos runs cmd/chaos instead).
var chaosDuration = flag.Duration("chaos", 0, "run TestChaosFindsNoViolations for this long (all modes together)")

// run is Run, failing (under CI) or skipping the test without redis-server.
func run(t *testing.T, cfg Config) []Report {
	t.Helper()
	reports, _ := runProgress(t, cfg)
	return reports
}

// runProgress is run, also returning what the run wrote on Progress.
func runProgress(t *testing.T, cfg Config) ([]Report, string) {
	t.Helper()
	var progress strings.Builder
	cfg.Progress = &progress
	reports, err := Run(context.Background(), cfg)
	if errors.Is(err, ErrNoRedisServer) {
		testenv.Unavailable(t, "the chaos run needs a redis-server binary", err)
	}
	if errors.Is(err, ErrNoGo) {
		testenv.Unavailable(t, "the productd mode builds productd with the go command", err)
	}
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}
	var out strings.Builder
	if err := WriteText(&out, reports); err != nil {
		t.Fatal(err)
	}
	t.Logf("faults:\n%s\n%s", progress.String(), out.String())
	return reports, progress.String()
}

// A short run goes through the whole machinery: a private Redis, the
// instances, the workload, a fault, the check. What it finds is the long
// run's business; here every read and write is recorded and checked, and
// TestMain's goleak sees that nothing outlives the run.
func TestRunRecordsAndChecksEveryOperationOfAMode(t *testing.T) {
	start := time.Now()
	reports := run(t, Config{Duration: 3 * time.Second, Instances: 2, Modes: []string{ModeCluster}, Seed: 1})
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("a 3s run took %v", took)
	}
	if len(reports) != 1 || reports[0].Mode != ModeCluster {
		t.Fatalf("reports %+v, want one for %s", reports, ModeCluster)
	}
	r := reports[0]
	// Hundreds on a quiet host; a host busy with other suites, and a
	// workload where one read in four is a batch that a fault can hold up
	// for a shared timeout, records fewer. Dozens still show that every
	// instance's reads and writes reach the history.
	if r.Total.Ops < 20 {
		t.Errorf("%d operations recorded in 3s, want at least dozens", r.Total.Ops)
	}
	if len(r.Rows) < 2 || r.Rows[0].Fault != noFault {
		t.Errorf("rows %v: want %q and then the fault injected at %v", r.Rows, noFault, firstFault)
	}
	if r.Bounds != BoundsFor(ModeCluster) {
		t.Errorf("bounds %+v, want %+v", r.Bounds, BoundsFor(ModeCluster))
	}
}

// The promises hold under every fault, in every mode: zero violations
// over a run of -chaos (60s in make's target).
func TestChaosFindsNoViolations(t *testing.T) {
	if *chaosDuration == 0 {
		t.Skip("the chaos run is long: ask for it with -chaos 60s")
	}
	for _, r := range run(t, Config{Duration: *chaosDuration, Seed: uint64(time.Now().UnixNano())}) {
		if n := r.Violations(); n > 0 {
			t.Errorf("mode %s: %d violations (table above)", r.Mode, n)
		}
	}
}
