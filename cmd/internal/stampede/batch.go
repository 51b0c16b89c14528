package stampede

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/httpapi"
	"github.com/flightcache/flightcache/cmd/internal/product"
)

// The batch modes: a herd of concurrent cold batch requests
// (GET …/products?ids=…) with overlapping id sets, against productd in
// naive mode (each id of each request loaded on its own) and in flightcache
// mode (ids shared across requests, loaded together).
const (
	ModeBatchNaive       = "batch-naive"
	ModeBatchFlightcache = "batch-flightcache"
)

// BatchConfig is one batch stampede run, always against productd started
// in-process on a fresh SQLite database (cold caches).
type BatchConfig struct {
	// Batches is the number of concurrent batch requests. Default 50.
	Batches int
	// Size is the number of ids per request, at most product.MaxBatchIDs.
	// Default 100.
	Size int
	// Pool is the number of distinct ids the requests draw from. Default
	// 200; at least Size.
	Pool int
	// Modes to run, in order; default both batch modes.
	Modes []string
	// OriginLatency of the in-process productd; default
	// DefaultOriginLatency.
	OriginLatency time.Duration
	// Catalog is what productd seeds; nil means product.DemoCatalog. Its
	// first tenant, locale and currency are asked for, and it must hold
	// Pool products.
	Catalog *product.Catalog
	// Seed makes the drawn id sets reproducible.
	Seed uint64
}

// BatchResult is one batch mode's measurements.
type BatchResult struct {
	Mode          string  `json:"mode"`
	Batches       int     `json:"batches"`
	IDsPerBatch   int     `json:"idsPerBatch"`
	DistinctIDs   int     `json:"distinctIds"`
	OriginQueries int64   `json:"originQueries"`
	OriginRows    int64   `json:"originRows"`
	P50Millis     float64 `json:"p50Ms"`
	P99Millis     float64 `json:"p99Ms"`
	MaxMillis     float64 `json:"maxMs"`
	Errors        int     `json:"errors"`
	// Outcomes sums the requests' Flightcache-Outcomes headers.
	Outcomes map[string]int `json:"outcomes"`
}

func (c *BatchConfig) fill() error {
	if c.Batches == 0 {
		c.Batches = 50
	}
	if c.Size == 0 {
		c.Size = 100
	}
	if c.Pool == 0 {
		c.Pool = 200
	}
	if len(c.Modes) == 0 {
		c.Modes = []string{ModeBatchNaive, ModeBatchFlightcache}
	}
	if c.OriginLatency == 0 {
		c.OriginLatency = DefaultOriginLatency
	}
	if c.Catalog == nil {
		c.Catalog = &product.DemoCatalog
	}
	switch {
	case c.Batches < 1 || c.Batches > 10_000:
		return errors.New("stampede: -batches must be between 1 and 10000")
	case c.Size < 1 || c.Size > product.MaxBatchIDs:
		return fmt.Errorf("stampede: -batch-size must be between 1 and %d", product.MaxBatchIDs)
	case c.Pool < c.Size || c.Pool > c.Catalog.ProductsPerTenant:
		return fmt.Errorf("stampede: -batch-pool must be between -batch-size and the catalog's %d products", c.Catalog.ProductsPerTenant)
	}
	for _, m := range c.Modes {
		if m != ModeBatchNaive && m != ModeBatchFlightcache {
			return fmt.Errorf("stampede: unknown batch mode %q (want %s or %s)", m, ModeBatchNaive, ModeBatchFlightcache)
		}
	}
	return nil
}

