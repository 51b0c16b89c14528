package productd

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
)

// Every form of -redis end to end: productd processes on one fresh
// PostgreSQL database and a private Redis deployment of the form (TLS,
// ACL user, Cluster, Cluster node given alone, Sentinel), each checked to
// serve and cache a product through that Redis and to carry a PUT on one
// instance to the other over the invalidation bus.

// formVariant is the product variant the form tests read and update.
var formVariant = variant{"globex", "p-00003", "de-DE", "EUR"}

// formArgs are the flags of every instance of a form test: a fresh
// database, redisURL under a prefix of the test's own, a long TTL (only
// the bus can make an instance drop its copy within the test).
func formArgs(t *testing.T, redisURL string, extra ...string) []string {
	t.Helper()
	return append([]string{"-db", testenv.PostgresDB(t), "-redis", redisURL,
		"-redis-prefix", testenv.UniqueName("productd-forms-") + ":", "-seed-products", "20",
		"-cache-ttl", "5m", "-failure-throttle", "0", "-redis-timeout", redisTimeoutUnderLoad, steadyBus[0], steadyBus[1]}, extra...)
}

// checkForm checks two instances started on one form of -redis: both
// ready with Redis up and the bus up; a product A loads is served by B
// from the shared tier (one origin query in all) and by A from memory; a
// PUT on A shows on B, whose copy was in memory, within a few seconds;
// and secret shows in no log line, /readyz or /metrics.
func checkForm(t *testing.T, ps []*process, secret string) {
	t.Helper()
	a, b := ps[0], ps[1]
	logsOnFailure(t, a, b)
	c := herdClient(2)
	defer c.CloseIdleConnections()
	for _, p := range ps {
		code, rb := getReadyBus(t, p.url)
		if code != http.StatusOK || rb.Dependencies["redis"] != "up" || rb.Bus != "up" || rb.Coalescing != CoalesceCluster {
			t.Fatalf("/readyz of %s: %d %+v, want ready, redis up, bus up, cluster coalescing", p.url, code, rb)
		}
	}

	first := get(c, a.url+formVariant.path())
	second := get(c, b.url+formVariant.path())
	again := get(c, a.url+formVariant.path())
	for _, x := range []answer{first, second, again} {
		if x.err != nil || x.status != http.StatusOK || x.body != first.body {
			t.Fatalf("GETs of %s: %d %q / %d %q / %d %q (%v %v %v), want one 200 body",
				formVariant.path(), first.status, first.body, second.status, second.body, again.status, again.body, first.err, second.err, again.err)
		}
	}
	if q := sumMetric(t, c, ps, OriginQueriesMetric); q != 1 {
		t.Fatalf("%v origin queries for one product read on both instances, want 1 (Cache-Status A %q, B %q, A again %q)",
			q, first.cache, second.cache, again.cache)
	}
	if !strings.Contains(second.cache, "detail=shared") || !strings.HasPrefix(again.cache, "flightcache; hit") {
		t.Fatalf("Cache-Status B %q, A again %q: want a shared hit on B and a hit on A", second.cache, again.cache)
	}

	old := getRow(t, c, b.url+formVariant.path())
	price := old.price + 100
	if _, err := put(c, a, formVariant, price); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r := getRow(t, c, b.url+formVariant.path()); r.price != price; r = getRow(t, c, b.url+formVariant.path()) {
		if time.Now().After(deadline) {
			t.Fatalf("10s after a PUT of price %d on A, B still serves price %d (%s)", price, r.price, r.cache)
		}
		time.Sleep(10 * time.Millisecond) // polling another process's cache, which the bus updates
	}

	if secret == "" {
		return
	}
	for _, p := range ps {
		for _, path := range []string{"/readyz", "/metrics"} {
			if x := get(c, p.url+path); strings.Contains(x.body, secret) {
				t.Fatalf("%s of %s shows the Redis password", path, p.url)
			}
		}
		all, _ := p.logLines()
		for _, l := range all {
			if strings.Contains(l, secret) {
				t.Fatalf("a log line shows the Redis password: %s", l)
			}
		}
	}
}

