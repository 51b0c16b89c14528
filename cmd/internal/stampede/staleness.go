package stampede

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/product"
)

// ModeStaleness measures the staleness window of the memory tier: how long
// the other instances go on serving a product's old value after one
// instance took a write. It runs alone, with -instances 2 or more.
//
// Each round makes the product hot on every instance (GETs until each
// answers from its memory tier), PUTs a new price on instance 0 and, from
// the moment the PUT's response is in, polls every other instance in a
// tight loop (one client each) until each answers with the PUT's revision
// or a newer one, or the round's timeout passes. An instance that answers
// with an older revision after it answered with the new one has regressed.
const ModeStaleness = "staleness"

// Staleness defaults.
const (
	// DefaultRounds is -rounds.
	DefaultRounds = 20
	// DefaultStalenessTimeout is -staleness-timeout: how long a round
	// polls for the new value.
	DefaultStalenessTimeout = 5 * time.Second
	// StalenessTTL is the instances' cache TTL in staleness mode unless
	// -ttl says otherwise: far longer than a round, so that expiry cannot
	// explain an instance serving the new value.
	StalenessTTL = 5 * time.Minute
	// StalenessOriginLatency is the instances' -origin-latency in
	// staleness mode unless set: an instance that dropped its copy loads
	// the product again, and a short query keeps that reload a small part
	// of the convergence time.
	StalenessOriginLatency = 5 * time.Millisecond
	// StalenessSettle is how long a round keeps polling after the last
	// instance served the new value, looking for regressions.
	StalenessSettle = 200 * time.Millisecond
)

// StalenessResult is a staleness run's measurements.
type StalenessResult struct {
	// Instances is the number of productd processes; instance 0 takes the
	// PUTs, the others are polled.
	Instances     int     `json:"instances"`
	TimeoutMillis float64 `json:"timeoutMs"`
	SettleMillis  float64 `json:"settleMs"`
	// CacheTTLMillis is the instances' -cache-ttl.
	CacheTTLMillis float64 `json:"cacheTtlMs"`
	// ProductdArgs is the command line of every instance (credentials
	// redacted).
	ProductdArgs []string         `json:"productdArgs"`
	Rounds       []StalenessRound `json:"rounds"`
	Summary      StalenessSummary `json:"summary"`
	// Warnings say why the numbers may not mean what they seem.
	Warnings []string `json:"warnings,omitempty"`
}

// StalenessRound is one write and what the other instances served after it.
type StalenessRound struct {
	Round int `json:"round"` // from 1
	// Revision and PriceCents are what the PUT on instance 0 committed.
	Revision   int64   `json:"revision"`
	PriceCents int64   `json:"priceCents"`
	PutMillis  float64 `json:"putMs"` // the PUT's latency
	// Instances has one entry per polled instance (1, 2, …).
	Instances []Convergence `json:"instances"`
}

// Convergence is what one instance served during one round. Times are
// measured from the moment the PUT's response was received.
type Convergence struct {
	Instance int `json:"instance"`
	// Converged says the instance served the new revision before the
	// round's timeout; ConvergedMillis is when that first answer arrived.
	Converged       bool    `json:"converged"`
	ConvergedMillis float64 `json:"convergedMs,omitempty"`
	// LastStaleMillis is when the last answer with an older revision
	// before the first new one arrived (0 with no StalePolls).
	LastStaleMillis float64 `json:"lastStaleMs,omitempty"`
	Polls           int     `json:"polls"`
	StalePolls      int     `json:"stalePolls"`
	// Regressions counts answers with an older revision after the first
	// new one: during the round and in the warm-up GETs after it.
	Regressions int `json:"regressions"`
	// Errors counts polls that got no product (transport error, non-200).
	Errors int `json:"errors"`
}

