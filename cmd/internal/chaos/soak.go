package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightcache/flightcache/cmd/internal/product"
)

// ModeSoak names the soak's history in its Report: productd processes in
// cluster mode, as in ModeProductd, under a steady load and no faults.
const ModeSoak = "soak"

// SoakConfig configures Soak. The zero value of a field is its default.
type SoakConfig struct {
	// Duration is how long the load runs, after the setup. Default 2m.
	Duration time.Duration
	// Warmup is the start of the run that the flatness, origin-rate and
	// latency checks leave out: the caches fill, the connection pools
	// grow. Default Duration/4.
	Warmup time.Duration
	// Instances is the number of productd processes. Default 4.
	Instances int
	// Products is the catalog's size: one tenant's products, each in one
	// locale and currency. Default 100,000.
	Products int
	// Workers is the load generator's concurrency: that many requests at
	// most in flight, each sent as soon as the last one returned. Default
	// 16.
	Workers int
	// PutPercent is the share of requests that are PUTs (a new price).
	// Default 1; must be in [0, 50].
	PutPercent float64
	// Zipf is the exponent of the keys' Zipf distribution (rank 1 the
	// hottest). Default 1.1; must be above 1.
	Zipf float64
	// P99Bound is the GET latency the 99th percentile after the warm-up
	// must stay within. Default 500ms: a figure for a 2-core machine that
	// also runs the PostgreSQL, Redis and load generator of the soak.
	P99Bound time.Duration
	// Seed drives the load's choices.
	Seed uint64
	// Postgres is the database the origin's schema is created in (as
	// Config.Postgres). Default DefaultPostgres.
	Postgres string
	// Progress, when set, receives a line per resource sample.
	Progress io.Writer
}

// The soak's productd settings, on top of ModeProductd's (productdArgs).
const (
	// soakTTL is the cache TTL: short, so that a two-minute run sees many
	// expiries of every hot key; with -early-refresh the hottest are
	// refreshed before they expire.
	soakTTL = cacheTTL
	// soakOriginLatency is each load's latency after its query.
	soakOriginLatency = 20 * time.Millisecond
	// soakTenant owns the soak's catalog.
	soakTenant = "soak"
	// sampleEvery is how often the processes' resources are sampled.
	sampleEvery = 5 * time.Second
)

// SoakSample is one reading of the processes' resources, summed over the
// instances.
type SoakSample struct {
	At time.Duration `json:"at"`
	// HeapBytes is go_memstats_heap_inuse_bytes; Goroutines go_goroutines;
	// OpenFDs process_open_fds (sockets included).
	HeapBytes  float64 `json:"heap_bytes"`
	Goroutines float64 `json:"goroutines"`
	OpenFDs    float64 `json:"open_fds"`
	// RedisClients is the private Redis's connected_clients.
	RedisClients float64 `json:"redis_clients"`
	// OriginQueries is productd_origin_queries_total.
	OriginQueries float64 `json:"origin_queries"`
}

// SoakReport is what a soak measured, and its verdict.
type SoakReport struct {
	Config SoakConfig `json:"config"`
	Origin string     `json:"origin"`
	// Gets, Puts and Errors count the requests (Errors: any that did not
	// answer 200 with a body).
	Gets, Puts, Errors int
	// GetP50, GetP99 and GetMax are the GETs' latencies after the warm-up.
	GetP50, GetP99, GetMax time.Duration
	// OriginQueries counts the instances' origin queries after the
	// warm-up. OriginBudget is what one load per hot key per TTL allows
	// in the same time: for each TTL-long window, the distinct keys read
	// in it, plus one load per PUT.
	OriginQueries, OriginBudget float64
	Samples                     []SoakSample
	// History is the checker's verdict on every request (Check, with
	// ModeProductd's bounds).
	History Report
	// Failed lists the checks that failed; empty when the soak passed.
	Failed []string
}

// Passed says whether every check held.
func (r *SoakReport) Passed() bool { return len(r.Failed) == 0 }

