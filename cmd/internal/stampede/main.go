package stampede

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Main is the stampede command: it parses args, runs, prints the table (or
// JSON with -json) to stdout and the report's path, and returns the exit
// code. isTerminal says whether stderr is a terminal (for the progress bar).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, isTerminal bool) int {
	return mainWith(ctx, Config{WriteToken: os.Getenv(WriteTokenEnv)}, args, stdout, stderr, isTerminal)
}

// WriteTokenEnv is the environment variable Main reads productd's write
// token from: the -target instances' token, sent with the PUTs that
// invalidate the hot product. Without -target a run makes one up for the
// instances it starts, unless it is set.
const WriteTokenEnv = "PRODUCTD_WRITE_TOKEN"

// mainWith is Main over base, the settings that have no flag (tests seed a
// smaller catalog with it).
func mainWith(ctx context.Context, base Config, args []string, stdout, stderr io.Writer, isTerminal bool) int {
	fs := flag.NewFlagSet("stampede", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// The flag package prints each flag's default, the in-process one;
	// the help names the values -instances and -mode staleness use instead.
	instancesTTL := InstancesTTL.String()
	if StalenessTTL != InstancesTTL {
		instancesTTL += " (" + StalenessTTL.String() + " with -mode staleness)"
	}
	var (
		targets  = fs.String("target", "", "comma-separated base URLs of running productd instances; empty starts productd in-process (SQLite, memory tier)")
		n        = fs.Int("n", DefaultN, "requests per herd")
		conc     = fs.Int("concurrency", 0, fmt.Sprintf("concurrent clients; 0 means -n for a herd and %d for continuous traffic", DefaultWorkers))
		key      = fs.String("key", DefaultKey, "hot product: tenant/id[?locale=…&currency=…]")
		modes    = fs.String("mode", strings.Join(AllModes, ","), "comma-separated modes: naive, flightcache, early-refresh; penetration (or penetration-naive, penetration-negative, penetration-guard): -n distinct ids that do not exist; with -instances: local, cluster (default both), or staleness alone (see below)")
		duration = fs.Duration("duration", DefaultDuration, "length of the continuous traffic of early-refresh mode")
		latency  = fs.Duration("origin-latency", DefaultOriginLatency, fmt.Sprintf("delay of each origin query, for -instances %v unless set (%v with -mode staleness) and for the in-process productd", InstancesOriginLatency, StalenessOriginLatency))
		ttl      = fs.Duration("ttl", DefaultTTL, "cache TTL (the herd arrives right after it expires or, when that is more than 15s away, right after an update of another variant of the product invalidated it on every instance), for -instances "+instancesTTL+" unless set and for the in-process productd")
		asJSON   = fs.Bool("json", false, "print machine-readable results on stdout")
		report   = fs.String("report", filepath.Join(os.TempDir(), "stampede-report.html"), "where to write the HTML report; empty: no report")
		inst     = fs.Int("instances", 0, "start this many productd processes (built from this module) sharing -redis and one database, spread the herd over them, and compare -mode local (coalescing per process) against cluster (across them)")
		redisURL = fs.String("redis", "", "with -instances: redis:// URL the instances share (required)")
		db       = fs.String("db", "", "with -instances: origin database of the instances (productd -db); empty: a SQLite file in a temporary directory")
		iflags   = fs.String("instance-flags", "", "with -instances: more productd flags, space-separated, after the run's own (a later flag wins), e.g. \"-redis-timeout 250ms -bus-down-after 0\" to measure productd's defaults on a busy host")
		batch    = fs.Bool("batch", false, "run the batch herd instead: -batches concurrent cold batch requests of -batch-size ids drawn from -batch-pool ids, naive against flightcache (in-process productd only)")
		batches  = fs.Int("batches", 50, "batch herd: concurrent batch requests")
		bsize    = fs.Int("batch-size", 100, "batch herd: ids per request (at most 100)")
		bpool    = fs.Int("batch-pool", 200, "batch herd: distinct ids the requests draw from")
		rounds   = fs.Int("rounds", DefaultRounds, "-mode staleness: writes to measure")
		stimeout = fs.Duration("staleness-timeout", DefaultStalenessTimeout, "-mode staleness: how long a round polls the other instances for the new value")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "stampede: fire a herd of concurrent requests at one hot product and count origin queries.\n\n"+
			"Usage: stampede [flags]\n\nWith no flags it starts productd in-process and compares naive cache-aside,\n"+
			"flightcache, and flightcache with early refresh.\n\n"+
			"-instances K -redis URL -mode staleness measures the staleness window instead:\n"+
			"K productd processes share one Redis and one database (-ttl defaults to 5m\n"+
			"here, so no cached copy expires during the run). Each of -rounds rounds makes\n"+
			"the product hot in every instance's memory tier, PUTs a new price on\n"+
			"instance 0 and polls the other instances back to back until each serves it\n"+
			"(or -staleness-timeout passes). It reports how long that took, how many old\n"+
			"answers came after the PUT, and whether an instance went back to an older\n"+
			"price; the report plots every round. The price is put back at the end.\n\n"+
			"  stampede -instances 3 -redis redis://127.0.0.1:6379 -mode staleness\n\n"+
			"With -target, the PUTs that invalidate the hot product carry the targets' write\n"+
			"token from the environment variable "+WriteTokenEnv+" (productd -write-token).\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *batch {
		fmt.Fprintf(stderr, "stampede: batch herd: %d batches of %d ids, in-process productd per mode\n", *batches, *bsize)
		return runBatchMain(ctx, BatchConfig{Batches: *batches, Size: *bsize, Pool: *bpool, Catalog: base.Catalog, OriginLatency: *latency}, *asJSON, stdout, stderr)
	}
	if *n < 1 {
		fmt.Fprintln(stderr, "stampede: -n must be at least 1")
		return 1
	}
	cfg := base
	cfg.Log = stderr
	cfg.N, cfg.Concurrency, cfg.Key, cfg.Duration = *n, *conc, *key, *duration
	cfg.OriginLatency, cfg.TTL = *latency, *ttl
	cfg.Instances, cfg.Redis, cfg.DB = *inst, *redisURL, *db
	cfg.InstanceFlags = strings.Fields(*iflags)
	cfg.Rounds, cfg.StalenessTimeout = *rounds, *stimeout
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["mode"] {
		*modes = "" // the default modes of cfg.fill, which depend on -instances
	}
	if *inst > 0 && !set["origin-latency"] {
		// A herd spread over several processes takes longer to send; a
		// slower origin keeps it a herd (see Validate).
		cfg.OriginLatency = InstancesOriginLatency
	}
	if *inst > 0 && !set["ttl"] {
		cfg.TTL = InstancesTTL
	}
	if strings.TrimSpace(*modes) == ModeStaleness {
		if !set["origin-latency"] {
			cfg.OriginLatency = StalenessOriginLatency
		}
		if !set["ttl"] {
			cfg.TTL = StalenessTTL
		}
		if isTerminal {
			cfg.Progress = stderr
		}
		return runStalenessMain(ctx, cfg, *asJSON, *report, stdout, stderr)
	}
	if *targets != "" {
		for _, t := range strings.Split(*targets, ",") {
			cfg.Targets = append(cfg.Targets, strings.TrimRight(strings.TrimSpace(t), "/"))
		}
	}
	for _, m := range strings.Split(*modes, ",") {
		if m = strings.TrimSpace(m); m != "" {
			cfg.Modes = append(cfg.Modes, m)
		}
	}
	if isTerminal {
		cfg.Progress = stderr
	}
	began := time.Now()
	results, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	// The validity check: in-process, the origin latency is the flag's;
	// against remote targets it is unknown.
	knownLatency := cfg.OriginLatency
	if len(cfg.Targets) > 0 {
		knownLatency = 0
	}
	warnings := Validate(results, knownLatency)
	if *asJSON {
		err = WriteJSON(stdout, results)
		for _, w := range warnings { // the table prints them itself
			fmt.Fprintln(stderr, "WARNING: "+w)
		}
	} else {
		err = WriteTable(stdout, results)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *report != "" {
		where := "in-process productd (SQLite, memory tier)"
		switch {
		case cfg.Instances > 0:
			origin := "a shared SQLite file"
			if cfg.DB != "" {
				origin = "a shared database"
			}
			where = fmt.Sprintf("%d productd processes per mode, sharing one Redis and %s", cfg.Instances, origin)
		case len(cfg.Targets) > 0:
			where = strings.Join(cfg.Targets, ", ")
		}
		note := fmt.Sprintf("%s; herd of %d; run of %s finished %s", where, cfg.N, time.Since(began).Round(time.Millisecond), time.Now().Format(time.RFC3339))
		if err := writeReportFile(*report, results, ReportInfo{Note: note, OriginLatency: knownLatency}); err != nil {
			fmt.Fprintln(stderr, "stampede: report:", err)
			return 1
		}
		out := stdout
		if *asJSON {
			out = stderr // keep stdout pure JSON
		}
		fmt.Fprintf(out, "\nreport: %s\n", *report)
	}
	return 0
}

// runBatchMain is Main for -batch: the batch herd, as a table or JSON.
func runBatchMain(ctx context.Context, cfg BatchConfig, asJSON bool, stdout, stderr io.Writer) int {
	results, err := RunBatch(ctx, cfg)
	if err == nil {
		if asJSON {
			err = json.NewEncoder(stdout).Encode(struct{ Results []BatchResult }{results})
		} else {
			err = WriteBatchTable(stdout, results)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// runStalenessMain is Main for -mode staleness: the rounds as a table or
// JSON, and the report.
func runStalenessMain(ctx context.Context, cfg Config, asJSON bool, report string, stdout, stderr io.Writer) int {
	began := time.Now()
	res, err := RunStaleness(ctx, cfg)
	if err == nil {
		if asJSON {
			err = WriteStalenessJSON(stdout, res)
			for _, w := range res.Warnings { // the table prints them itself
				fmt.Fprintln(stderr, "WARNING: "+w)
			}
		} else {
			err = WriteStalenessTable(stdout, res)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if report == "" {
		return 0
	}
	origin := "a shared SQLite file"
	if cfg.DB != "" {
		origin = "a shared database"
	}
	note := fmt.Sprintf("%d productd processes sharing one Redis and %s; %d rounds; run of %s finished %s",
		cfg.Instances, origin, len(res.Rounds), time.Since(began).Round(time.Millisecond), time.Now().Format(time.RFC3339))
	if err := writeReportFile(report, nil, ReportInfo{Note: note, Staleness: res}); err != nil {
		fmt.Fprintln(stderr, "stampede: report:", err)
		return 1
	}
	out := stdout
	if asJSON {
		out = stderr // keep stdout pure JSON
	}
	fmt.Fprintf(out, "\nreport: %s\n", report)
	return 0
}

// writeReportFile writes the HTML report to path.
func writeReportFile(path string, results []Result, info ReportInfo) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = WriteHTML(f, results, info)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
