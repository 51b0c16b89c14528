package productd

import (
	"bytes"
	"database/sql"
	"errors"
	"flag"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/internal/testenv"
)

// -soft-timeout is off by default (as -stale-for is), set by its flag or
// its variable, and refused when it could not work: negative, without
// -stale-for (no value is kept past its TTL to be served), or not below
// -loader-timeout (the load has failed by then). Each refusal names the
// flag at fault.
func TestSoftTimeoutNeedsStaleForAndStaysBelowTheLoaderTimeout(t *testing.T) {
	c, err := ParseFlags(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.SoftTimeout != 0 || c.StaleFor != 0 {
		t.Fatalf("defaults: -soft-timeout %v, -stale-for %v; want both off", c.SoftTimeout, c.StaleFor)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want time.Duration
	}{
		{args: []string{"-stale-for", "1h", "-soft-timeout", "200ms"}, want: 200 * time.Millisecond},
		{args: []string{"-stale-for", "1h"}, env: map[string]string{"PRODUCTD_SOFT_TIMEOUT": "300ms"}, want: 300 * time.Millisecond},
		{args: []string{"-stale-for", "1h", "-soft-timeout", "4999ms"}, want: 4999 * time.Millisecond}, // just below the default -loader-timeout
		{args: []string{"-stale-for", "1h", "-soft-timeout", "5s", "-loader-timeout", "10s"}, want: 5 * time.Second},
		{args: []string{"-soft-timeout", "0"}, want: 0},
	} {
		c, err := ParseFlags(tc.args, env(tc.env), io.Discard)
		if err != nil {
			t.Errorf("ParseFlags(%q, %v): %v", tc.args, tc.env, err)
			continue
		}
		if c.SoftTimeout != tc.want {
			t.Errorf("ParseFlags(%q, %v): soft timeout %v, want %v", tc.args, tc.env, c.SoftTimeout, tc.want)
		}
	}
	for _, tc := range []struct {
		args    []string
		env     map[string]string
		mention []string
	}{
		{args: []string{"-stale-for", "1h", "-soft-timeout", "-1s"}, mention: []string{"-soft-timeout", "negative"}},
		{args: []string{"-soft-timeout", "200ms"}, mention: []string{"-soft-timeout", "-stale-for"}},
		{args: []string{"-soft-timeout", "200ms", "-stale-for", "0"}, mention: []string{"-soft-timeout", "-stale-for"}},
		{env: map[string]string{"PRODUCTD_SOFT_TIMEOUT": "200ms"}, mention: []string{"-soft-timeout", "-stale-for"}},
		{args: []string{"-stale-for", "1h", "-soft-timeout", "5s"}, mention: []string{"-soft-timeout", "-loader-timeout"}}, // equal to the default
		{args: []string{"-stale-for", "1h", "-soft-timeout", "2s", "-loader-timeout", "1s"}, mention: []string{"-soft-timeout", "-loader-timeout"}},
		{env: map[string]string{"PRODUCTD_SOFT_TIMEOUT": "soon"}, mention: []string{"PRODUCTD_SOFT_TIMEOUT"}},
	} {
		_, err := ParseFlags(tc.args, env(tc.env), io.Discard)
		if err == nil {
			t.Errorf("ParseFlags(%q, %v) accepted an invalid soft timeout", tc.args, tc.env)
			continue
		}
		for _, m := range tc.mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("ParseFlags(%q, %v): error %q does not mention %s", tc.args, tc.env, err, m)
			}
		}
	}

	var out bytes.Buffer
	if _, err := ParseFlags([]string{"-h"}, env(nil), &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	if !strings.Contains(out.String(), "-soft-timeout") || !strings.Contains(out.String(), "PRODUCTD_SOFT_TIMEOUT") {
		t.Errorf("-h does not document -soft-timeout with PRODUCTD_SOFT_TIMEOUT:\n%s", out.String())
	}
}

