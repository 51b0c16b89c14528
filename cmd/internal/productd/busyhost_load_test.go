//go:build loadtest

package productd

import (
	"fmt"
	"os/exec"
	"runtime"
	"testing"

	"github.com/flightcache/flightcache/internal/testenv"
)

// Cluster herds with productd's own defaults (no -redis-timeout, no bus
// flags) on a host at load 10: GOMAXPROCS x 5 processes spin beside four
// instances and the test's herds of 1,000 requests. Each herd must make
// at most 2 origin queries: the defaults must not let a Redis round trip
// that a busy host delays count as a failure (the breaker opening, a
// Claim timing out and the instance loading on its own, the bus going
// down and emptying memory). Run by make load-test (minutes, and it
// loads the whole host: not part of make test, whose pin is
// TestDefaultsHoldTogetherOnABusyHost).
func TestClusterHerdsHoldWithTheDefaultsAtLoadTen(t *testing.T) {
	for i := range runtime.GOMAXPROCS(0) * 5 {
		burner := exec.Command("sh", "-c", "while :; do :; done")
		if err := burner.Start(); err != nil {
			t.Fatalf("CPU burner %d: %v", i, err)
		}
		t.Cleanup(func() { burner.Process.Kill(); burner.Wait() })
	}
	ps := startInstances(t, 4, "-db", testenv.PostgresDB(t), "-redis", sharedRedisURL(t),
		"-redis-prefix", testenv.UniqueName("productd-busy-")+":", "-seed-products", "20", "-origin-latency", "100ms")
	c := herdClient(herdSize)
	defer c.CloseIdleConnections()
	const herds = 8
	worse := 0
	before := sumMetric(t, c, ps, OriginQueriesMetric)
	for h := range herds {
		as := spreadHerd(t, c, ps, herdSize, fmt.Sprintf("/v1/tenants/acme/products/p-%05d?locale=en-US&currency=USD", h+1))
		requireOneBody(t, as)
		after := sumMetric(t, c, ps, OriginQueriesMetric)
		q := after - before
		before = after
		t.Logf("herd %d: %v origin queries; Cache-Status: %v", h+1, q, cacheKinds(as))
		if q > 2 {
			worse++
			t.Errorf("herd %d: %v origin queries for %d requests on 4 instances at load 10, want at most 2", h+1, q, herdSize)
		}
	}
	t.Logf("%d of %d herds made more than 2 origin queries", worse, herds)
}
