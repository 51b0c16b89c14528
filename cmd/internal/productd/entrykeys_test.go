package productd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/cmd/internal/product"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/redis/go-redis/v9"
)

// Test entry keys, in hex as the flags take them.
const (
	testEntryKey    = "6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b"
	testEntryKeyOld = "01010101010101010101010101010101"
)

// redisEntry is a shared-tier entry of value loaded at loaded, fresh (and
// kept) until until.
func redisEntry(value []byte, loaded, until time.Time) driver.Entry {
	return driver.Entry{Value: value, Meta: driver.Meta{LoadedAt: loaded, FreshUntil: until, StaleUntil: until}}
}

// writeKeyFile writes content to a key file of the test and returns its path.
func writeKeyFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "entry-keys")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// With an entry key, an entry forged directly in Redis (a valid envelope,
// written by a client without the key) is never served: the instance loads
// the product from the database and overwrites the forgery. The same
// forgery is served by an instance without the key, which is what makes
// it a forgery worth refusing.
func TestEndToEndForgedRedisEntryIsNotServedWithAnEntryKey(t *testing.T) {
	t.Parallel()
	addr := testenv.RequireRedis(t)
	base := Default()
	base.WriteToken = testWriteToken
	base.DB = filepath.Join(t.TempDir(), "products.db")
	base.Catalog = &testCatalog
	base.Redis = "redis://" + addr + "/0"
	base.RedisPrefix = testenv.UniqueName("productd-entrykey-") + ":"
	base.RedisTimeout = sharedTimeoutUnderLoad
	t.Cleanup(func() {
		cleanRedisPrefix(t, addr, base.RedisPrefix)
	})
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	// The forger: a store on productd's layout, without a key.
	forger, err := redisstore.New(rdb, redisstore.Options{Prefix: base.RedisPrefix, HashTag: true})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := product.NewRef("acme", "p-00005", "fr-FR", "USD")
	if err != nil {
		t.Fatal(err)
	}
	key, err := product.CacheKey(ref, 0)
	if err != nil {
		t.Fatal(err)
	}
	path := "/v1/tenants/acme/products/p-00005?locale=fr-FR&currency=USD"
	c := herdClient(2)
	defer c.CloseIdleConnections()
	get := func(base string) (int, string) {
		code, body, _ := timedDo(t, c, "GET", base+path, "")
		return code, body
	}

	// The genuine product, as the database has it, through an instance
	// without a key (which writes it to Redis, unauthenticated).
	plainURL, _ := startInProcess(t, base)
	code, genuine := get(plainURL)
	if code != http.StatusOK {
		t.Fatalf("GET: %d %s", code, genuine)
	}
	stored, found, err := forger.Get(ctx, key)
	if err != nil || !found {
		t.Fatalf("the product's entry is not where the test looks for it: %v, %v", found, err)
	}
	var entry product.Entry
	if err := json.Unmarshal(stored.Value, &entry); err != nil {
		t.Fatal(err)
	}
	// The forgery: another price and name, fresh for a day.
	entry.Product.PriceCents = 1
	entry.Product.DisplayName = "FORGED"
	entry.FreshUntil = time.Now().Add(24 * time.Hour)
	stored.Value, _ = json.Marshal(entry)
	stored.LoadedAt = time.Now()
	stored.FreshUntil = entry.FreshUntil
	stored.StaleUntil = entry.FreshUntil
	if err := forger.Set(ctx, key, stored); err != nil {
		t.Fatal(err)
	}

	// Premise: an instance without a key serves the forgery from Redis.
	plain2URL, plain2 := startInProcess(t, base)
	if code, body := get(plain2URL); code != http.StatusOK || !strings.Contains(body, "FORGED") || plain2.OriginQueries() != 0 {
		t.Fatalf("instance without a key: %d %s after %d origin queries; want the forgery served from Redis", code, body, plain2.OriginQueries())
	}

	keyed := base
	keyed.RedisEntryKeyFile = writeKeyFile(t, "# current key first\n"+testEntryKey+"\n\n"+testEntryKeyOld+"\n")
	keyedURL, _ := startInProcess(t, keyed)
	code, body := get(keyedURL)
	if code != http.StatusOK || strings.Contains(body, "FORGED") {
		t.Fatalf("instance with a key: %d %s; want the genuine product, not the forgery", code, body)
	}
	if q := metric(t, c, keyedURL, OriginQueriesMetric); q != 1 {
		t.Fatalf("%s = %v on the instance with a key, want 1 (the forgery refused, the product loaded from the database)", OriginQueriesMetric, q)
	}
	var got, want product.Product
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(genuine), &want); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("instance with a key served %s, want the database's product %s", body, genuine)
	}
	// Its write-back replaced the forgery with an entry it authenticates:
	// a second instance with the key serves it from Redis.
	keyed2URL, _ := startInProcess(t, keyed)
	if code, body := get(keyed2URL); code != http.StatusOK || strings.Contains(body, "FORGED") {
		t.Fatalf("second instance with a key: %d %s", code, body)
	}
	if q := metric(t, c, keyed2URL, OriginQueriesMetric); q != 0 {
		t.Fatalf("%s = %v on the second instance with a key, want 0 (the first one's entry served from Redis)", OriginQueriesMetric, q)
	}
}

