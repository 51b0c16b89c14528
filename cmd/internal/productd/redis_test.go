package productd

import (
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
)

// Two instances sharing one database and one Redis: what the first loaded,
// the second serves from the shared tier without asking the origin.
func TestInstancesShareLoadsThroughRedis(t *testing.T) {
	t.Parallel()
	addr := testenv.RequireRedis(t)
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = filepath.Join(t.TempDir(), "products.db")
	cfg.Catalog = &testCatalog
	cfg.Redis = "redis://" + addr + "/0"
	cfg.RedisPrefix = testenv.UniqueName("productd-test-") + ":"
	// The claim is about sharing: with the 250ms default, A's write-back
	// has timed out on a machine busy with another test suite
	// (detail=shared-write-failed), rightly leaving B nothing to share.
	cfg.RedisTimeout = sharedTimeoutUnderLoad
	t.Cleanup(func() {
		cleanRedisPrefix(t, addr, cfg.RedisPrefix)
	})
	a, srvA := startInProcess(t, cfg)
	b, srvB := startInProcess(t, cfg)
	if srvA.Tiers() != "memory+redis" {
		t.Fatalf("tiers %q", srvA.Tiers())
	}
	c := herdClient(2)
	defer c.CloseIdleConnections()
	path := "/v1/tenants/acme/products/p-00005?locale=fr-FR&currency=USD"
	get := func(base string) (string, string) {
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		return resp.Header.Get("Cache-Status"), string(body)
	}
	csA, bodyA := get(a)
	csB, bodyB := get(b)
	if !strings.Contains(csA, "fwd=miss; stored") || !strings.Contains(csB, "hit") || !strings.Contains(csB, "detail=shared") {
		t.Fatalf("Cache-Status A %q, B %q: want a stored miss, then a shared hit", csA, csB)
	}
	if bodyA != bodyB {
		t.Fatalf("instances disagree: %s vs %s", bodyA, bodyB)
	}
	if srvA.OriginQueries() != 1 || srvB.OriginQueries() != 0 {
		t.Fatalf("origin queries A=%d B=%d, want 1 and 0", srvA.OriginQueries(), srvB.OriginQueries())
	}
	resp, err := c.Get(b + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz with Redis: %v %v", resp, err)
	}
	resp.Body.Close()
}

// A malformed -redis URL is reported without echoing it: it may carry a
// password, and the error is logged at startup.
func TestBadRedisURLErrorHidesPassword(t *testing.T) {
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = filepath.Join(t.TempDir(), "products.db")
	cfg.Catalog = &testCatalog
	cfg.Redis = "redis://user:s3cret@127.0.0.1:99999x/0"
	srv, err := New(t.Context(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		srv.Close()
		t.Fatal("New accepted a malformed -redis URL")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error leaks the password: %v", err)
	}
	if !strings.Contains(err.Error(), "-redis") {
		t.Fatalf("error does not name the flag: %v", err)
	}
}

// productd's client settings bound every Redis call, but options given in
// the -redis URL win.
func TestRedisClientIsBoundedUnlessTheURLSaysOtherwise(t *testing.T) {
	opt, err := redisOptions("redis://127.0.0.1:6379/0", 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if opt.MaxRetries != -1 || opt.DialerRetries != 1 || !opt.ContextTimeoutEnabled ||
		opt.DialTimeout > time.Second || opt.ReadTimeout > time.Second || opt.WriteTimeout > time.Second || opt.PoolTimeout > time.Second {
		t.Fatalf("defaults %+v: want no retries, context timeouts and sub-second dial/read/write/pool timeouts", opt)
	}
	opt, err = redisOptions("redis://127.0.0.1:6379/0?dial_timeout=3s&read_timeout=2s&write_timeout=4s&max_retries=2&pool_timeout=5s", 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if opt.DialTimeout != 3*time.Second || opt.ReadTimeout != 2*time.Second || opt.WriteTimeout != 4*time.Second ||
		opt.MaxRetries != 2 || opt.PoolTimeout != 5*time.Second {
		t.Fatalf("URL options lost: %+v", opt)
	}
}
