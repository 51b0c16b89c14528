// Package stampede is the demo that shows the herd and its cure: it fires
// concurrent requests for one hot product at productd (started in-process,
// or running elsewhere) in several modes and measures how many reached the
// origin. cmd/stampede is its command line.
package stampede

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/cmd/internal/productd"
)

// The modes. The first two are herds (N requests released at once right
// after the hot entry expired or was invalidated); EarlyRefresh is
// continuous traffic across several expiries.
const (
	ModeNaive        = "naive"
	ModeFlightcache  = "flightcache"
	ModeEarlyRefresh = "early-refresh"
)

// AllModes is the default -mode.
var AllModes = []string{ModeNaive, ModeFlightcache, ModeEarlyRefresh}

// Config is one stampede run.
type Config struct {
	// Targets are base URLs of running productd instances; requests are
	// spread across them round-robin. Empty starts productd in-process on
	// loopback for each mode (SQLite in a temporary directory, memory tier).
	Targets []string
	// N is the size of each herd. Default 1000.
	N int
	// Concurrency is the number of concurrent clients: 0 means N for a herd
	// and DefaultWorkers for continuous traffic.
	Concurrency int
	// Key is the hot product: "tenant/id" with an optional "?locale=…&currency=…".
	Key string
	// Modes to run, in order; default AllModes.
	Modes []string
	// Duration of the continuous traffic of ModeEarlyRefresh. Default 3s.
	Duration time.Duration
	// OriginLatency and TTL configure the in-process productd (defaults
	// 100ms and 1s: realistic for a loaded database, short enough to watch
	// several expiries).
	OriginLatency time.Duration
	TTL           time.Duration
	// MaxExpiryWait bounds how long a run waits for a target's entry to
	// expire; beyond it the entry is invalidated instead, by a PUT of the
	// same values to another variant of the product, which leaves every
	// instance reading the hot entry under one cache key. Default 15s.
	MaxExpiryWait time.Duration
	// Catalog is what the in-process productd seeds; nil means
	// product.DemoCatalog. Key must name one of its products.
	Catalog *product.Catalog
	// Instances, when above 0, starts that many productd processes (built
	// from this module once per run) for each of the modes ModeLocal and
	// ModeCluster, sharing Redis and DB, and spreads the herd over them.
	Instances int
	// Redis is the redis:// URL the instances share; required with
	// Instances.
	Redis string
	// DB is the origin the instances share (see productd -db); empty: a
	// SQLite file in a temporary directory.
	DB string
	// InstanceFlags are more productd flags for the instances, after the
	// run's own (a later flag wins): the run sets -redis-timeout 5s and
	// -bus-down-after 10s, since it measures coalescing, and these
	// measure productd's own defaults instead.
	InstanceFlags []string
	// Rounds is the number of writes of ModeStaleness. Default
	// DefaultRounds.
	Rounds int
	// StalenessTimeout bounds how long a round of ModeStaleness polls for
	// the new value. Default DefaultStalenessTimeout.
	StalenessTimeout time.Duration
	// Progress, when set, receives a progress bar (stderr on a terminal).
	Progress io.Writer
	// Log, when set, receives one line per phase of the run (building,
	// starting the servers, waiting for the hot entry to expire, firing
	// the traffic), so that a run is never silent; Main sets it to stderr.
	Log io.Writer
	// Logger receives the in-process servers' logs; default: discarded.
	Logger *slog.Logger
	// WriteToken is the bearer token of productd's writes, sent with the
	// PUTs that invalidate the hot product: with Targets, theirs (Main
	// reads it from PRODUCTD_WRITE_TOKEN); otherwise fill makes one up for
	// the productd instances the run starts. Never printed.
	WriteToken string
}

// Defaults.
const (
	DefaultN             = 1000
	DefaultWorkers       = 50
	DefaultKey           = "acme/p-00042?locale=en-US&currency=USD"
	DefaultDuration      = 3 * time.Second
	DefaultOriginLatency = 100 * time.Millisecond
	DefaultTTL           = time.Second
)

