package productd

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/flightcache/flightcache/internal/testenv"
)

// Two productd processes share PostgreSQL and Redis; PUTs to one product
// alternate between them, each followed by GETs on both, and one instance
// is restarted twice along the way. After a PUT returns on an instance,
// every later GET on that instance returns that revision or a newer one:
// neither the other instance nor an earlier run of the same one left data
// of another revision under a key it reads. (The other instance may still
// serve an older revision from its memory until the entry's TTL; that is
// the documented cross-instance bound, not checked here.)
func TestEndToEndReadYourWritesAcrossTwoInstancesAndRestarts(t *testing.T) {
	t.Parallel()
	dsn := testenv.PostgresDB(t)
	redisAddr := testenv.RequireRedis(t)
	prefix := testenv.UniqueName("productd-ryw-") + ":"
	args := []string{"-db", dsn, "-seed-products", "20", "-redis", "redis://" + redisAddr + "/0",
		"-redis-prefix", prefix, "-cache-ttl", "1h"}
	// The keys live an hour: delete them however the test ends.
	t.Cleanup(func() {
		cleanRedisPrefix(t, redisAddr, prefix)
	})
	inst := [2]*process{startProductd(t, args...), startProductd(t, args...)}
	c := herdClient(4)
	defer c.CloseIdleConnections()
	path := "/v1/tenants/globex/products/p-00007?locale=de-DE&currency=EUR"
	type row struct {
		PriceCents int64
		Revision   int64
	}
	get := func(p *process) row {
		t.Helper()
		code, body, _ := timedDo(t, c, "GET", p.url+path, "")
		var r row
		if code != http.StatusOK || json.Unmarshal([]byte(body), &r) != nil {
			t.Fatalf("GET: %d %s", code, body)
		}
		return r
	}
	for _, p := range inst { // both instances and Redis cache revision 0
		get(p)
	}
	for round := range 12 {
		w := round % 2
		if round == 5 || round == 9 {
			inst[w].stop(t)
			inst[w] = startProductd(t, args...)
		}
		price := int64(5000 + round)
		code, body, _ := timedDo(t, c, "PUT", inst[w].url+path, fmt.Sprintf(`{"priceCents": %d}`, price))
		var put row
		if code != http.StatusOK || json.Unmarshal([]byte(body), &put) != nil || put.PriceCents != price {
			t.Fatalf("round %d: PUT on instance %d: %d %s", round, w, code, body)
		}
		for range 3 {
			if got := get(inst[w]); got.Revision < put.Revision {
				t.Fatalf("round %d: instance %d answered revision %d (price %d) after its PUT of revision %d returned",
					round, w, got.Revision, got.PriceCents, put.Revision)
			}
		}
		get(inst[1-w]) // the other instance fills Redis under its own keys
	}
	for _, p := range inst {
		p.stop(t)
	}
}