// startupFails runs productd with args, which must make it exit with an
// error before it listens, and returns what it wrote.
func startupFails(t *testing.T, args ...string) string {
	t.Helper()
	bin := productdBinary(t) // built before the deadline starts: a cold build is slow
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-addr", "127.0.0.1:0", "-log-format", "json"}, args...)...)
	// A write token, so that the only thing wrong is what args say (the
	// value of the tests' testWriteToken, where productd asks for one).
	cmd.Env = append(os.Environ(), "PRODUCTD_WRITE_TOKEN=test-write-token-0123456789abcdef")
	out, err := cmd.CombinedOutput()
	s := string(out)
	switch {
	case ctx.Err() != nil:
		t.Fatalf("productd %v did not exit within 60s: %s", args, s)
	case err == nil:
		t.Fatalf("productd %v exited 0: %s", args, s)
	case strings.Contains(s, "productd listening"):
		t.Fatalf("productd %v started: %s", args, s)
	case strings.Contains(s, "panic:") || strings.Contains(s, "goroutine "):
		t.Fatalf("productd %v panicked: %s", args, s)
	}
	return s
}

// tmpDB is a SQLite file of the test's own: the startup failures stop
// before it is opened, and nothing is left behind if they do not.
func tmpDB(t *testing.T) string { return filepath.Join(t.TempDir(), "products.db") }

// requireSays fails unless out says every one of words and none of
// secrets.
func requireSays(t *testing.T, out string, words []string, secrets ...string) {
	t.Helper()
	for _, w := range words {
		if !strings.Contains(out, w) {
			t.Fatalf("startup error does not say %q:\n%s", w, out)
		}
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Fatalf("startup error shows a secret:\n%s", out)
		}
	}
}

// rediss:// with -redis-ca: the server's certificate is checked against
// the CA; without -redis-ca (the system's roots) or with another CA it is
// refused at startup; a server that asks for a client certificate gets
// -redis-cert and -redis-key.
func TestRedisFormTLS(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedisTLS(t, false)
	url := "rediss://" + srv.Addr + "/0"
	ps := startInstances(t, 2, formArgs(t, url, "-redis-ca", srv.CAFile)...)
	checkForm(t, ps, "")

	out := startupFails(t, "-db", tmpDB(t), "-redis", url)
	requireSays(t, out, []string{"-redis", "certificate"})
	out = startupFails(t, "-db", tmpDB(t), "-redis", url, "-redis-ca", srv.OtherCAFile)
	requireSays(t, out, []string{"-redis", "certificate"})
	out = startupFails(t, "-db", tmpDB(t), "-redis", "redis://"+srv.Addr+"/0")
	requireSays(t, out, []string{"-redis", "does not answer at startup"})
}

func TestRedisFormTLSClientCertificate(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedisTLS(t, true)
	url := "rediss://" + srv.Addr + "/0"
	out := startupFails(t, "-db", tmpDB(t), "-redis", url, "-redis-ca", srv.CAFile)
	requireSays(t, out, []string{"-redis"})
	ps := startInstances(t, 2, formArgs(t, url, "-redis-ca", srv.CAFile, "-redis-cert", srv.ClientCertFile, "-redis-key", srv.ClientKeyFile)...)
	checkForm(t, ps, "")
}