func (c *Config) fill() error {
	if c.N == 0 {
		c.N = DefaultN
	}
	if c.Key == "" {
		c.Key = DefaultKey
	}
	if len(c.Modes) == 0 {
		c.Modes = AllModes
		if c.Instances > 0 {
			c.Modes = InstanceModes
		}
	}
	c.Modes = expandModes(c.Modes)
	if c.Duration == 0 {
		c.Duration = DefaultDuration
	}
	if c.OriginLatency == 0 {
		c.OriginLatency = DefaultOriginLatency
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Rounds == 0 {
		c.Rounds = DefaultRounds
	}
	if c.StalenessTimeout == 0 {
		c.StalenessTimeout = DefaultStalenessTimeout
	}
	if c.MaxExpiryWait == 0 {
		c.MaxExpiryWait = 15 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.WriteToken == "" && len(c.Targets) == 0 {
		// The instances are the run's own: a token of the run's own.
		var b [24]byte
		rand.Read(b[:])
		c.WriteToken = hex.EncodeToString(b[:])
	}
	switch {
	case c.N < 1 || c.N > 100_000:
		return errors.New("stampede: -n must be between 1 and 100000")
	case c.Concurrency < 0 || c.Concurrency > 100_000:
		return errors.New("stampede: -concurrency must be between 0 and 100000")
	case c.Duration < 0:
		return errors.New("stampede: -duration must be positive")
	}
	switch {
	case c.Instances < 0 || c.Instances > 64:
		return errors.New("stampede: -instances must be between 0 and 64")
	case c.Instances > 0 && c.Redis == "":
		return errors.New("stampede: -instances needs -redis: the instances share one Redis")
	case c.Instances > 0 && len(c.Targets) > 0:
		return errors.New("stampede: -instances starts its own productd processes; it does not go with -target")
	}
	if slices.Contains(c.Modes, ModeStaleness) {
		switch {
		case len(c.Modes) > 1:
			return errors.New("stampede: -mode staleness runs alone")
		case c.Instances < 2:
			return errors.New("stampede: -mode staleness needs -instances 2 or more: one takes the writes, the others are watched")
		case c.Rounds < 1 || c.Rounds > 10_000:
			return errors.New("stampede: -rounds must be between 1 and 10000")
		case c.StalenessTimeout < 10*time.Millisecond || c.StalenessTimeout > 10*time.Minute:
			return errors.New("stampede: -staleness-timeout must be between 10ms and 10m")
		}
	}
	for _, m := range c.Modes {
		switch {
		case m == ModeStaleness:
		case c.Instances > 0 && m != ModeLocal && m != ModeCluster:
			return fmt.Errorf("stampede: with -instances the modes are %s or %s, not %q", strings.Join(InstanceModes, ", "), ModeStaleness, m)
		case c.Instances == 0 && m != ModeNaive && m != ModeFlightcache && m != ModeEarlyRefresh && !isPenetration(m):
			return fmt.Errorf("stampede: unknown mode %q (want %s or %s; %s with -instances)", m, strings.Join(AllModes, ", "), strings.Join(append([]string{ModePenetration}, PenetrationModes...), ", "), strings.Join(InstanceModes, ", "))
		}
	}
	for _, t := range c.Targets {
		u, err := url.Parse(t)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("stampede: -target %q is not an http(s) URL", t)
		}
	}
	if _, err := c.path(); err != nil {
		return err
	}
	return nil
}

// path turns Key into the request path and query.
func (c *Config) path() (string, error) {
	k, q, _ := strings.Cut(c.Key, "?")
	tenant, id, ok := strings.Cut(k, "/")
	if !ok {
		return "", fmt.Errorf("stampede: -key %q must be tenant/id[?locale=…&currency=…]", c.Key)
	}
	if _, err := product.NewRef(tenant, id, "en-US", "USD"); err != nil {
		return "", fmt.Errorf("stampede: -key: %w", err)
	}
	p := "/v1/tenants/" + tenant + "/products/" + id
	if q != "" {
		p += "?" + q
	}
	return p, nil
}

// Point is one sample of the origin-query counter: At since the start of
// the mode's traffic, Queries since its start.
type Point struct {
	AtMillis float64 `json:"atMs"`
	Queries  int64   `json:"queries"`
}

// Result is one mode's measurements.
type Result struct {
	Mode          string `json:"mode"`
	Traffic       string `json:"traffic"` // "herd" or "continuous"
	Requests      int    `json:"requests"`
	OriginQueries int64  `json:"originQueries"`
	// OriginRows is the product rows those queries read (a batched
	// statement reads several); 0 when unknown (a remote target).
	OriginRows        int64          `json:"originRows,omitempty"`
	RequestsPerLoader float64        `json:"requestsPerLoader"`
	Suppression       float64        `json:"suppressionRatio"` // 1 - originQueries/requests
	P50Millis         float64        `json:"p50Ms"`
	P95Millis         float64        `json:"p95Ms"`
	P99Millis         float64        `json:"p99Ms"`
	MaxMillis         float64        `json:"maxMs"`
	Errors            int            `json:"errors"`
	ElapsedMillis     float64        `json:"elapsedMs"`
	CacheStatus       map[string]int `json:"cacheStatus"`
	Timeline          []Point        `json:"originQueriesOverTime"`
	// SpreadMillis is, for a herd, the time from the first request sent to
	// the last: a herd whose requests arrive spread out is not a herd.
	SpreadMillis float64 `json:"herdSpreadMs"`
	// Warnings say why this mode's numbers are not a valid comparison
	// (see Validate); empty when they are.
	Warnings []string `json:"warnings,omitempty"`

	latencies []time.Duration // sorted; for the report
}

// target is what a mode runs against: base URLs and a way to read the
// origin-query counter.
type target struct {
	bases   []string
	queries func(ctx context.Context) (int64, error)
	// rows reads the origin-row counter; nil for remote targets.
	rows func() int64
	stop func() error
}

// Run runs every mode of cfg and returns their results in order.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if slices.Contains(cfg.Modes, ModeStaleness) {
		return nil, errNotStaleness
	}
	path, _ := cfg.path()
	var dir, bin string
	if len(cfg.Targets) == 0 {
		var err error
		if dir, err = os.MkdirTemp("", "stampede-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if cfg.Instances > 0 {
			cfg.logf("building productd for %d instances (go build %s)", cfg.Instances, productdPackage)
			if bin, err = buildProductd(ctx, dir); err != nil {
				return nil, err
			}
		}
	}
	maxConns := max(cfg.N, cfg.Concurrency, DefaultWorkers)
	client := &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			// Enough idle connections that a thousand concurrent requests
			// reuse warm connections instead of queueing on handshakes.
			MaxIdleConns:        maxConns,
			MaxIdleConnsPerHost: maxConns,
			IdleConnTimeout:     30 * time.Second,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		},
	}
	defer client.CloseIdleConnections()
	withWriteToken(client, cfg.WriteToken)

	var results []Result
	for _, mode := range cfg.Modes {
		var tg *target
		var err error
		switch {
		case cfg.Instances > 0:
			cfg.logf("mode %s: starting %d productd processes", mode, cfg.Instances)
			tg, err = startInstances(ctx, cfg, bin, mode, instanceDB(cfg, dir))
		case len(cfg.Targets) == 0:
			cfg.logf("mode %s: starting productd in-process (SQLite, memory tier, origin latency %s) and seeding its catalog", mode, cfg.OriginLatency)
			tg, err = startInProcess(ctx, cfg, mode, filepath.Join(dir, "products.db"))
		default:
			cfg.logf("mode %s: against %s", mode, strings.Join(cfg.Targets, ", "))
			tg = remoteTarget(client, cfg.Targets)
		}
		if err != nil {
			return results, err
		}
		r, err := runMode(ctx, cfg, client, tg, mode, path)
		client.CloseIdleConnections()
		if stopErr := tg.stop(); err == nil {
			err = stopErr
		}
		if err != nil {
			return results, fmt.Errorf("stampede: mode %s: %w", mode, err)
		}
		if cfg.Instances > 0 {
			r.Mode = modeLabel(mode, cfg.Instances)
		}
		results = append(results, r)
	}
	return results, nil
}