// A short -cache-ttl needs no -negative-ttl of its own: unset (or 0), the
// negative TTL is 30s capped at -cache-ttl, as flightcache caps it. An
// explicit -negative-ttl (flag or variable) above -cache-ttl, or under 1s,
// is still refused.
func TestShortCacheTTLCapsTheDefaultNegativeTTL(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{args: nil, want: 30 * time.Second},
		{args: []string{"-cache-ttl", "2s"}, want: 2 * time.Second},
		{args: []string{"-cache-ttl", "10s", "-negative-ttl", "0"}, want: 10 * time.Second},
		{args: []string{"-cache-ttl", "2s", "-negative-ttl", "1s"}, want: time.Second},
		{args: []string{"-cache-ttl", "2s", "-negative-ttl", "2s"}, want: 2 * time.Second},
		{args: []string{"-cache-ttl", "1m", "-negative-ttl", "45s"}, want: 45 * time.Second},
	} {
		c, err := ParseFlags(tc.args, env(nil), io.Discard)
		if err != nil {
			t.Errorf("ParseFlags(%q): %v", tc.args, err)
			continue
		}
		if got := c.EffectiveNegativeTTL(); got != tc.want {
			t.Errorf("ParseFlags(%q): negative TTL %v, want %v", tc.args, got, tc.want)
		}
	}
	for _, tc := range []struct {
		args    []string
		env     map[string]string
		mention []string
	}{
		{args: []string{"-cache-ttl", "2s", "-negative-ttl", "3s"}, mention: []string{"-negative-ttl", "-cache-ttl"}},
		{args: []string{"-cache-ttl", "2s"}, env: map[string]string{"PRODUCTD_NEGATIVE_TTL": "3s"}, mention: []string{"-negative-ttl", "-cache-ttl"}},
		{args: []string{"-negative-ttl", "10m"}, mention: []string{"-negative-ttl", "-cache-ttl"}}, // above the default 5m
		{args: []string{"-negative-ttl", "500ms"}, mention: []string{"-negative-ttl"}},
		{args: []string{"-negative-ttl", "-1s"}, mention: []string{"-negative-ttl"}},
	} {
		_, err := ParseFlags(tc.args, env(tc.env), io.Discard)
		if err == nil {
			t.Errorf("ParseFlags(%q, %v) accepted an invalid negative TTL", tc.args, tc.env)
			continue
		}
		for _, m := range tc.mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("ParseFlags(%q, %v): error %q does not mention %s", tc.args, tc.env, err, m)
			}
		}
	}
}

