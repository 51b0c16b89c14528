package productd

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flightcache/flightcache/internal/testenv"
)

// skip_verify=true in a rediss:// -redis turns certificate verification
// off: productd says so with a WARN at start-up and in /readyz
// (redis_tls: unverified) for as long as it runs; a verified TLS Redis
// gets neither.
func TestRedisSkipVerifyIsWarnedAndShownInReadyz(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedisTLS(t, false)
	for _, tc := range []struct {
		name   string
		url    string
		ca     string
		warned bool
		shown  string
	}{
		{"skip_verify", "rediss://" + srv.Addr + "/0?skip_verify=true", "", true, "unverified"},
		{"verified", "rediss://" + srv.Addr + "/0", srv.CAFile, false, "verified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Default()
			cfg.WriteToken = testWriteToken
			cfg.DB = filepath.Join(t.TempDir(), "products.db")
			cfg.Catalog = &testCatalog
			cfg.Redis, cfg.RedisCA = tc.url, tc.ca
			var logs syncBuffer
			s, err := New(t.Context(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			base := serveInProcess(t, s)
			warned := false
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "level=WARN") && strings.Contains(l, "verification of Redis is OFF") && strings.Contains(l, "skip_verify") {
					warned = true
				}
			}
			if warned != tc.warned {
				t.Fatalf("start-up warning about skip_verify: %v, want %v; logs:\n%s", warned, tc.warned, logs.String())
			}
			if code, b := getReadyz(t, base); code != 200 || b.Dependencies["redis_tls"] != tc.shown || b.Dependencies["redis"] != "up" {
				t.Fatalf("/readyz %d %+v; want redis_tls %q", code, b, tc.shown)
			}
		})
	}
}