// logf writes one line about the run's progress to cfg.Log, if set.
func (c *Config) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "stampede: "+format+"\n", args...)
	}
}

// startInProcess starts a productd configured for mode on loopback.
func startInProcess(ctx context.Context, cfg Config, mode, db string) (*target, error) {
	pc := productd.Default()
	pc.DB = db
	pc.Catalog = cfg.Catalog
	pc.OriginLatency = cfg.OriginLatency
	pc.TTL = cfg.TTL
	pc.NegativeTTL = cfg.TTL
	pc.Jitter = 0 // one key: expiry at a known instant
	pc.LoaderTimeout = 30 * time.Second
	pc.ShutdownTimeout = 10 * time.Second
	pc.MaxWaiters = 0
	pc.WriteToken = cfg.WriteToken
	switch mode {
	case ModeNaive, ModePenetrationNaive:
		pc.Mode = product.ModeNaive
	case ModeEarlyRefresh:
		pc.EarlyRefresh = true
	case ModePenetrationNegative:
		pc.Bloom = false
	}
	srv, err := productd.New(ctx, pc, cfg.Logger)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln) }()
	return &target{
		bases:   []string{"http://" + ln.Addr().String()},
		queries: func(context.Context) (int64, error) { return srv.OriginQueries(), nil },
		rows:    srv.OriginRows,
		stop: func() error {
			cancel()
			return <-served
		},
	}, nil
}