// StalenessSummary aggregates every (round, instance) sample.
type StalenessSummary struct {
	Samples   int `json:"samples"`
	Converged int `json:"converged"`
	TimedOut  int `json:"timedOut"`
	// The percentiles of the convergence time over every sample, a
	// timed-out one counting as longer than any: null when the percentile
	// falls on a sample that timed out (it is longer than the timeout).
	P50Millis *float64 `json:"p50Ms"`
	P90Millis *float64 `json:"p90Ms"`
	P99Millis *float64 `json:"p99Ms"`
	MaxMillis *float64 `json:"maxMs"`
	// OldAnswers counts the answers with an older revision before the
	// new one, over every sample: requests sent after the PUT had been
	// acknowledged and still served the old price. LastOldMillis is the
	// latest of them (0 with none).
	OldAnswers    int     `json:"oldAnswers"`
	LastOldMillis float64 `json:"lastOldMs"`
	Regressions   int     `json:"regressions"`
	Errors        int     `json:"errors"`
	Polls         int     `json:"polls"`
}

// summariseStaleness computes the summary of rounds.
func summariseStaleness(rounds []StalenessRound) StalenessSummary {
	var s StalenessSummary
	var times []float64 // +Inf for a sample that timed out
	for _, r := range rounds {
		for _, c := range r.Instances {
			s.Samples++
			s.Regressions += c.Regressions
			s.Errors += c.Errors
			s.Polls += c.Polls
			s.OldAnswers += c.StalePolls
			s.LastOldMillis = math.Max(s.LastOldMillis, c.LastStaleMillis)
			if c.Converged {
				s.Converged++
				times = append(times, c.ConvergedMillis)
			} else {
				s.TimedOut++
				times = append(times, math.Inf(1))
			}
		}
	}
	if len(times) == 0 {
		return s
	}
	sort.Float64s(times)
	at := func(q float64) *float64 {
		v := times[max(0, min(int(math.Ceil(q*float64(len(times))))-1, len(times)-1))]
		if math.IsInf(v, 1) {
			return nil
		}
		return &v
	}
	s.P50Millis, s.P90Millis, s.P99Millis, s.MaxMillis = at(0.50), at(0.90), at(0.99), at(1)
	return s
}

// poll is one answer an instance gave during a round.
type poll struct {
	at  time.Duration // since the PUT's response, when the answer arrived
	ok  bool          // a 200 with a product
	rev int64
}

// convergence reduces an instance's answers of one round, in the order
// they arrived, to its Convergence for a write of revision rev. Until the
// instance converged, only the answers that arrived within timeout count;
// once it did, every later answer is checked for regressions (the round
// may go on past timeout, see StalenessSettle).
func convergence(instance int, polls []poll, rev int64, timeout time.Duration) Convergence {
	c := Convergence{Instance: instance}
	for _, p := range polls {
		if !c.Converged && p.at > timeout {
			break
		}
		c.Polls++
		switch {
		case !p.ok:
			c.Errors++
		case p.rev >= rev && !c.Converged:
			c.Converged, c.ConvergedMillis = true, ms(p.at)
		case p.rev < rev && c.Converged:
			c.Regressions++
		case p.rev < rev:
			c.StalePolls++
			c.LastStaleMillis = ms(p.at)
		}
	}
	return c
}

