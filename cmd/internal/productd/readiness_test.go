package productd

import (
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
)

type readyBody struct {
	Status       string
	Dependencies map[string]string
}

func getReadyz(t *testing.T, base string) (int, readyBody) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b readyBody
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		t.Fatalf("/readyz body: %v", err)
	}
	return resp.StatusCode, b
}

// /readyz follows the origin's ability to serve, not Redis: with Redis
// gone at runtime the instance stays ready (and says redis: down); a
// database that lost its products table makes it unready.
func TestReadyzFollowsTheOriginNotRedis(t *testing.T) {
	t.Parallel()
	rds := startPrivateRedis(t)
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = filepath.Join(t.TempDir(), "products.db")
	cfg.Catalog = &testCatalog
	cfg.Redis = rds.url()
	base, _ := startInProcess(t, cfg)

	if code, b := getReadyz(t, base); code != 200 || b.Dependencies["db"] != "up" || b.Dependencies["redis"] != "up" || b.Dependencies["redis_breaker"] != "closed" {
		t.Fatalf("healthy: /readyz %d %+v", code, b)
	}
	rds.kill()
	if code, b := getReadyz(t, base); code != 200 || b.Dependencies["redis"] != "down" || b.Dependencies["db"] != "up" || b.Dependencies["redis_breaker"] == "" {
		t.Fatalf("redis killed: /readyz %d %+v; want 200 with redis down", code, b)
	}
	resp, err := http.Get(base + "/v1/tenants/acme/products/p-00003")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET with redis down: %d, want 200 from the origin", resp.StatusCode)
	}

	db, err := sql.Open("sqlite", cfg.DB)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DROP TABLE products`); err != nil {
		t.Fatal(err)
	}
	if code, b := getReadyz(t, base); code != 503 || b.Dependencies["db"] != "down" {
		t.Fatalf("table dropped: /readyz %d %+v; want 503 with db down", code, b)
	}
}

// A Redis that is unreachable at startup is a misconfiguration: New
// refuses it with an error naming -redis, instead of starting degraded.
func TestUnreachableRedisAtStartupIsRefused(t *testing.T) {
	rds := startPrivateRedis(t)
	rds.kill()
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = filepath.Join(t.TempDir(), "products.db")
	cfg.Catalog = &testCatalog
	cfg.Redis = rds.url()
	srv, err := New(t.Context(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		srv.Close()
		t.Fatal("New started with an unreachable Redis")
	}
	if !strings.Contains(err.Error(), "-redis") || !strings.Contains(err.Error(), rds.addr) {
		t.Fatalf("error %q does not name -redis and the address", err)
	}
}

// A -redis that does not answer, or does not parse, is refused before the
// database is touched: a fresh PostgreSQL database has no tables after the
// refused start, and a SQLite file is not created.
func TestRefusedRedisLeavesTheDatabaseUntouched(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDB(t)
	rds := startPrivateRedis(t)
	rds.kill()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = dsn
	cfg.Catalog = &testCatalog
	cfg.Redis = rds.url()
	if srv, err := New(t.Context(), cfg, quiet); err == nil {
		srv.Close()
		t.Fatal("New started with an unreachable Redis")
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tables int
	if err := db.QueryRow(`SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("the refused start left %d tables in the fresh database, want none", tables)
	}

	cfg.DB = filepath.Join(t.TempDir(), "products.db")
	cfg.Redis = "redis://127.0.0.1:notaport/0"
	if srv, err := New(t.Context(), cfg, quiet); err == nil {
		srv.Close()
		t.Fatal("New started with a malformed -redis")
	}
	if _, err := os.Stat(cfg.DB); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the refused start touched the SQLite file: %v", err)
	}
}

// readyBus is what /readyz says of the invalidation bus.
type readyBus struct {
	Status     string
	Coalescing string
	Bus        string
	// BusAge is nil when the body has no age.
	BusAge       *float64 `json:"bus_last_message_age_seconds"`
	Dependencies map[string]string
}

func getReadyBus(t *testing.T, base string) (int, readyBus) {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b readyBus
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		t.Fatalf("/readyz body: %v", err)
	}
	return resp.StatusCode, b
}

// waitBus polls /readyz until the bus is in state want (the state follows
// heartbeats through another process, Redis: there is nothing to wait on
// but the answer).
func waitBus(t *testing.T, base, want string, within time.Duration) readyBus {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		code, b := getReadyBus(t, base)
		// A database check that timed out on a loaded machine makes the
		// instance unready for a moment; that says nothing of the bus.
		if code != 200 && b.Dependencies["db"] != "down" {
			t.Fatalf("/readyz %d %+v, want 200 whatever the bus", code, b)
		}
		if b.Bus == want {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz bus %q after %v, want %q", b.Bus, within, want)
		}
		time.Sleep(5 * time.Millisecond) // polling state that heartbeats through Redis set
	}
}

