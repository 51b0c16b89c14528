package productd

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/product"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFlagsWinOverEnvironmentWhichWinsOverDefaults(t *testing.T) {
	c, err := ParseFlags([]string{"-cache-ttl", "2m"}, env(map[string]string{
		"PRODUCTD_CACHE_TTL":      "1m",
		"PRODUCTD_ORIGIN_LATENCY": "200ms",
		"PRODUCTD_MODE":           "naive",
		"PRODUCTD_EARLY_REFRESH":  "true",
	}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.TTL != 2*time.Minute || c.OriginLatency != 200*time.Millisecond || c.Mode != product.ModeNaive || !c.EarlyRefresh {
		t.Fatalf("got %+v", c)
	}
	if c.Addr != Default().Addr || c.DB != Default().DB {
		t.Fatalf("defaults lost: %+v", c)
	}
}

func TestHelpDocumentsEveryFlagWithItsVariable(t *testing.T) {
	var out bytes.Buffer
	_, err := ParseFlags([]string{"-h"}, env(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, name := range []string{"addr", "db", "db-max-conns", "seed", "redis", "redis-prefix", "origin-latency", "mode",
		"cache-ttl", "negative-ttl", "cache-jitter", "stale-for", "early-refresh", "loader-timeout", "max-in-flight",
		"max-waiters", "local-max-entries", "shutdown-timeout", "log-level", "log-format"} {
		v := "PRODUCTD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if !strings.Contains(out.String(), "-"+name) || !strings.Contains(out.String(), v) {
			t.Errorf("-h does not document -%s with %s", name, v)
		}
	}
}

func TestInvalidSettingsAreRejected(t *testing.T) {
	tests := []struct {
		args []string
		env  map[string]string
	}{
		{args: []string{"-cache-ttl", "10ms"}},
		{args: []string{"-negative-ttl", "10m"}},
		{args: []string{"-mode", "fast"}},
		{args: []string{"-cache-jitter", "0.9"}},
		{args: []string{"-origin-latency", "-1s"}},
		{args: []string{"-log-format", "xml"}},
		{args: []string{"-log-level", "loud"}},
		{args: []string{"-db", ""}},
		{args: []string{"stray"}},
		{env: map[string]string{"PRODUCTD_CACHE_TTL": "soon"}},
		{env: map[string]string{"PRODUCTD_SEED": "maybe"}},
	}
	for _, tc := range tests {
		if _, err := ParseFlags(tc.args, env(tc.env), &bytes.Buffer{}); err == nil {
			t.Errorf("ParseFlags(%q, %v) accepted an invalid setting", tc.args, tc.env)
		}
	}
}