// An ACL user and password in the URL: productd gets in with them only
// (the server's default user is off), and never shows the password; a
// wrong password is refused at startup with an error that says so
// without showing either password.
func TestRedisFormACLUser(t *testing.T) {
	t.Parallel()
	const user, pass = "productd", "acl-s3cret-pw"
	srv := testenv.StartRedisACL(t, user, pass)
	ps := startInstances(t, 2, formArgs(t, "redis://"+user+":"+pass+"@"+srv.Addr+"/0")...)
	checkForm(t, ps, pass)

	out := startupFails(t, "-db", tmpDB(t), "-redis", "redis://"+user+":wr0ng-pw@"+srv.Addr+"/0")
	requireSays(t, out, []string{"-redis", "refused productd's credentials", "WRONGPASS"}, "wr0ng-pw", pass)
	out = startupFails(t, "-db", tmpDB(t), "-redis", "redis://"+srv.Addr+"/0")
	requireSays(t, out, []string{"-redis", "credentials"}, pass)
}

// A Redis Cluster in each of its forms: a seed list with redis://, one
// seed with redis+cluster://, and one node's address given alone, which
// productd detects and switches to the Cluster client for. Every product
// is served (no MOVED), and a product created on one instance is seen by
// the other (the Bloom guard's recent-creations keys share a slot).
func TestRedisFormCluster(t *testing.T) {
	t.Parallel()
	addrs := testenv.StartRedisCluster(t, 3)
	for _, tc := range []struct{ name, url string }{
		{"seed list", "redis://" + strings.Join(addrs, ",")},
		{"redis+cluster", "redis+cluster://" + addrs[1] + "/0"},
		{"one node alone", "redis://" + addrs[2] + "/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := startInstances(t, 2, formArgs(t, tc.url)...)
			checkForm(t, ps, "")
			c := herdClient(2)
			defer c.CloseIdleConnections()
			// Every product A loads, B serves from the shared tier: the keys
			// of every master's slots work (a plain client on one node
			// would get MOVED for about two thirds of them, and B would
			// query the origin).
			before := sumMetric(t, c, ps, OriginQueriesMetric)
			for i := 1; i <= 20; i++ {
				path := fmt.Sprintf("/v1/tenants/acme/products/p-%05d?locale=en-US&currency=USD", i)
				for j, p := range ps {
					x := get(c, p.url+path)
					if x.err != nil || x.status != http.StatusOK {
						t.Fatalf("GET %s on %s: %d %v %s", path, p.url, x.status, x.err, x.body)
					}
					if j == 1 && !strings.Contains(x.cache, "detail=shared") {
						t.Fatalf("GET %s on B after A loaded it: Cache-Status %q, want a shared hit", path, x.cache)
					}
				}
			}
			if q := sumMetric(t, c, ps, OriginQueriesMetric) - before; q != 20 {
				t.Fatalf("%v origin queries for 20 products read on both instances, want 20", q)
			}
			id := fmt.Sprintf("created-%d", time.Now().UnixNano())
			createProduct(t, c, ps[0].url, id)
			if code, cs := getProduct(t, c, ps[1].url, id); code != http.StatusOK {
				t.Fatalf("a product created on A: B answered %d (%s), want 200", code, cs)
			}
			for i, p := range ps {
				all, _ := p.logLines()
				switched := 0
				for _, l := range all {
					if strings.Contains(l, "MOVED") || strings.Contains(l, "CROSSSLOT") {
						t.Fatalf("instance %d logged a Cluster redirection or cross-slot error: %s", i, l)
					}
					if strings.Contains(l, "-redis is a Redis Cluster node") {
						switched++
					}
				}
				if want := map[bool]int{true: 1, false: 0}[tc.name == "one node alone"]; switched != want {
					t.Fatalf("instance %d logged the switch to the Cluster client %d times, want %d", i, switched, want)
				}
			}
		})
	}
}