// With -redis, in both coalescing modes, the cache has the invalidation
// bus: /readyz shows it up with the age of its last message (heartbeats
// keep it under a heartbeat or two), and down, still 200, once Redis is
// killed, the age then growing; /metrics has the age and the state.
// Without -redis there is no bus.
func TestReadyzAndMetricsShowTheBusInBothCoalescingModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{CoalesceCluster, CoalesceLocal} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			rds := startPrivateRedis(t)
			cfg := Default()
			cfg.WriteToken = testWriteToken
			cfg.DB = filepath.Join(t.TempDir(), "products.db")
			cfg.Catalog = &testCatalog
			cfg.Redis = rds.url()
			cfg.Coalesce = mode
			cfg.BusHeartbeat, cfg.BusDownAfter = 50*time.Millisecond, 200*time.Millisecond
			base, srv := startInProcess(t, cfg)
			b := waitBus(t, base, "up", 10*time.Second)
			if b.Coalescing != mode || b.BusAge == nil || *b.BusAge > 5 {
				t.Fatalf("bus up: /readyz %+v; want coalescing %s and a recent message", b, mode)
			}
			if srv.BusState() != driver.BusUp {
				t.Fatalf("Server.BusState %v with /readyz saying up", srv.BusState())
			}
			c := herdClient(1)
			defer c.CloseIdleConnections()
			if st := metric(t, c, base, `flightcache_bus_state{operation="product"}`); st != 2 {
				t.Fatalf("flightcache_bus_state %v with the bus up, want 2", st)
			}
			if st := metric(t, c, base, BusStateMetric); st != 2 {
				t.Fatalf("%s %v with the bus up, want 2", BusStateMetric, st)
			}
			if age := metric(t, c, base, BusLastMessageAgeMetric); age < 0 || age > 5 {
				t.Fatalf("%s = %v with the bus up", BusLastMessageAgeMetric, age)
			}

			rds.kill()
			b = waitBus(t, base, "down", 10*time.Second)
			if b.BusAge == nil {
				t.Fatalf("bus down: /readyz %+v lost the age of the last message", b)
			}
			// The age grows past the down-after with no message arriving.
			deadline := time.Now().Add(10 * time.Second)
			for metric(t, c, base, BusLastMessageAgeMetric) < cfg.BusDownAfter.Seconds() {
				if time.Now().After(deadline) {
					t.Fatalf("%s stayed under %v for 10s with Redis dead", BusLastMessageAgeMetric, cfg.BusDownAfter)
				}
				time.Sleep(10 * time.Millisecond) // waiting for time to pass without a message
			}
			if st := metric(t, c, base, `flightcache_bus_state{operation="product"}`); st != 1 {
				t.Fatalf("flightcache_bus_state %v with the bus down, want 1", st)
			}
			if st := metric(t, c, base, BusStateMetric); st != 1 {
				t.Fatalf("%s %v with the bus down, want 1", BusStateMetric, st)
			}
			if code, b := getReadyBus(t, base); code != 200 || b.Bus != "down" {
				t.Fatalf("/readyz %d %+v with Redis dead, want 200 and bus down", code, b)
			}
		})
	}
	t.Run("no redis", func(t *testing.T) {
		t.Parallel()
		cfg := Default()
		cfg.WriteToken = testWriteToken
		cfg.DB = filepath.Join(t.TempDir(), "products.db")
		cfg.Catalog = &testCatalog
		base, _ := startInProcess(t, cfg)
		if code, b := getReadyBus(t, base); code != 200 || b.Bus != "none" || b.BusAge != nil {
			t.Fatalf("/readyz without -redis: %d %+v; want bus none, no age", code, b)
		}
		c := herdClient(1)
		defer c.CloseIdleConnections()
		resp, err := c.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, name := range []string{BusLastMessageAgeMetric, BusStateMetric} {
			if strings.Contains(string(body), name) {
				t.Fatalf("%s exposed without a bus", name)
			}
		}
	})
}

// A slow database check does not use up the Redis check's time: with the
// products table locked (PostgreSQL, ACCESS EXCLUSIVE), /readyz reports
// db: down after its deadline and a healthy Redis up, as the two checks run
// side by side, each within its own deadline.
func TestReadyzReportsAHealthyRedisUpWhileTheDatabaseIsSlow(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDB(t)
	rds := startPrivateRedis(t)
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = dsn
	cfg.Catalog = &testCatalog
	cfg.Redis = rds.url()
	base, _ := startInProcess(t, cfg)
	if code, b := getReadyz(t, base); code != 200 || b.Dependencies["db"] != "up" || b.Dependencies["redis"] != "up" {
		t.Fatalf("healthy: /readyz %d %+v", code, b)
	}

	db := openPostgres(t, dsn)
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`LOCK TABLE products IN ACCESS EXCLUSIVE MODE`); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	code, b := getReadyz(t, base)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if b.Dependencies["db"] != "down" || b.Dependencies["redis"] != "up" {
		t.Fatalf("products table locked: /readyz %d %+v; want db down and redis up", code, b)
	}
	if code, b := getReadyz(t, base); code != 200 || b.Dependencies["db"] != "up" || b.Dependencies["redis"] != "up" {
		t.Fatalf("lock released: /readyz %d %+v", code, b)
	}
}