// RunBatch runs every batch mode of cfg, each on a fresh in-process
// productd, and returns their results in order.
func RunBatch(ctx context.Context, cfg BatchConfig) ([]BatchResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	// Every mode gets the same requests.
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	tenant, locale, currency := cfg.Catalog.Tenants[0], cfg.Catalog.Locales[0], cfg.Catalog.Currencies[0]
	paths := make([]string, cfg.Batches)
	distinct := map[int]bool{}
	for i := range paths {
		ids := make([]string, cfg.Size)
		for j, n := range rng.Perm(cfg.Pool)[:cfg.Size] {
			ids[j] = product.ProductID(n + 1)
			distinct[n] = true
		}
		paths[i] = "/v1/tenants/" + tenant + "/products?locale=" + locale + "&currency=" + currency + "&ids=" + strings.Join(ids, ",")
	}
	client := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConns: cfg.Batches, MaxIdleConnsPerHost: cfg.Batches}}
	defer client.CloseIdleConnections()

	var results []BatchResult
	for _, mode := range cfg.Modes {
		dir, err := os.MkdirTemp("", "stampede-batch-")
		if err != nil {
			return results, err
		}
		base := Config{Catalog: cfg.Catalog, OriginLatency: cfg.OriginLatency, TTL: time.Minute}
		if err := base.fill(); err != nil {
			os.RemoveAll(dir)
			return results, err
		}
		serverMode := ModeFlightcache
		if mode == ModeBatchNaive {
			serverMode = ModeNaive
		}
		tg, err := startInProcess(ctx, base, serverMode, filepath.Join(dir, "products.db"))
		if err != nil {
			os.RemoveAll(dir)
			return results, err
		}
		r, err := runBatchHerd(ctx, client, tg, paths)
		client.CloseIdleConnections()
		if stopErr := tg.stop(); err == nil {
			err = stopErr
		}
		os.RemoveAll(dir)
		if err != nil {
			return results, fmt.Errorf("stampede: mode %s: %w", mode, err)
		}
		r.Mode, r.Batches, r.IDsPerBatch, r.DistinctIDs = mode, cfg.Batches, cfg.Size, len(distinct)
		results = append(results, r)
	}
	return results, nil
}

// runBatchHerd sends every path at once and counts what reached the origin.
func runBatchHerd(ctx context.Context, client *http.Client, tg *target, paths []string) (BatchResult, error) {
	if err := warmConnections(ctx, client, tg.bases, len(paths)); err != nil {
		return BatchResult{}, err
	}
	q0, err := tg.queries(ctx)
	if err != nil {
		return BatchResult{}, err
	}
	r0 := tg.rows()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		start = make(chan struct{})
		lat   = make([]time.Duration, len(paths))
		res   = BatchResult{Outcomes: map[string]int{}}
	)
	for i, p := range paths {
		wg.Go(func() {
			<-start
			t0 := time.Now()
			req, _ := http.NewRequestWithContext(ctx, "GET", tg.bases[i%len(tg.bases)]+p, nil)
			resp, err := client.Do(req)
			ok := false
			var outcomes string
			if err == nil {
				var body httpapi.ListBody
				err = json.NewDecoder(resp.Body).Decode(&body)
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok = err == nil && resp.StatusCode == http.StatusOK
				outcomes = resp.Header.Get(httpapi.OutcomesHeader)
			}
			lat[i] = time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if !ok {
				res.Errors++
			}
			for _, kv := range strings.Split(outcomes, ", ") {
				if k, v, found := strings.Cut(kv, "="); found {
					n, _ := strconv.Atoi(v)
					res.Outcomes[k] += n
				}
			}
		})
	}
	close(start)
	wg.Wait()
	q1, err := tg.queries(ctx)
	if err != nil {
		return BatchResult{}, err
	}
	res.OriginQueries, res.OriginRows = q1-q0, tg.rows()-r0
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	res.P50Millis, res.P99Millis, res.MaxMillis = ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99)), ms(lat[len(lat)-1])
	return res, nil
}

// WriteBatchTable prints batch results as an aligned table.
func WriteBatchTable(w io.Writer, results []BatchResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tbatches\tids/batch\tdistinct ids\torigin queries\torigin rows\tp50 ms\tp99 ms\terrors\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%d\t\n", r.Mode, r.Batches, r.IDsPerBatch, r.DistinctIDs,
			r.OriginQueries, r.OriginRows, r.P50Millis, r.P99Millis, r.Errors)
	}
	return tw.Flush()
}