// RunStaleness runs ModeStaleness: it builds productd, starts
// cfg.Instances processes sharing cfg.Redis and one database, and measures
// cfg.Rounds writes.
func RunStaleness(ctx context.Context, cfg Config) (*StalenessResult, error) {
	cfg.Modes = []string{ModeStaleness}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	path, _ := cfg.path()
	dir, err := os.MkdirTemp("", "stampede-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cfg.logf("building productd for %d instances (go build %s)", cfg.Instances, productdPackage)
	bin, err := buildProductd(ctx, dir)
	if err != nil {
		return nil, err
	}
	args := instanceArgs(cfg, ModeStaleness, ModeCluster, instanceDB(cfg, dir))
	cfg.logf("mode %s: starting %d productd processes, then %d writes", ModeStaleness, cfg.Instances, cfg.Rounds)
	tg, err := startInstancesWith(ctx, cfg, bin, args)
	if err != nil {
		return nil, err
	}
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        4 * cfg.Instances,
			MaxIdleConnsPerHost: 4,
			IdleConnTimeout:     30 * time.Second,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		},
	}
	withWriteToken(client, cfg.WriteToken)
	res := &StalenessResult{
		Instances: cfg.Instances, TimeoutMillis: ms(cfg.StalenessTimeout), SettleMillis: ms(StalenessSettle),
		CacheTTLMillis: ms(cfg.TTL), ProductdArgs: redactArgs(args),
	}
	err = runStalenessRounds(ctx, cfg, client, tg.bases, path, res)
	client.CloseIdleConnections()
	if stopErr := tg.stop(); err == nil {
		err = stopErr
	}
	if err != nil {
		return nil, fmt.Errorf("stampede: mode %s: %w", ModeStaleness, err)
	}
	res.Summary = summariseStaleness(res.Rounds)
	if cfg.StalenessTimeout >= cfg.TTL {
		res.Warnings = append(res.Warnings, fmt.Sprintf(
			"the round timeout (%s) is not shorter than the instances' cache TTL (%s): an instance may have served the new value because its copy expired, not because it was invalidated; use a longer -ttl or a shorter -staleness-timeout",
			fmtMillis(ms(cfg.StalenessTimeout)), fmtMillis(ms(cfg.TTL))))
	}
	return res, nil
}

// runStalenessRounds runs the rounds against bases (instance 0 first) and
// appends them to res; it puts the product's price back at the end.
func runStalenessRounds(ctx context.Context, cfg Config, client *http.Client, bases []string, path string, res *StalenessResult) error {
	orig, _, err := getProduct(ctx, client, bases[0]+path)
	if err != nil {
		return err
	}
	// The warm-up GETs after round r must not go back to an older
	// revision on an instance that served r's: that is a regression of r.
	check := func(r *StalenessRound) func(int, int64) {
		return func(i int, rev int64) {
			if i == 0 || r == nil {
				return
			}
			if c := &r.Instances[i-1]; c.Converged && rev < r.Revision {
				c.Regressions++
			}
		}
	}
	var prev *StalenessRound
	for n := range cfg.Rounds {
		if err := warmAll(ctx, client, bases, path, check(prev)); err != nil {
			return err
		}
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "\r%-14s round %d/%d\033[K", ModeStaleness, n+1, cfg.Rounds)
		}
		price := orig.PriceCents + int64(n+1)
		if price > product.MaxPriceCents {
			price = orig.PriceCents - int64(n+1)
		}
		r, err := stalenessRound(ctx, client, bases, path, price, cfg.StalenessTimeout, StalenessSettle)
		if err != nil {
			return err
		}
		r.Round = n + 1
		res.Rounds = append(res.Rounds, r)
		prev = &res.Rounds[len(res.Rounds)-1]
	}
	if cfg.Progress != nil {
		fmt.Fprintln(cfg.Progress)
	}
	// The last round's regressions are looked for like the others'.
	if err := warmAll(ctx, client, bases, path, check(prev)); err != nil {
		return err
	}
	_, err = putPrice(ctx, client, bases[0]+path, orig.PriceCents)
	return err
}

// warmAll GETs the product from every instance until each answers from
// its memory tier (Cache-Status hit, no detail), passing every revision
// served to seen.
func warmAll(ctx context.Context, client *http.Client, bases []string, path string, seen func(instance int, rev int64)) error {
	const attempts = 200
	for i, b := range bases {
		hot := false
		for range attempts {
			p, cs, err := getProduct(ctx, client, b+path)
			if err != nil {
				return fmt.Errorf("instance %d: %w", i, err)
			}
			seen(i, p.Revision)
			if statusKind(cs) == "hit" {
				hot = true
				break
			}
		}
		if !hot {
			return fmt.Errorf("instance %d did not answer from its memory tier in %d GETs", i, attempts)
		}
	}
	return nil
}