// remoteTarget reads the origin-query counter from every target's /metrics.
func remoteTarget(client *http.Client, bases []string) *target {
	return &target{
		bases: bases,
		queries: func(ctx context.Context) (int64, error) {
			var sum int64
			for _, b := range bases {
				n, err := ScrapeCounter(ctx, client, b, productd.OriginQueriesMetric)
				if err != nil {
					return 0, err
				}
				sum += n
			}
			return sum, nil
		},
		stop: func() error { return nil },
	}
}

// ScrapeCounter reads an unlabelled counter from base+"/metrics".
func ScrapeCounter(ctx context.Context, client *http.Client, base, name string) (int64, error) {
	body, err := scrape(ctx, client, base)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("%s/metrics: %s: %w", base, name, err)
			}
			return int64(f), nil
		}
	}
	return 0, fmt.Errorf("%s/metrics has no %s: is it productd?", base, name)
}

// scrape reads base+"/metrics".
func scrape(ctx context.Context, client *http.Client, base string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept-Encoding", "identity") // no gzip: scraped often, on loopback
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s/metrics: status %d", base, resp.StatusCode)
	}
	return string(body), nil
}

// sample is one request's outcome.
type sample struct {
	sent    time.Time // when the request was handed to the client
	latency time.Duration
	ok      bool
	status  string // Cache-Status without cache name and ttl, or the error
}

