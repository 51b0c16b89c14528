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
