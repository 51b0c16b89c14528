package flightcache_test

import (
	"context"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
)

// In cluster mode a batch's loads are not leased, so their write-back to
// the shared tier could not be fenced: a batch that loaded before a Set on
// another instance could overwrite that Set. So a batch writes the values
// it loaded to the local tier only; the callers get them all the same, and
// the shared tier keeps whatever fenced writes put there.
func TestBatchInClusterModeNeverWritesTheSharedTierUnfenced(t *testing.T) {
	coord := &downCoordinator{}
	coord.up.Store(true)
	shared := newMapShared(time.Now)
	c := newCache(t, flightcache.Options[string]{Local: newLocal[string](t, nil), Shared: shared, Coordinator: coord})
	keys := []string{"p:1", "p:2", "p:3"}
	results := c.FetchMany(context.Background(), keys, func(ctx context.Context, keys []string) (map[string]string, error) {
		found := make(map[string]string, len(keys))
		for _, k := range keys {
			found[k] = "v-" + k
		}
		return found, nil
	})
	for i, r := range results {
		if r.Err != nil || r.Value != "v-"+keys[i] {
			t.Fatalf("key %s: %+v; want the loaded value", keys[i], r)
		}
	}
	if n := shared.sets.Load(); n != 0 {
		t.Fatalf("%d unfenced shared writes from a batch in cluster mode, want 0", n)
	}
	for _, k := range keys {
		if r, err := c.Fetch(context.Background(), k, nil); err != nil || r.Outcome != flightcache.OutcomeHitLocal {
			t.Fatalf("Fetch(%s) after the batch = %+v, %v; want a local hit", k, r, err)
		}
	}
}