func runMode(ctx context.Context, cfg Config, client *http.Client, tg *target, mode, path string) (Result, error) {
	if isPenetration(mode) {
		return runPenetration(ctx, cfg, client, tg, mode)
	}
	continuous := mode == ModeEarlyRefresh
	workers := cfg.Concurrency
	if workers == 0 {
		workers = cfg.N
		if continuous {
			workers = DefaultWorkers
		}
	}
	if err := warmConnections(ctx, client, tg.bases, workers); err != nil {
		return Result{}, err
	}
	// Load the hot entry. A herd then waits for it to expire (or has it
	// invalidated), so that it arrives at a cache that had the value a
	// moment ago, as in production; continuous traffic starts at once and
	// runs across the expiries.
	if continuous {
		cfg.logf("mode %s: loading the hot product", mode)
	} else {
		cfg.logf("mode %s: loading the hot product and waiting for its entry to expire", mode)
	}
	warnings, err := loadHotEntry(ctx, cfg, client, tg.bases, path, !continuous)
	if err != nil {
		return Result{}, err
	}
	base, err := tg.queries(ctx)
	if err != nil {
		return Result{}, err
	}

	start := time.Now()
	timeline := []Point{{0, 0}}
	var tlMu sync.Mutex
	sampleDone := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampleDone)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
				if n, err := tg.queries(ctx); err == nil {
					tlMu.Lock()
					timeline = append(timeline, Point{float64(time.Since(start).Microseconds()) / 1000, n - base})
					tlMu.Unlock()
				}
			}
		}
	}()

	var samples []sample
	var done atomic.Int64
	if continuous {
		cfg.logf("mode %s: continuous traffic from %d workers for %s", mode, workers, cfg.Duration)
	} else {
		cfg.logf("mode %s: firing a herd of %d requests at once", mode, cfg.N)
	}
	stopProgress := progress(cfg.Progress, mode, &done, cfg.N, continuous, cfg.Duration, start)
	if continuous {
		samples = runContinuous(ctx, client, tg.bases, path, workers, cfg.Duration, &done)
	} else {
		samples = runHerd(ctx, client, tg.bases, path, cfg.N, workers, &done)
	}
	elapsed := time.Since(start)
	stopProgress()
	close(stopSampling)
	<-sampleDone
	final, err := tg.queries(ctx)
	if err != nil {
		return Result{}, err
	}
	timeline = append(timeline, Point{float64(elapsed.Microseconds()) / 1000, final - base})
	r := summarise(mode, samples, final-base, elapsed, timeline)
	r.Warnings = warnings
	r.Traffic = "herd"
	if continuous {
		r.Traffic = "continuous"
	} else {
		r.SpreadMillis = ms(spread(samples))
	}
	return r, nil
}

