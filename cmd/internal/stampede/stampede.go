// Package stampede is the demo that shows the herd and its cure: it fires
// concurrent requests for one hot product at productd (started in-process,
// or running elsewhere) in several modes and measures how many reached the
// origin. cmd/stampede is its command line.
package stampede

import (
	"context"
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
// after the hot entry expired); EarlyRefresh is continuous traffic across
// several expiries.
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
	// expire; beyond it the entry is invalidated with a PUT of the same
	// values instead. Default 15s.
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
	// Rounds is the number of writes of ModeStaleness. Default
	// DefaultRounds.
	Rounds int
	// StalenessTimeout bounds how long a round of ModeStaleness polls for
	// the new value. Default DefaultStalenessTimeout.
	StalenessTimeout time.Duration
	// Progress, when set, receives a progress bar (stderr on a terminal).
	Progress io.Writer
	// Logger receives the in-process servers' logs; default: discarded.
	Logger *slog.Logger
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
	Mode              string         `json:"mode"`
	Traffic           string         `json:"traffic"` // "herd" or "continuous"
	Requests          int            `json:"requests"`
	OriginQueries     int64          `json:"originQueries"`
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

	var results []Result
	for _, mode := range cfg.Modes {
		var tg *target
		var err error
		switch {
		case cfg.Instances > 0:
			tg, err = startInstances(ctx, cfg, bin, mode, instanceDB(cfg, dir))
		case len(cfg.Targets) == 0:
			tg, err = startInProcess(ctx, cfg, mode, filepath.Join(dir, "products.db"))
		default:
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
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept-Encoding", "identity") // no gzip: scraped often, on loopback
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s/metrics: status %d", base, resp.StatusCode)
	}
	for _, line := range strings.Split(string(body), "\n") {
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
	// Load the hot entry. A herd then waits for it to expire, so that it
	// arrives at a cache that had the value a moment ago, as in production;
	// continuous traffic starts at once and runs across the expiries.
	if err := loadHotEntry(ctx, cfg, client, tg.bases, path, !continuous); err != nil {
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
// waits until its cache entry has expired (Cache-Status ttl), or, when that
// is longer than MaxExpiryWait, invalidates it with a PUT of the same
// values.
func loadHotEntry(ctx context.Context, cfg Config, client *http.Client, bases []string, path string, expire bool) error {
	var wait time.Duration
	for _, b := range bases {
		req, _ := http.NewRequestWithContext(ctx, "GET", b+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: status %d: %s", path, resp.StatusCode, strings.TrimSpace(string(body)))
		}
		ttl, ok := ttlOf(resp.Header.Get("Cache-Status"))
		if !expire || !ok {
			continue // naive servers and caches that do not say: nothing to wait for
		}
		if ttl > cfg.MaxExpiryWait {
			if err := invalidate(ctx, client, b, path, body); err != nil {
				return err
			}
			continue
		}
		wait = max(wait, ttl)
	}
	if wait > 0 {
		t := time.NewTimer(wait + 50*time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
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

// invalidate PUTs back the values just read: the data does not change but
// every cached variant is invalidated, as after a real update.
func invalidate(ctx context.Context, client *http.Client, base, path string, body []byte) error {
	var p product.Product
	if err := jsonUnmarshal(body, &p); err != nil {
		return err
	}
	patch := fmt.Sprintf(`{"displayName":%q,"priceCents":%d}`, p.DisplayName, p.PriceCents)
	req, _ := http.NewRequestWithContext(ctx, "PUT", base+path, strings.NewReader(patch))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
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