// stalenessRound PUTs price on bases[0], then polls every other instance
// until each served the PUT's revision, for at most timeout after the
// PUT's response, and settle more after the last one did.
func stalenessRound(ctx context.Context, client *http.Client, bases []string, path string, price int64, timeout, settle time.Duration) (StalenessRound, error) {
	t0 := time.Now()
	written, err := putPrice(ctx, client, bases[0]+path, price)
	if err != nil {
		return StalenessRound{}, err
	}
	putDone := time.Now()
	r := StalenessRound{Revision: written.Revision, PriceCents: written.PriceCents, PutMillis: ms(putDone.Sub(t0))}
	if written.PriceCents != price {
		return r, fmt.Errorf("PUT answered price %d, want %d", written.PriceCents, price)
	}
	others := bases[1:]
	answers := make([][]poll, len(others))
	agreed := make(chan struct{}, len(others))
	stop := make(chan struct{})
	deadline := putDone.Add(timeout)
	var wg sync.WaitGroup
	for i, b := range others {
		wg.Go(func() {
			told := false
			for time.Now().Before(deadline) {
				select {
				case <-stop:
					return
				default:
				}
				p, _, err := getProduct(ctx, client, b+path)
				a := poll{at: time.Since(putDone), ok: err == nil, rev: p.Revision}
				if ctx.Err() != nil {
					return
				}
				answers[i] = append(answers[i], a)
				if a.ok && a.rev >= r.Revision && !told {
					told = true
					agreed <- struct{}{}
				}
			}
		})
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for n := 0; n < len(others); {
		select {
		case <-agreed:
			n++
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		break
	}
	if ctx.Err() == nil && time.Now().Before(deadline) {
		// Everyone agreed: keep polling a little, for regressions.
		select {
		case <-time.After(settle):
		case <-ctx.Done():
		}
	}
	close(stop)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return r, err
	}
	for i, a := range answers {
		r.Instances = append(r.Instances, convergence(i+1, a, r.Revision, timeout))
	}
	return r, nil
}

// getProduct GETs a product and returns it with its Cache-Status.
func getProduct(ctx context.Context, client *http.Client, url string) (product.Product, string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return product.Product{}, "", err
	}
	return doProduct(client, req)
}

// putPrice PUTs a new price and returns the product the PUT committed.
func putPrice(ctx context.Context, client *http.Client, url string, price int64) (product.Product, error) {
	req, err := http.NewRequestWithContext(ctx, "PUT", url, strings.NewReader(fmt.Sprintf(`{"priceCents":%d}`, price)))
	if err != nil {
		return product.Product{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	p, _, err := doProduct(client, req)
	return p, err
}

func doProduct(client *http.Client, req *http.Request) (product.Product, string, error) {
	resp, err := client.Do(req)
	if err != nil {
		return product.Product{}, "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return product.Product{}, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return product.Product{}, "", fmt.Errorf("%s %s: status %d", req.Method, req.URL.Path, resp.StatusCode)
	}
	var p product.Product
	if err := json.Unmarshal(body, &p); err != nil {
		return product.Product{}, "", fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	return p, resp.Header.Get("Cache-Status"), nil
}

// redactArgs returns args with the values of -redis and -db redacted.
func redactArgs(args []string) []string {
	out := append([]string(nil), args...)
	for i := 1; i < len(out); i++ {
		if out[i-1] == "-redis" || out[i-1] == "-db" {
			out[i] = product.Redact(out[i])
		}
	}
	return out
}

// errNotStaleness is returned by Run for ModeStaleness, which has its own
// entry point and result.
var errNotStaleness = errors.New("stampede: -mode staleness runs alone (RunStaleness)")