func warmConnections(ctx context.Context, client *http.Client, bases []string, n int) error {
	var wg sync.WaitGroup
	var failed atomic.Int64
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, _ := http.NewRequestWithContext(ctx, "GET", bases[i%len(bases)]+"/healthz", nil)
			resp, err := client.Do(req)
			if err != nil {
				failed.Add(1)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	close(start)
	wg.Wait()
	if f := failed.Load(); f == int64(n) {
		return fmt.Errorf("no target answers /healthz (%s)", strings.Join(bases, ", "))
	}
	return nil
}

// loadHotEntry loads the hot product on every target and, with expire,
// makes its cache entry cold on every target before the herd: it waits
// until the entry has expired (Cache-Status ttl), or, on the targets where
// that is longer than MaxExpiryWait, invalidates it (invalidateHot). It
// returns warnings for the results.
func loadHotEntry(ctx context.Context, cfg Config, client *http.Client, bases []string, path string, expire bool) ([]string, error) {
	var wait time.Duration
	var long []string // targets whose entry outlives MaxExpiryWait
	var hot []byte    // the hot product as the first target answered
	for _, b := range bases {
		req, _ := http.NewRequestWithContext(ctx, "GET", b+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("GET %s: status %d: %s", path, resp.StatusCode, strings.TrimSpace(string(body)))
		}
		if hot == nil {
			hot = body
		}
		ttl, ok := ttlOf(resp.Header.Get("Cache-Status"))
		if !expire || !ok {
			continue // naive servers and caches that do not say: nothing to wait for
		}
		if ttl > cfg.MaxExpiryWait {
			long = append(long, b)
			continue
		}
		wait = max(wait, ttl)
	}
	var warnings []string
	if len(long) > 0 {
		w, err := invalidateHot(ctx, cfg, client, long, path, hot)
		if err != nil {
			return nil, err
		}
		warnings = w
	}
	if wait > 0 {
		t := time.NewTimer(wait + 50*time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return warnings, nil
}

// invalidateHot makes the hot product's entry cold on every one of bases
// at once, under the one cache key they all read it by, as an update made
// elsewhere would.
//
// It cannot update the hot row itself: productd keys a row by the highest
// revision of it that the instance itself committed (its read-your-writes
// floor), so the instance that took the update would read the hot row
// under a key of its own, and updates through several instances would give
// each one a key of its own; a cluster-wide herd would then cost one
// origin query per key, not one. So it writes back the values of another
// variant of the product (another locale or currency: another row): that
// row's floor moves on the instance that takes the update, the hot row's
// floor moves nowhere, and productd invalidates every variant of the
// product, on that instance at once and on the others through the
// invalidation bus. It then waits until each other target has applied that
// invalidation (its flightcache_invalidations_*_total{kind="prefix"}
// count moved): a target whose bus is not up, or that does not hear it
// within busWait (no bus shared with the first), takes the update itself.
//
// A product with no other variant readable on the first target leaves
// only the hot row: it is updated through every target, with a warning
// when there are several.
func invalidateHot(ctx context.Context, cfg Config, client *http.Client, bases []string, path string, hot []byte) ([]string, error) {
	var p product.Product
	if err := jsonUnmarshal(hot, &p); err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	sib, sibBody, err := findVariant(ctx, cfg, client, bases[0], p)
	if err != nil {
		return nil, err
	}
	if sib == "" {
		for _, b := range bases {
			if err := invalidate(ctx, client, b, path, hot); err != nil {
				return nil, err
			}
		}
		if len(bases) == 1 {
			return nil, nil
		}
		return []string{fmt.Sprintf(
			"the hot entry was invalidated by updating the hot row through each target (the product has no other variant readable on %s): each instance now reads it under a revision of its own, so the herd's loads cannot be coalesced into one across instances; use a -key of a product with several locales or currencies",
			bases[0])}, nil
	}
	// What each other target has applied so far, read before the update.
	before := make([]float64, len(bases))
	heard := make([]bool, len(bases)) // whether to wait for the bus
	for i, b := range bases[1:] {
		v, err := readBus(ctx, client, b)
		if err != nil {
			return nil, err
		}
		before[i+1], heard[i+1] = v.applied, v.up
	}
	if err := invalidate(ctx, client, bases[0], sib, sibBody); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(busWait)
	for i, b := range bases[1:] {
		i++
		for heard[i] {
			v, err := readBus(ctx, client, b)
			if err != nil {
				return nil, err
			}
			if v.applied > before[i] {
				break
			}
			if time.Now().After(deadline) {
				heard[i] = false
				break
			}
			t := time.NewTimer(10 * time.Millisecond)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		if !heard[i] {
			if err := invalidate(ctx, client, b, sib, sibBody); err != nil {
				return nil, err
			}
		}
	}
	return nil, nil
}

// busWait bounds how long invalidateHot waits for a target to apply an
// invalidation that came through the bus: delivery takes milliseconds
// (docs/ARCHITECTURE.md), and a target that has not applied it after this
// long is taken to share no bus with the first.
const busWait = 10 * time.Second

// findVariant returns the path and the body of a variant of p (the same
// product in another locale or currency: another row) that base answers
// with 200, trying the locales and currencies of cfg's catalog (the demo
// catalog by default) next to p's own; "" when none answers.
func findVariant(ctx context.Context, cfg Config, client *http.Client, base string, p product.Product) (string, []byte, error) {
	cat := product.DemoCatalog
	if cfg.Catalog != nil {
		cat = *cfg.Catalog
	}
	locales := append([]string{p.Locale}, cat.Locales...)
	currencies := append([]string{p.Currency}, cat.Currencies...)
	tried := map[string]bool{p.Locale + "|" + p.Currency: true}
	for _, l := range locales {
		for _, c := range currencies {
			if tried[l+"|"+c] || len(tried) > maxVariantTries {
				continue
			}
			tried[l+"|"+c] = true
			path := "/v1/tenants/" + url.PathEscape(p.TenantID) + "/products/" + url.PathEscape(p.ProductID) +
				"?" + url.Values{"locale": {l}, "currency": {c}}.Encode()
			req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
			resp, err := client.Do(req)
			if err != nil {
				return "", nil, err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return "", nil, err
			}
			if resp.StatusCode == http.StatusOK {
				return path, body, nil
			}
		}
	}
	return "", nil, nil
}

// maxVariantTries bounds the variants findVariant asks for.
const maxVariantTries = 8

// busView is what a target's /metrics says of its invalidation bus.
type busView struct {
	up bool // productd_bus_state is 2 (up)
	// applied counts the bulk (prefix) invalidations received from other
	// instances and handled: applied or ignored as already covered.
	applied float64
}

// readBus reads busView from base+"/metrics". A target without the bus
// metrics (no -redis, naive mode) has no bus: up is false.
func readBus(ctx context.Context, client *http.Client, base string) (busView, error) {
	body, err := scrape(ctx, client, base)
	if err != nil {
		return busView{}, err
	}
	var v busView
	for _, line := range strings.Split(body, "\n") {
		name, rest, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			continue
		}
		switch {
		case name == productd.BusStateMetric:
			v.up = f == 2
		case (strings.HasPrefix(name, "flightcache_invalidations_applied_total{") ||
			strings.HasPrefix(name, "flightcache_invalidations_ignored_total{")) && strings.Contains(name, `kind="prefix"`):
			v.applied += f
		}
	}
	return v, nil
}

// ttlOf extracts the ttl parameter of a Cache-Status value.
func ttlOf(cs string) (time.Duration, bool) {
	for _, p := range strings.Split(cs, ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(p), "ttl="); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return 0, false
			}
			return time.Duration(n) * time.Second, true
		}
	}
	return 0, false
}

