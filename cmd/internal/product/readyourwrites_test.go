package product

import (
	"context"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/redis/go-redis/v9"
)

// instance is one process's view: its own memory tier and revision floors,
// the shared Redis and origin of every instance.
func newInstance(t *testing.T, repo Repository, rdb *redis.Client, prefix string) *QueryService {
	t.Helper()
	local, err := memstore.New(memstore.Options[Entry]{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Close)
	shared, err := redisstore.New(rdb, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	c, err := flightcache.New(flightcache.Options[Entry]{Local: local, Shared: shared, TTL: time.Hour, NegativeTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	svc, err := NewQueryService(repo, ServiceOptions{Cache: c, TTL: time.Hour, NegativeTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// Two instances share an origin and a Redis, update one row in turn, read
// it after every update on both, and one of them restarts (new memory, no
// floors) every few rounds. After an update returns on an instance, that
// instance's reads return that revision or a newer one: no instance, and
// no earlier run, ever left data of another revision under a key it reads.
func TestReadYourWritesHoldsAcrossInstancesSharingRedisAndRestarts(t *testing.T) {
	addr := testenv.RequireRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	prefix := testenv.UniqueName("flightcache-test-ryw-") + ":"
	t.Cleanup(func() {
		// SCAN, not KEYS: the shared Redis is not blocked while it walks.
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("clean up the test's keys: %v", err)
		}
	})
	repo := NewMemoryRepository(smallCatalog)
	ctx := context.Background()
	ref := Ref{Tenant: "acme", ID: ProductID(5), Locale: "en-US", Currency: "USD"}
	inst := [2]*QueryService{newInstance(t, repo, rdb, prefix), newInstance(t, repo, rdb, prefix)}
	for _, s := range inst { // both cache revision 0 everywhere
		if _, err := s.Get(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 24 {
		w := round % 2
		if round%5 == 4 {
			inst[w] = newInstance(t, repo, rdb, prefix) // a restart
		}
		price := int64(1000 + round)
		up, err := inst[w].Update(ctx, ref, Patch{PriceCents: &price})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			sv, err := inst[w].Get(ctx, ref)
			if err != nil {
				t.Fatal(err)
			}
			if sv.Product.Revision < up.Revision {
				t.Fatalf("round %d: instance %d read revision %d (price %d) after its update to revision %d returned",
					round, w, sv.Product.Revision, sv.Product.PriceCents, up.Revision)
			}
		}
		// The other instance reads too, filling Redis under its own keys.
		if _, err := inst[1-w].Get(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
}