// Sentinel: productd follows the master the Sentinel names, with the
// master's password from the URL; after a failover it writes to the new
// master and the bus carries PUTs again.
func TestRedisFormSentinel(t *testing.T) {
	t.Parallel()
	const pass = "m4ster-s3cret"
	s := testenv.StartRedisSentinel(t, testenv.SentinelOptions{MasterName: "products", Password: pass})
	url := "redis+sentinel://:" + pass + "@" + s.Sentinel.Addr + "/products"
	ps := startInstances(t, 2, formArgs(t, url)...)
	checkForm(t, ps, pass)

	out := startupFails(t, "-db", tmpDB(t), "-redis", "redis+sentinel://:"+pass+"@"+s.Sentinel.Addr+"/nosuchmaster")
	requireSays(t, out, []string{"-redis", "nosuchmaster"}, pass)
	out = startupFails(t, "-db", tmpDB(t), "-redis", "redis://"+s.Sentinel.Addr)
	requireSays(t, out, []string{"-redis", "is a Redis Sentinel", "redis+sentinel://"})

	s.Failover(60 * time.Second)
	awaitBus(t, ps...)
	c := herdClient(2)
	defer c.CloseIdleConnections()
	// A load after the failover is stored in the shared tier: on the new
	// master, the old one being a read-only replica now. Each try reads a
	// product not read before (a value stored in memory only would answer
	// the next read of the same one).
	stored := ""
	for i := 10; i <= 20 && stored == ""; i++ {
		x := get(c, ps[0].url+fmt.Sprintf("/v1/tenants/acme/products/p-%05d?locale=en-US&currency=USD", i))
		if x.status == http.StatusOK && strings.Contains(x.cache, "stored") && !strings.Contains(x.cache, "failed") {
			stored = x.cache
			break
		}
		time.Sleep(500 * time.Millisecond) // polling a failover of external processes
	}
	if stored == "" {
		t.Fatal("no load was stored in the shared tier after the failover")
	}
	if _, err := put(c, ps[0], formVariant, 777); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r := getRow(t, c, ps[1].url+formVariant.path()); r.price != 777; r = getRow(t, c, ps[1].url+formVariant.path()) {
		if time.Now().After(deadline) {
			t.Fatalf("10s after a PUT on A after the failover, B still serves price %d (%s), want 777", r.price, r.cache)
		}
		time.Sleep(10 * time.Millisecond) // polling another process's cache, which the bus updates
	}
}

// Malformed -redis values and TLS files stop productd at startup with an
// error naming the flag, never with a panic, never with the password.
func TestRedisBadFormsRefusedAtStartup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		says []string
	}{
		{[]string{"-redis", "ftp://u:s3cret@h:1"}, []string{"-redis", "unknown scheme"}},
		{[]string{"-redis", "redis://u:s3cret@"}, []string{"-redis", "names no host"}},
		{[]string{"-redis", "redis://u:s3cret@h:70000"}, []string{"-redis", "port"}},
		{[]string{"-redis", "redis+sentinel://u:s3cret@h:26379"}, []string{"-redis", "names no master"}},
		{[]string{"-redis", "rediss://u:s3cret@h:1", "-redis-ca", "/nonexistent/ca.pem"}, []string{"-redis-ca", "cannot read"}},
		{[]string{"-redis", "redis://u:s3cret@h:1", "-redis-ca", "/nonexistent/ca.pem"}, []string{"-redis-ca", "does not use TLS"}},
	} {
		out := startupFails(t, append([]string{"-db", tmpDB(t)}, tc.args...)...)
		requireSays(t, out, tc.says, "s3cret")
	}
	// A plain Redis named as a Cluster or as a Sentinel.
	plain := testenv.StartRedis(t)
	out := startupFails(t, "-db", tmpDB(t), "-redis", "redis+cluster://"+plain.Addr)
	requireSays(t, out, []string{"-redis", "is not a Redis Cluster (cluster_enabled:0)"})
	out = startupFails(t, "-db", tmpDB(t), "-redis", "redis://"+plain.Addr+","+plain.Addr)
	requireSays(t, out, []string{"-redis", "is not a Redis Cluster (cluster_enabled:0)"})
	out = startupFails(t, "-db", tmpDB(t), "-redis", "redis+sentinel://"+plain.Addr+"/products")
	requireSays(t, out, []string{"-redis", "not Redis Sentinels"})
}