func (cfg *SoakConfig) withDefaults() error {
	if cfg.Duration == 0 {
		cfg.Duration = 2 * time.Minute
	}
	if cfg.Warmup == 0 {
		cfg.Warmup = cfg.Duration / 4
	}
	if cfg.Instances == 0 {
		cfg.Instances = 4
	}
	if cfg.Products == 0 {
		cfg.Products = 100_000
	}
	if cfg.Workers == 0 {
		cfg.Workers = 16
	}
	if cfg.PutPercent == 0 {
		cfg.PutPercent = 1
	}
	if cfg.Zipf == 0 {
		cfg.Zipf = 1.1
	}
	if cfg.P99Bound == 0 {
		cfg.P99Bound = 500 * time.Millisecond
	}
	if cfg.Postgres == "" {
		cfg.Postgres = DefaultPostgres
	}
	switch {
	case cfg.Duration < 10*time.Second:
		return errors.New("chaos: a soak's Duration must be at least 10s")
	case cfg.Warmup < 0 || cfg.Warmup > cfg.Duration/2:
		return fmt.Errorf("chaos: a soak's Warmup (%v) must be between 0 and half its Duration (%v)", cfg.Warmup, cfg.Duration)
	case cfg.Instances < 1 || cfg.Instances > 16:
		return errors.New("chaos: a soak's Instances must be in [1, 16]")
	case cfg.Products < 1 || cfg.Products > 1_000_000:
		return errors.New("chaos: a soak's Products must be in [1, 1000000]")
	case cfg.Workers < 1 || cfg.Workers > 1024:
		return errors.New("chaos: a soak's Workers must be in [1, 1024]")
	case cfg.PutPercent < 0 || cfg.PutPercent > 50:
		return errors.New("chaos: a soak's PutPercent must be in [0, 50]")
	case cfg.Zipf <= 1:
		return errors.New("chaos: a soak's Zipf exponent must be above 1")
	case cfg.P99Bound < 0:
		return errors.New("chaos: a soak's P99Bound must not be negative")
	}
	return nil
}

// Soak runs productd processes in cluster mode on a private redis-server
// and a PostgreSQL schema of its own (a SQLite file if PostgreSQL does not
// answer), under a steady load of GETs of Zipf-distributed products and a
// few PUTs, without faults, for cfg.Duration. It records every request and
// samples the processes' heap, goroutines and open file descriptors, then
// checks that, after the warm-up:
//   - heap, goroutines and open descriptors are flat (the second half's
//     peak within 25% of the first half's, plus a little);
//   - origin queries stay within one per hot key per TTL (OriginBudget,
//     with 25% for early refreshes and the TTL's edges);
//   - the GETs' p99 stays within cfg.P99Bound;
//   - no request failed, and the history has no violation of the
//     promises Check holds ModeProductd to.
//
// A failed check is in SoakReport.Failed; the error is for a soak that
// could not run.
func Soak(ctx context.Context, cfg SoakConfig) (rep SoakReport, err error) {
	if err := cfg.withDefaults(); err != nil {
		return SoakReport{}, err
	}
	rep.Config = cfg
	if _, err := exec.LookPath("redis-server"); err != nil {
		return rep, ErrNoRedisServer
	}
	redis.SetLogger(quietRedis{})
	build := startBuild(ctx)
	defer build.remove()
	p := &phase{cfg: Config{Postgres: cfg.Postgres, Progress: cfg.Progress}, mode: ModeSoak}
	p.redis, err = startRedis(cfg.Instances)
	if err != nil {
		return rep, err
	}
	defer p.redis.kill()
	p.admin = adminClient(p.redis.addr)
	defer p.admin.Close()
	catalog := product.Catalog{Tenants: []string{soakTenant}, ProductsPerTenant: cfg.Products,
		Locales: []string{"en-US"}, Currencies: []string{"USD"}}
	origin, err := openOrigin(ctx, cfg.Postgres, catalog)
	if err != nil {
		return rep, err
	}
	defer func() {
		if cerr := origin.cleanup(); cerr != nil && err == nil {
			err = fmt.Errorf("chaos: drop the origin: %w", cerr)
		}
	}()
	rep.Origin = origin.name
	if err := build.wait(); err != nil {
		return rep, err
	}
	p.pd = &productdEnv{bin: build.bin, writeToken: newWriteToken(), rows: newRowMap(), origin: origin,
		client:    &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Workers, IdleConnTimeout: 30 * time.Second}},
		extraArgs: []string{"-early-refresh", "-origin-latency", soakOriginLatency.String()}}
	defer p.pd.client.CloseIdleConnections()
	p.org = newOrigin(nil, cfg.Seed)
	p.keys = []string{soakKey(1)}
	defer p.closeInstances()
	for i := range cfg.Instances {
		if err := p.newInstance(ctx, i); err != nil {
			return rep, err
		}
	}
	p.waitProcessesReady(ctx)
	p.h = NewHistory()
	p.logf("%d productd instances, %v (warm-up %v), %d products, %d workers, %.1f%% PUTs, Zipf %.2f, origin %s",
		cfg.Instances, cfg.Duration, cfg.Warmup, cfg.Products, cfg.Workers, cfg.PutPercent, cfg.Zipf, origin.name)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		rng := rand.New(rand.NewPCG(cfg.Seed, uint64(w)))
		zipf := rand.NewZipf(rng, cfg.Zipf, 1, uint64(cfg.Products-1))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				in := p.insts[rng.IntN(len(p.insts))]
				key := soakKey(int(zipf.Uint64()) + 1)
				if rng.Float64()*100 < cfg.PutPercent {
					p.httpPut(in, key)
				} else {
					p.httpGet(in, key, false)
				}
			}
		})
	}
	rep.Samples = append(rep.Samples, p.sample(ctx))
	tick := time.NewTicker(sampleEvery)
	end := time.NewTimer(cfg.Duration)
