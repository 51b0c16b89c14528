package productd

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/redislease"
	"github.com/redis/go-redis/v9"
)

// An ACL user limited to productd's keys (~productd:*) has no pub/sub
// channel under Redis 7, which grants none by default: with it, the bus
// and cluster coalescing would be lost silently while /readyz said
// "cluster". productd refuses to start and names what to grant; once the
// user has the prefix's channels (&productd:*), it starts.
func TestRedisUserWithoutChannelsIsRefusedAtStartup(t *testing.T) {
	t.Parallel()
	rds := startPrivateRedis(t)
	admin := redis.NewClient(&redis.Options{Addr: rds.addr})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "lp", "on", ">lp-secret", "resetchannels", "~productd:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = testenv.PostgresDB(t)
	cfg.Catalog = &testCatalog
	cfg.Redis = "redis://lp:lp-secret@" + rds.addr + "/0"
	cfg.RedisPrefix = "productd:"
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	s, err := New(ctx, cfg, log)
	if err == nil {
		s.Close()
		t.Fatal("productd started with a Redis user that may not publish or subscribe on its channels")
	}
	if !errors.Is(err, redislease.ErrNoPermission) || !strings.Contains(err.Error(), "&productd:*") {
		t.Fatalf("startup error %q: want one matching redislease.ErrNoPermission that names &productd:*", err)
	}
	if strings.Contains(err.Error(), "lp-secret") {
		t.Fatalf("the startup error prints the password: %q", err)
	}

	if err := admin.Do(ctx, "ACL", "SETUSER", "lp", "&productd:*").Err(); err != nil {
		t.Fatal(err)
	}
	s, err = New(ctx, cfg, log)
	if err != nil {
		t.Fatalf("with the channels granted, productd did not start: %v", err)
	}
	s.Close()
}
