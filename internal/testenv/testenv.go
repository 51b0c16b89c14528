// Package testenv gives tests a real Redis or PostgreSQL, or an honest
// reason why not: when the server is unreachable a test fails under CI=true
// (CI promises the services) and is skipped otherwise, with a message that
// says what to start.
//
// It imports only the standard library, so that the modules whose tests use
// it (redislease, the programs in cmd) take no requirement from it:
// PostgresDB opens the database through the "pgx" database/sql driver,
// which the test binary registers (the service's package product imports
// github.com/jackc/pgx/v5/stdlib).
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// Addresses of the services the tests use.
const (
	RedisAddr    = "127.0.0.1:6379"
	PostgresAddr = "127.0.0.1:5432"
	// PostgresAdminDSN is the maintenance database fresh test databases
	// are created from.
	PostgresAdminDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
)

const (
	redisHint    = "redis not reachable at " + RedisAddr + ": start it with redis-server --daemonize yes --port 6379 --save '' --appendonly no"
	postgresHint = "postgres not reachable at " + PostgresAddr + " (user postgres, trust auth, database test): start it with pg_ctlcluster <version> main start"
)

// Unavailable fails t when CI=true and skips it otherwise, with msg and
// err.
func Unavailable(t testing.TB, msg string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s: %v", msg, err)
	}
	t.Skipf("%s: %v", msg, err)
}

// RequireRedis returns the address of the test Redis after checking it
// answers PING.
func RequireRedis(t testing.TB) string {
	t.Helper()
	if err := pingRedis(RedisAddr); err != nil {
		Unavailable(t, redisHint, err)
	}
	return RedisAddr
}

// pingRedis speaks just enough RESP to know a Redis is there, so this
// package needs no Redis client.
func pingRedis(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(buf[:n]), "+PONG") {
		return fmt.Errorf("unexpected reply %q", buf[:n])
	}
	return nil
}

// UniqueName returns prefix followed by random hex, usable as a Redis key
// prefix or a database name, so tests can run in parallel and repeatedly.
func UniqueName(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// PostgresDB creates a fresh, empty database and returns its DSN; the
// database is dropped when the test ends. The test binary must have
// registered the "pgx" database/sql driver (github.com/jackc/pgx/v5/stdlib).
func PostgresDB(t testing.TB) string {
	t.Helper()
	if !slices.Contains(sql.Drivers(), "pgx") {
		t.Fatal(`testenv.PostgresDB: no "pgx" database/sql driver registered; import _ "github.com/jackc/pgx/v5/stdlib" in the test`)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := sql.Open("pgx", PostgresAdminDSN)
	if err != nil {
		Unavailable(t, postgresHint, err)
	}
	if err := admin.PingContext(ctx); err != nil {
		admin.Close()
		Unavailable(t, postgresHint, err)
	}
	name := UniqueName("flightcache_test_")
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return "postgres://postgres@" + PostgresAddr + "/" + name + "?sslmode=disable"
}

// CurvePoints keeps the points of xs up to limit when PERFREPORT_QUICK is
// set (perfreport -quick, which only checks that the report runs): the
// largest points of a scaling curve take tens of seconds each. Otherwise
// it returns xs.
func CurvePoints(limit int, xs ...int) []int {
	if os.Getenv("PERFREPORT_QUICK") == "" {
		return xs
	}
	var out []int
	for _, x := range xs {
		if x <= limit {
			out = append(out, x)
		}
	}
	return out
}

// ReportLatencies reports the p50 and p99 of lat, in milliseconds, as the
// metrics p50-ms and p99-ms that perfreport's curves read, and 0 ns/op:
// an iteration's time is the set-up of a herd or a batch, not a cost. It
// sorts lat.
func ReportLatencies(b *testing.B, lat []time.Duration) {
	b.Helper()
	if len(lat) == 0 {
		b.Fatal("no latency measured")
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}