sampling:
	for {
		select {
		case <-tick.C:
			s := p.sample(ctx)
			rep.Samples = append(rep.Samples, s)
			p.logf("%6v heap %5.1f MiB, %4.0f goroutines, %4.0f fds, %3.0f redis clients, %6.0f origin queries",
				s.At.Round(time.Second), s.HeapBytes/(1<<20), s.Goroutines, s.OpenFDs, s.RedisClients, s.OriginQueries)
		case <-end.C:
			break sampling
		case <-ctx.Done():
			break sampling
		}
	}
	tick.Stop()
	end.Stop()
	close(stop)
	wg.Wait()
	rep.Samples = append(rep.Samples, p.sample(ctx))
	p.terminateProcesses()
	rep.judge(p.h.Ops())
	return rep, nil
}

// soakKey is the harness's key of the soak catalog's nth product.
func soakKey(n int) string { return soakTenant + ":p" + strconv.Itoa(n-1) }

// sample reads every instance's resources and the Redis's clients.
func (p *phase) sample(ctx context.Context) SoakSample {
	s := SoakSample{At: p.h.Now()}
	for _, in := range p.insts {
		sctx, cancel := context.WithTimeout(ctx, opTimeout)
		m := p.metrics(sctx, in, "go_memstats_heap_inuse_bytes", "go_goroutines", "process_open_fds", originQueriesSample)
		cancel()
		s.HeapBytes += m["go_memstats_heap_inuse_bytes"]
		s.Goroutines += m["go_goroutines"]
		s.OpenFDs += m["process_open_fds"]
		s.OriginQueries += m[originQueriesSample]
	}
	sctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if info, err := p.admin.Info(sctx, "clients").Result(); err == nil {
		for line := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
				s.RedisClients, _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	return s
}

// Flatness allowances: the second half's peak may exceed the first half's
// by growthFactor, plus these absolute amounts per instance (a GC cycle's
// timing, a connection pool's spare connection).
const (
	growthFactor       = 1.25
	heapSlackPerInst   = 8 << 20
	goroutineSlackInst = 20
	fdSlackPerInst     = 20
	// originFactor is the origin queries' allowance over OriginBudget:
	// early refreshes load a hot key a little before its expiry, and a
	// key read at a window's end loads in the next.
	originFactor = 1.25
)

// judge fills in the report's figures from the history and the samples,
// and the checks that failed.
func (r *SoakReport) judge(ops []Op) {
	cfg := r.Config
	var lat []time.Duration
	puts := 0
	windows := map[int64]map[string]bool{}
	for _, op := range ops {
		switch op.Kind {
		case Read:
			r.Gets++
		case Write:
			r.Puts++
		}
		if op.Err != "" {
			if r.Errors == 0 {
				r.Failed = append(r.Failed, fmt.Sprintf("a request failed: %s of %s at %v: %s", op.Kind, op.Key, op.Start, op.Err))
			}
			r.Errors++
			continue
		}
		if op.Start < cfg.Warmup {
			continue
		}
		switch op.Kind {
		case Read:
			lat = append(lat, op.End-op.Start)
			w := int64((op.Start - cfg.Warmup) / soakTTL)
			if windows[w] == nil {
				windows[w] = map[string]bool{}
			}
			windows[w][op.Key] = true
		case Write:
			puts++
		}
	}
	if r.Errors > 1 {
		r.Failed[len(r.Failed)-1] += fmt.Sprintf(" (and %d more)", r.Errors-1)
	}
	for _, keys := range windows {
		r.OriginBudget += float64(len(keys))
	}
	r.OriginBudget += float64(puts)
	slices.Sort(lat)
	if n := len(lat); n > 0 {
		r.GetP50, r.GetP99, r.GetMax = lat[n/2], lat[min(n-1, n*99/100)], lat[n-1]
		if r.GetP99 > cfg.P99Bound {
			r.Failed = append(r.Failed, fmt.Sprintf("GET p99 %v after the warm-up, above the bound %v", r.GetP99, cfg.P99Bound))
		}
	} else {
		r.Failed = append(r.Failed, "no GET succeeded after the warm-up")
	}

	// The samples after the warm-up, in two halves.
	var after []SoakSample
	for _, s := range r.Samples {
		if s.At >= cfg.Warmup {
			after = append(after, s)
		}
	}
	if len(after) < 4 {
		r.Failed = append(r.Failed, fmt.Sprintf("%d resource samples after the warm-up, too few to judge flatness", len(after)))
	} else {
		first, second := after[:len(after)/2], after[len(after)/2:]
		n := float64(cfg.Instances)
		flat := func(what string, get func(SoakSample) float64, slack float64) {
			a, b := peak(first, get), peak(second, get)
			if b > a*growthFactor+slack {
				r.Failed = append(r.Failed, fmt.Sprintf("%s grew: the second half's peak %.0f against the first half's %.0f", what, b, a))
			}
		}
		flat("heap", func(s SoakSample) float64 { return s.HeapBytes }, heapSlackPerInst*n)
		flat("goroutines", func(s SoakSample) float64 { return s.Goroutines }, goroutineSlackInst*n)
		flat("open descriptors", func(s SoakSample) float64 { return s.OpenFDs }, fdSlackPerInst*n)
		flat("Redis clients", func(s SoakSample) float64 { return s.RedisClients }, fdSlackPerInst*n)
		// The queries between the warm-up's end and the last sample.
		r.OriginQueries = after[len(after)-1].OriginQueries - after[0].OriginQueries
		if r.OriginQueries > r.OriginBudget*originFactor {
			r.Failed = append(r.Failed, fmt.Sprintf("%.0f origin queries after the warm-up, above %.0f (one per hot key per TTL: %.0f, plus %.0f%%)",
				r.OriginQueries, r.OriginBudget*originFactor, r.OriginBudget, (originFactor-1)*100))
		}
	}
	r.History = Check(ModeProductd, ops, nil, BoundsFor(ModeProductd))
	if v := r.History.Violations(); v > 0 {
		r.Failed = append(r.Failed, fmt.Sprintf("%d violations of the consistency promises", v))
	}
}

func peak(ss []SoakSample, get func(SoakSample) float64) float64 {
	m := 0.0
	for _, s := range ss {
		m = max(m, get(s))
	}
	return m
}

// WriteText prints the soak's table and verdict.
func (r *SoakReport) WriteText(w io.Writer) error {
	var b strings.Builder
	cfg := r.Config
	fmt.Fprintf(&b, "soak: %d productd instances (cluster mode, TTL %v, early refresh), %v with %v of warm-up, %d products (Zipf %.2f), %d workers, %.1f%% PUTs; origin %s\n\n",
		cfg.Instances, soakTTL, cfg.Duration, cfg.Warmup, cfg.Products, cfg.Zipf, cfg.Workers, cfg.PutPercent, r.Origin)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "at\theap MiB\tgoroutines\topen fds\tredis clients\torigin queries\t\n")
	for _, s := range r.Samples {
		fmt.Fprintf(tw, "%v\t%.1f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", s.At.Round(time.Second), s.HeapBytes/(1<<20), s.Goroutines, s.OpenFDs, s.RedisClients, s.OriginQueries)
	}
	tw.Flush()
	secs := (cfg.Duration - cfg.Warmup).Seconds()
	fmt.Fprintf(&b, "\nrequests: %d GETs, %d PUTs, %d errors (%.0f requests/s)\n", r.Gets, r.Puts, r.Errors, float64(r.Gets+r.Puts)/cfg.Duration.Seconds())
	fmt.Fprintf(&b, "GET latency after the warm-up: p50 %v, p99 %v (bound %v), max %v\n",
		r.GetP50.Round(10*time.Microsecond), r.GetP99.Round(10*time.Microsecond), cfg.P99Bound, r.GetMax.Round(time.Millisecond))
	ratio := 0.0
	if r.OriginBudget > 0 {
		ratio = r.OriginQueries / r.OriginBudget
	}
	fmt.Fprintf(&b, "origin queries after the warm-up: %.0f (%.0f/s) against a budget of %.0f (%.0f/s: one per hot key per TTL, one per PUT): %.2f of it\n",
		r.OriginQueries, r.OriginQueries/secs, r.OriginBudget, r.OriginBudget/secs, ratio)
	fmt.Fprintf(&b, "history: %d operations, %d violations, %d stale reads, worst staleness %v\n",
		r.History.Total.Ops, r.History.Violations(), r.History.Total.Stale, r.History.Total.WorstStaleness.Round(time.Millisecond))
	if r.Passed() {
		b.WriteString("passed\n")
	} else {
		b.WriteString("FAILED:\n")
		for _, f := range r.Failed {
			fmt.Fprintf(&b, "  %s\n", f)
		}
		for _, row := range r.History.Rows {
			for _, v := range row.Examples {
				fmt.Fprintf(&b, "  violation: %s\n", v)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