func TestEntryKeysFromTheFlags(t *testing.T) {
	file := writeKeyFile(t, "# rotation: new key first\n  "+testEntryKey+"  \n\n"+strings.ToUpper(testEntryKeyOld)+"\n")
	c, err := ParseFlags([]string{"-redis", "redis://127.0.0.1:6379/0", "-redis-entry-key-file", file}, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := c.EntryKeys()
	if err != nil || len(keys) != 2 || len(keys[0]) != 32 || len(keys[1]) != 16 || keys[0][0] != 0x6b || keys[1][0] != 0x01 {
		t.Fatalf("EntryKeys = %x, %v; want the file's two keys in order", keys, err)
	}
	c, err = ParseFlags([]string{"-redis", "redis://127.0.0.1:6379/0"}, env(map[string]string{"PRODUCTD_REDIS_ENTRY_KEY": testEntryKey}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := c.EntryKeys(); err != nil || len(keys) != 1 || len(keys[0]) != 32 {
		t.Fatalf("EntryKeys from the environment = %x, %v", keys, err)
	}
	if keys, err := Default().EntryKeys(); keys != nil || err != nil {
		t.Fatalf("EntryKeys by default = %x, %v; want none", keys, err)
	}
}

// Bad entry-key settings are refused with an error that names the flag
// and, for a file, the line, but never shows a key or part of one.
func TestBadEntryKeysAreRefusedWithoutShowingThem(t *testing.T) {
	const secretish = "73656372657473656372657473656372" // hex of "secretsecretsecr"
	redisFlag := []string{"-redis", "redis://127.0.0.1:6379/0"}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"short key", append(redisFlag, "-redis-entry-key", secretish[:30]), nil, "-redis-entry-key"},
		{"key not hex", append(redisFlag, "-redis-entry-key", "zz"+secretish), nil, "-redis-entry-key"},
		{"short key in the environment", redisFlag, map[string]string{"PRODUCTD_REDIS_ENTRY_KEY": secretish[:30]}, "-redis-entry-key"},
		{"file line not hex", append(redisFlag, "-redis-entry-key-file", writeKeyFile(t, testEntryKey+"\n"+secretish+"g\n")), nil, "line 2"},
		{"file line short", append(redisFlag, "-redis-entry-key-file", writeKeyFile(t, secretish[:30]+"\n")), nil, "line 1"},
		{"file without a key", append(redisFlag, "-redis-entry-key-file", writeKeyFile(t, "# none yet\n\n")), nil, "no key"},
		{"missing file", append(redisFlag, "-redis-entry-key-file", filepath.Join(t.TempDir(), "absent")), nil, "-redis-entry-key-file"},
		{"both flags", append(redisFlag, "-redis-entry-key", secretish, "-redis-entry-key-file", writeKeyFile(t, testEntryKey)), nil, "not both"},
		{"without -redis", []string{"-redis-entry-key", secretish}, nil, "need -redis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseFlags(tc.args, env(tc.env), &bytes.Buffer{})
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			for _, part := range []string{secretish[:8], secretish[8:16], testEntryKey[:8], "secret"} {
				if strings.Contains(err.Error(), part) {
					t.Fatalf("error %q shows part of a key (%q)", err, part)
				}
			}
		})
	}
}

// -h documents both flags and never shows the key, not even as a default
// taken from the environment.
func TestHelpNeverShowsTheEntryKey(t *testing.T) {
	var out bytes.Buffer
	_, err := ParseFlags([]string{"-h"}, env(map[string]string{"PRODUCTD_REDIS_ENTRY_KEY": testEntryKey}), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, want := range []string{"-redis-entry-key-file", "PRODUCTD_REDIS_ENTRY_KEY_FILE", "-redis-entry-key ", "PRODUCTD_REDIS_ENTRY_KEY)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h does not mention %q", want)
		}
	}
	if strings.Contains(out.String(), testEntryKey[:8]) {
		t.Fatalf("-h shows the entry key:\n%s", out.String())
	}
}