// invalidate PUTs back the values of body, a product read at path: the
// data does not change, but the row's revision does and every cached
// variant of the product is invalidated, as after a real update.
func invalidate(ctx context.Context, client *http.Client, base, path string, body []byte) error {
	var p product.Product
	if err := jsonUnmarshal(body, &p); err != nil {
		return err
	}
	patch, err := json.Marshal(product.Patch{DisplayName: &p.DisplayName, PriceCents: &p.PriceCents})
	if err != nil {
		return err
	}
	req, _ := http.NewRequestWithContext(ctx, "PUT", base+path, bytes.NewReader(patch))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		return fmt.Errorf("PUT %s: status 401: productd takes writes with its write token only; set PRODUCTD_WRITE_TOKEN to it", path)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT %s: status %d", path, resp.StatusCode)
	}
	return nil
}

func get(ctx context.Context, client *http.Client, url string) sample {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	return send(client, req)
}

// send sends req and measures it from the moment it is handed over.
func send(client *http.Client, req *http.Request) sample {
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return sample{sent: t0, latency: time.Since(t0), status: "transport error"}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	lat := time.Since(t0)
	if err != nil {
		return sample{sent: t0, latency: lat, status: "transport error"}
	}
	s := sample{sent: t0, latency: lat, ok: resp.StatusCode == http.StatusOK, status: statusKind(resp.Header.Get("Cache-Status"))}
	if !s.ok {
		s.status = "HTTP " + strconv.Itoa(resp.StatusCode)
	}
	return s
}

// statusKind strips the cache name and ttl off a Cache-Status value,
// leaving a bounded label such as "hit" or "fwd=miss; collapsed".
func statusKind(cs string) string {
	parts := strings.Split(cs, ";")
	var keep []string
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if i == 0 || strings.HasPrefix(p, "ttl=") || p == "" {
			continue
		}
		keep = append(keep, p)
	}
	if len(keep) == 0 {
		return "none"
	}
	return strings.Join(keep, "; ")
}

// runHerd sends n requests with `workers` concurrent clients. The
// connections are already open (warmConnections) and every worker builds
// its first request before the barrier, so that when the barrier opens all
// of them are sent at once: nothing but scheduling stands between the
// first request and the last (the spread, which Validate checks).
func runHerd(ctx context.Context, client *http.Client, bases []string, path string, n, workers int, done *atomic.Int64) []sample {
	samples := make([]sample, n)
	var next atomic.Int64
	var ready, wg sync.WaitGroup
	barrier := make(chan struct{})
	for range min(workers, n) {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			i := int(next.Add(1)) - 1
			var req *http.Request
			if i < n {
				req, _ = http.NewRequestWithContext(ctx, "GET", bases[i%len(bases)]+path, nil)
			}
			ready.Done()
			<-barrier
			for i < n {
				samples[i] = send(client, req)
				done.Add(1)
				i = int(next.Add(1)) - 1
				if i < n {
					req, _ = http.NewRequestWithContext(ctx, "GET", bases[i%len(bases)]+path, nil)
				}
			}
		}()
	}
	ready.Wait() // every worker holds its request
	close(barrier)
	wg.Wait()
	return samples
}

