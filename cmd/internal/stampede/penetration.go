package stampede

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The penetration modes: N requests for N distinct product ids that do not
// exist, in the hot key's tenant. Distinct ids defeat negative caching
// (each is a first miss); the Bloom filter turns them away.
const (
	// ModePenetrationNaive: uncoordinated cache-aside; every id is an
	// origin query.
	ModePenetrationNaive = "penetration-naive"
	// ModePenetrationNegative: flightcache with negative caching and no
	// guard; each id is still read at the origin (one row each, the
	// concurrent misses batched into fewer statements).
	ModePenetrationNegative = "penetration-negative"
	// ModePenetrationGuard: flightcache with the Bloom filter guard.
	ModePenetrationGuard = "penetration-guard"
	// ModePenetration, in -mode, stands for the three.
	ModePenetration = "penetration"
)

// PenetrationModes is what ModePenetration expands to.
var PenetrationModes = []string{ModePenetrationNaive, ModePenetrationNegative, ModePenetrationGuard}

func isPenetration(mode string) bool {
	return mode == ModePenetrationNaive || mode == ModePenetrationNegative || mode == ModePenetrationGuard
}

// expandModes replaces ModePenetration by PenetrationModes.
func expandModes(modes []string) []string {
	var out []string
	for _, m := range modes {
		if m == ModePenetration {
			out = append(out, PenetrationModes...)
			continue
		}
		out = append(out, m)
	}
	return out
}

// runPenetration sends cfg.N requests for distinct made-up ids of the hot
// key's tenant, with Concurrency (default DefaultWorkers) clients, and
// counts the origin queries they caused. Every answer should be a 404.
func runPenetration(ctx context.Context, cfg Config, client *http.Client, tg *target, mode string) (Result, error) {
	workers := cfg.Concurrency
	if workers == 0 {
		workers = DefaultWorkers
	}
	if err := warmConnections(ctx, client, tg.bases, workers); err != nil {
		return Result{}, err
	}
	tenant, _, _ := strings.Cut(strings.SplitN(cfg.Key, "?", 2)[0], "/")
	// Random, so that a second run against the same servers is not served
	// from what the first one cached; distinct, so that no id repeats.
	seed := rand.Uint64()
	urls := make([]string, cfg.N)
	for i := range urls {
		urls[i] = tg.bases[i%len(tg.bases)] + "/v1/tenants/" + tenant + "/products/x-" +
			strconv.FormatUint(seed, 36) + "-" + strconv.Itoa(i)
	}
	base, err := tg.queries(ctx)
	if err != nil {
		return Result{}, err
	}
	var rows0 int64
	if tg.rows != nil {
		rows0 = tg.rows()
	}
	start := time.Now()
	var done atomic.Int64
	stopProgress := progress(cfg.Progress, mode, &done, cfg.N, false, 0, start)
	samples := make([]sample, cfg.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, cfg.N) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.N {
					return
				}
				samples[i] = getMissing(ctx, client, urls[i])
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopProgress()
	final, err := tg.queries(ctx)
	if err != nil {
		return Result{}, err
	}
	r := summarise(mode, samples, final-base, elapsed, []Point{{0, 0}, {ms(elapsed), final - base}})
	r.Traffic = "penetration"
	if tg.rows != nil {
		r.OriginRows = tg.rows() - rows0
	}
	return r, nil
}

// getMissing is get for an id that does not exist: a 404 is the right
// answer, anything else an error.
func getMissing(ctx context.Context, client *http.Client, url string) sample {
	t0 := time.Now()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := client.Do(req)
	if err != nil {
		return sample{latency: time.Since(t0), status: "transport error"}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	lat := time.Since(t0)
	if err != nil {
		return sample{latency: lat, status: "transport error"}
	}
	if resp.StatusCode != http.StatusNotFound {
		return sample{latency: lat, status: fmt.Sprintf("HTTP %d", resp.StatusCode)}
	}
	return sample{latency: lat, ok: true, status: statusKind(resp.Header.Get("Cache-Status"))}
}