// An entry in Redis claiming to be fresh for a day (forged here, or written
// by an instance with a longer -cache-ttl) is served from an instance's
// memory for at most -cache-ttl after it was loaded (the time it records):
// then the instance asks Redis again (Cache-Status detail=shared) instead of
// answering from memory. Reading it does not renew it.
func TestEndToEndEntryClaimingADayIsFreshInMemoryAtMostCacheTTL(t *testing.T) {
	t.Parallel()
	addr := testenv.RequireRedis(t)
	// Long enough that the first GET, on a loaded host, reads the entry
	// before it is too old to be fresh.
	const ttl = 3 * time.Second
	cfg := Default()
	cfg.WriteToken = testWriteToken
	cfg.DB = filepath.Join(t.TempDir(), "products.db")
	cfg.Catalog = &testCatalog
	cfg.Redis = "redis://" + addr + "/0"
	cfg.RedisPrefix = testenv.UniqueName("productd-maxttl-") + ":"
	cfg.RedisTimeout = sharedTimeoutUnderLoad
	cfg.TTL = ttl
	cfg.NegativeTTL = ttl
	cfg.BusDownTTL = ttl
	t.Cleanup(func() {
		cleanRedisPrefix(t, addr, cfg.RedisPrefix)
	})
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	forger, err := redisstore.New(rdb, redisstore.Options{Prefix: cfg.RedisPrefix, HashTag: true})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := product.NewRef("acme", "p-00005", "fr-FR", "USD")
	if err != nil {
		t.Fatal(err)
	}
	key, err := product.CacheKey(ref, 0)
	if err != nil {
		t.Fatal(err)
	}

	url, _ := startInProcess(t, cfg)
	// Up first: a bus coming up may empty the memory tier once.
	waitBus(t, url, "up", 10*time.Second)
	c := herdClient(1)
	defer c.CloseIdleConnections()
	cacheStatus := func() string {
		resp, err := c.Get(url + "/v1/tenants/acme/products/p-00005?locale=fr-FR&currency=USD")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: %d", resp.StatusCode)
		}
		return resp.Header.Get("Cache-Status")
	}

	loaded := time.Now()
	day := loaded.Add(24 * time.Hour)
	value, _ := json.Marshal(product.Entry{Product: product.Product{
		ProductID: "p-00005", TenantID: "acme", DisplayName: "claims a day", PriceCents: 1, Currency: "USD", Locale: "fr-FR",
	}, FreshUntil: day})
	if err := forger.Set(ctx, key, redisEntry(value, loaded, day)); err != nil {
		t.Fatal(err)
	}
	cs := cacheStatus()
	if !strings.Contains(cs, "hit") || !strings.Contains(cs, "detail=shared") {
		t.Fatalf("first GET %v after the entry's load: Cache-Status %q, want a hit from Redis", time.Since(loaded), cs)
	}
	// The header never claims the entry's day either: at most -cache-ttl.
	if _, rest, ok := strings.Cut(cs, "ttl="); !ok {
		t.Fatalf("first GET: Cache-Status %q has no ttl", cs)
	} else if n, err := strconv.Atoi(strings.SplitN(rest, ";", 2)[0]); err != nil || n > int(ttl.Seconds()) || n <= 0 {
		t.Fatalf("first GET: Cache-Status %q claims ttl %d (%v), want a fresh value, at most %d", cs, n, err, int(ttl.Seconds()))
	}
	if cs := cacheStatus(); time.Since(loaded) < ttl/2 && (!strings.Contains(cs, "hit") || strings.Contains(cs, "detail=shared")) {
		t.Fatalf("second GET at once: Cache-Status %q, want a hit from memory", cs)
	}
	// The memory copy may live -cache-ttl from the load, and no longer:
	// wait that long (with a margin for the coarse clock), then it is gone,
	// and so is the freshness of the entry still in Redis, which is just
	// as old: the instance loads the product.
	for time.Since(loaded) < ttl+100*time.Millisecond {
		time.Sleep(20 * time.Millisecond)
	}
	if cs := cacheStatus(); !strings.Contains(cs, "fwd=miss") {
		t.Fatalf("GET %v after the entry's load: Cache-Status %q, want a load (fwd=miss): the entry is fresh at most -cache-ttl %v from its load, in memory and in Redis", time.Since(loaded), cs, ttl)
	}
}