// spread is the time from the first request sent to the last.
func spread(samples []sample) time.Duration {
	var first, last time.Time
	for _, s := range samples {
		if s.sent.IsZero() {
			continue
		}
		if first.IsZero() || s.sent.Before(first) {
			first = s.sent
		}
		if s.sent.After(last) {
			last = s.sent
		}
	}
	return last.Sub(first)
}

// Validate checks that a run is a fair comparison and sets each Result's
// Warnings: a herd whose spread exceeds the origin latency is not a herd
// (the first load may finish before the last request arrives, so naive
// mode finds the value cached), and a naive herd that made fewer origin
// queries than half its requests did not stampede. originLatency is zero
// when unknown (remote targets): then only the second check runs. It
// returns every warning, for printing.
func Validate(results []Result, originLatency time.Duration) []string {
	var all []string
	for i := range results {
		r := &results[i]
		if r.Traffic != "herd" {
			continue
		}
		if originLatency > 0 && r.SpreadMillis > ms(originLatency) {
			r.Warnings = append(r.Warnings, fmt.Sprintf(
				"%s: the herd took %s to send, longer than the origin latency (%s): later requests may find the value already loaded, so this is not a valid comparison; use a smaller -n or a longer -origin-latency",
				r.Mode, fmtMillis(r.SpreadMillis), fmtMillis(ms(originLatency))))
		}
		if r.Mode == ModeNaive && r.OriginQueries*2 < int64(r.Requests) {
			r.Warnings = append(r.Warnings, fmt.Sprintf(
				"%s: only %d origin queries for %d requests (fewer than half): the requests did not arrive together, so this is not a valid comparison; use a smaller -n or a longer -origin-latency",
				r.Mode, r.OriginQueries, r.Requests))
		}
		all = append(all, r.Warnings...)
	}
	return all
}

// runContinuous keeps `workers` clients busy for d.
func runContinuous(ctx context.Context, client *http.Client, bases []string, path string, workers int, d time.Duration, done *atomic.Int64) []sample {
	deadline := time.Now().Add(d)
	per := make([][]sample, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				per[w] = append(per[w], get(ctx, client, bases[i%len(bases)]+path))
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	var all []sample
	for _, s := range per {
		all = append(all, s...)
	}
	return all
}

func summarise(mode string, samples []sample, queries int64, elapsed time.Duration, timeline []Point) Result {
	r := Result{
		Mode: mode, Requests: len(samples), OriginQueries: queries,
		ElapsedMillis: ms(elapsed), CacheStatus: map[string]int{}, Timeline: timeline,
	}
	r.latencies = make([]time.Duration, len(samples))
	for i, s := range samples {
		r.latencies[i] = s.latency
		if !s.ok {
			r.Errors++
		}
		r.CacheStatus[s.status]++
	}
	sort.Slice(r.latencies, func(i, j int) bool { return r.latencies[i] < r.latencies[j] })
	if queries > 0 { // else 0: no load at all (JSON has no infinity)
		r.RequestsPerLoader = float64(r.Requests) / float64(queries)
	}
	if r.Requests > 0 {
		r.Suppression = 1 - float64(queries)/float64(r.Requests)
		r.P50Millis = ms(percentile(r.latencies, 0.50))
		r.P95Millis = ms(percentile(r.latencies, 0.95))
		r.P99Millis = ms(percentile(r.latencies, 0.99))
		r.MaxMillis = ms(r.latencies[len(r.latencies)-1])
	}
	return r
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// withWriteToken makes c send token as "Authorization: Bearer <token>"
// with every request other than a GET or HEAD: productd's writes need it.
// An empty token sends nothing.
func withWriteToken(c *http.Client, token string) {
	if token == "" {
		return
	}
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	c.Transport = bearerTransport{token: token, next: next}
}

// bearerTransport adds the write token to the requests that write.
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet || req.Method == http.MethodHead {
		return b.next.RoundTrip(req)
	}
	req = req.Clone(req.Context()) // a RoundTripper must not change the caller's request
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(req)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the
// wrapped transport.
func (b bearerTransport) CloseIdleConnections() {
	if c, ok := b.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