// The capped negative TTL is the one the service and the cache use: with
// -cache-ttl 2s alone, productd starts and caches a "not found" for at
// most 2s.
func TestShortCacheTTLServesNotFoundForAtMostTheCacheTTL(t *testing.T) {
	t.Parallel()
	cfg, err := ParseFlags([]string{"-db", filepath.Join(t.TempDir(), "products.db"), "-cache-ttl", "2s", "-bloom=false"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Catalog = &testCatalog
	base, _ := startInProcess(t, cfg)
	c := herdClient(1)
	defer c.CloseIdleConnections()
	// The first GET stores the "not found"; the second is its hit, or,
	// should a busy machine delay it past the 2s, stores it again.
	const stored, hit = "flightcache; fwd=miss; stored; ttl=", "flightcache; hit; ttl="
	for i, want := range [][]string{{stored}, {hit, stored}} {
		resp, err := c.Get(base + "/v1/tenants/acme/products/p-99999")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		cs := resp.Header.Get("Cache-Status")
		ttl := -1
		for _, prefix := range want {
			if v, ok := strings.CutPrefix(cs, prefix); ok {
				if v, ok := strings.CutSuffix(v, "; detail=not-found"); ok {
					if n, err := strconv.Atoi(v); err == nil {
						ttl = n
					}
				}
			}
		}
		if resp.StatusCode != http.StatusNotFound || ttl < 0 || ttl > 2 {
			t.Fatalf("GET %d of a missing product: %d %q; want 404, %q…; detail=not-found with a ttl of at most 2 (-cache-ttl)",
				i+1, resp.StatusCode, cs, want)
		}
	}
}

// The observed problem -soft-timeout fixes: with -stale-for and an origin
// that hangs, every request for an expired product waited for the whole
// -loader-timeout although a stale value was at hand. With -soft-timeout
// 200ms and -loader-timeout 10s, 16 clients asking for expired products
// while the origin hangs (a transaction holds an exclusive lock on the
// products table, so every query on it blocks) each get the stale value,
// Cache-Status fwd=stale; detail=soft-timeout, once the product's load
// has run the soft timeout (at once for a request that joins it later),
// far within the loader timeout; the origin is asked once per product (the
// hung load, which every later request joins); the slowness is logged;
// /readyz reports the database down but stays ready. Once the origin
// answers again, the loads that hung refresh the products.
func TestHungOriginServesStaleWithinTheSoftTimeout(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDB(t)
	const softTimeout = 200 * time.Millisecond
	// Each answer must come far sooner than the 10s loader timeout; 2s
	// leaves room for a machine busy with other tests.
	const bound = 2 * time.Second
	cfg, err := ParseFlags([]string{"-db", dsn, "-cache-ttl", "1s", "-cache-jitter", "0", "-stale-for", "1h",
		"-soft-timeout", softTimeout.String(), "-loader-timeout", "10s", "-bloom=false", "-log-format", "json"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Catalog = &testCatalog
	var logs syncBuffer
	s, err := New(t.Context(), cfg, cfg.NewLogger(&logs))
	if err != nil {
		t.Fatal(err)
	}
	base := serveInProcess(t, s)
	const clients = 16
	c := herdClient(clients)
	defer c.CloseIdleConnections()
	ids := []string{"p-00021", "p-00022", "p-00023", "p-00024"}
	type answer struct {
		code int
		cs   string
		body string
		took time.Duration
	}
	get := func(id string) (answer, error) {
		start := time.Now()
		resp, err := c.Get(base + "/v1/tenants/acme/products/" + id)
		if err != nil {
			return answer{}, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		return answer{resp.StatusCode, resp.Header.Get("Cache-Status"), string(b), time.Since(start)}, err
	}
	// stale checks an answer given while the origin hangs.
	stale := func(id string, a answer) error {
		switch {
		case a.code != 200 || !strings.Contains(a.body, `"productId":"`+id+`"`):
			return errors.New("not the product")
		case !strings.HasPrefix(a.cs, "flightcache; fwd=stale; ttl=-") || !strings.HasSuffix(a.cs, "; detail=soft-timeout"):
			return errors.New("not a stale value served for the soft timeout")
		case a.took > bound:
			return errors.New("slower than the bound")
		}
		return nil
	}
	for _, id := range ids {
		a, err := get(id)
		if err != nil {
			t.Fatal(err)
		}
		if a.code != 200 || !strings.HasPrefix(a.cs, "flightcache; fwd=miss; stored") {
			t.Fatalf("warm-up GET %s: %d %q", id, a.code, a.cs)
		}
	}

	// Hang the origin.
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hung := true
	release := func() {
		if hung {
			hung = false
			if err := tx.Rollback(); err != nil {
				t.Errorf("releasing the lock: %v", err)
			}
		}
	}
	defer release() // before the server's cleanup: its loads then end at once
	if _, err := tx.Exec(`LOCK TABLE products IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	before := s.OriginQueries()

	// Each product's first answer past its TTL starts the load that hangs.
	// Poll until then; every poll before that is a hit and costs nothing.
	// (A hit with ttl=-1 is still a hit: see the outage test.)
	deadline := time.Now().Add(10 * time.Second)
	for _, id := range ids {
		for {
			a, err := get(id)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(a.cs, "; hit") && a.code == 200 {
				if time.Now().After(deadline) {
					t.Fatalf("%s never expired", id)
				}
				time.Sleep(20 * time.Millisecond) // waiting for the clock to pass the TTL, not for a goroutine
				continue
			}
			if err := stale(id, a); err != nil {
				t.Fatalf("first GET %s past its TTL with the origin hung: %v: %d %q in %v; want 200 fwd=stale detail=soft-timeout in [%v, %v]",
					id, err, a.code, a.cs, a.took, softTimeout, bound)
			}
			break
		}
	}

	// 16 clients, 4 requests each, every one for an expired product.
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		mu       sync.Mutex
		failures []string
		slowest  time.Duration
		// sooner counts the answers that came before a soft timeout of
		// their own: a request that joins its product's load after
		// that load has run the soft timeout is answered at once.
		sooner int
	)
	phase := time.Now()
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for j := range len(ids) {
				id := ids[(i+j)%len(ids)]
				a, err := get(id)
				if err == nil {
					err = stale(id, a)
				}
				mu.Lock()
				slowest = max(slowest, a.took)
				if err == nil && a.took < softTimeout {
					sooner++
				}
				if err != nil {
					failures = append(failures, id+": "+err.Error()+": "+strconv.Itoa(a.code)+" "+a.cs+" in "+a.took.String())
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	took := time.Since(phase)
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests with the origin hung did not get the stale value within [%v, %v]; first ones:\n%s",
			len(failures), clients*len(ids), softTimeout, bound, strings.Join(failures[:min(len(failures), 5)], "\n"))
	}
	t.Logf("origin hung: %d clients completed %d requests in %v, slowest answer %v, %d answered sooner than the soft timeout",
		clients, clients*len(ids), took, slowest, sooner)
	// Each client's last request comes at least three soft timeouts after
	// the loads began: it joins a load past its soft timeout.
	if sooner == 0 {
		t.Fatalf("every request waited a soft timeout of its own, also those that joined a load past it")
	}
	if n := s.OriginQueries() - before; n != int64(len(ids)) {
		t.Fatalf("%d origin queries for %d products with the origin hung, want one each (the load that hangs, joined by every later request)", n, len(ids))
	}
	if !strings.Contains(logs.String(), "origin slower than the soft timeout; served a stale value") {
		t.Errorf("no warning about the stale values served for the soft timeout:\n%s", logs.String())
	}
	// The readiness check's query hangs too, until /readyz's 2s deadline.
	if code, b := getReadyz(t, base); code != 200 || b.Status != "ready" || b.Dependencies["db"] != "down" {
		t.Fatalf("/readyz with the origin hung and -stale-for: %d %+v; want 200, ready, db down", code, b)
	}

	// The origin answers again: the loads that hung complete and store
	// fresh values (a value that expired again since is reloaded at once).
	release()
	deadline = time.Now().Add(10 * time.Second)
	for _, id := range ids {
		for {
			a, err := get(id)
			if err != nil {
				t.Fatal(err)
			}
			if a.code == 200 && !strings.Contains(a.cs, "ttl=-") && !strings.Contains(a.cs, "detail=") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s 10s after the origin came back: %d %q, want a fresh value", id, a.code, a.cs)
			}
			time.Sleep(20 * time.Millisecond) // polling for the background load's write-back
		}
	}
	if code, b := getReadyz(t, base); code != 200 || b.Dependencies["db"] != "up" {
		t.Fatalf("/readyz with the origin back: %d %+v", code, b)
	}
}

// /readyz reflects whether the instance can serve. With -stale-for (in
// flightcache mode) the cache answers what it holds while the database
// cannot: a database outage shows as db: down, and the instance stays
// ready (and serves the stale value). Without -stale-for, or in naive mode
// (which keeps no stale values), the outage makes it unready (503).
func TestReadyzStaysReadyThroughADatabaseOutageOnlyWithStaleFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		mode     product.Mode
		staleFor time.Duration
		ready    bool
	}{
		{"stale-for", product.ModeFlightcache, time.Hour, true},
		{"no stale-for", product.ModeFlightcache, 0, false},
		{"naive with stale-for", product.ModeNaive, time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := Default()
			cfg.WriteToken = testWriteToken
			cfg.DB = filepath.Join(t.TempDir(), "products.db")
			cfg.Catalog = &testCatalog
			cfg.Mode, cfg.StaleFor = tc.mode, tc.staleFor
			cfg.TTL, cfg.Jitter = time.Second, 0
			base, _ := startInProcess(t, cfg)
			if code, b := getReadyz(t, base); code != 200 || b.Status != "ready" || b.Dependencies["db"] != "up" {
				t.Fatalf("healthy: /readyz %d %+v", code, b)
			}
			c := herdClient(1)
			defer c.CloseIdleConnections()
			url := base + "/v1/tenants/initech/products/p-00042"
			resp, err := c.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("warm-up GET: %d", resp.StatusCode)
			}

			db, err := sql.Open("sqlite", cfg.DB)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(`DROP TABLE products`); err != nil {
				t.Fatal(err)
			}
			code, b := getReadyz(t, base)
			if b.Dependencies["db"] != "down" {
				t.Fatalf("table dropped: /readyz %d %+v; want db down", code, b)
			}
			if !tc.ready {
				if code != http.StatusServiceUnavailable || b.Status != "not_ready" {
					t.Fatalf("table dropped: /readyz %d %+v; want 503 not_ready", code, b)
				}
				return
			}
			if code != 200 || b.Status != "ready" {
				t.Fatalf("table dropped, -stale-for: /readyz %d %+v; want 200 ready", code, b)
			}
			// And the ready instance serves: the product past its TTL, stale.
			deadline := time.Now().Add(10 * time.Second)
			for {
				resp, err := c.Get(url)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				cs := resp.Header.Get("Cache-Status")
				if !strings.Contains(cs, "; hit") {
					if resp.StatusCode != 200 || !strings.Contains(cs, "fwd=stale") {
						t.Fatalf("GET past the TTL with the table dropped: %d %q; want 200 fwd=stale", resp.StatusCode, cs)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the entry never expired")
				}
				time.Sleep(20 * time.Millisecond) // waiting for the clock to pass the TTL, not for a goroutine
			}
		})
	}
}
