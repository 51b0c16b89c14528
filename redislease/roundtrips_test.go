package redislease

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// roundTripHook records every round trip of a client (a command, or a
// pipeline: one each) that names a key or channel containing mark.
type roundTripHook struct {
	mu    sync.Mutex
	mark  string
	trips []string
}

func (h *roundTripHook) record(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mark == "" {
		return
	}
	var names []string
	touches := false
	for _, c := range cmds {
		names = append(names, c.Name())
		for _, a := range c.Args() {
			if s, ok := a.(string); ok && strings.Contains(s, h.mark) {
				touches = true
			}
		}
	}
	if touches {
		h.trips = append(h.trips, strings.Join(names, "+"))
	}
}

func (h *roundTripHook) watch(mark string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mark, h.trips = mark, nil
}

func (h *roundTripHook) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.trips...)
}

func (h *roundTripHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}
func (h *roundTripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.record(cmds...)
		return next(ctx, cmds)
	}
}

// A cold miss of one instance in cluster mode, with nobody else asking,
// costs its leader four Redis round trips, counted on a real client: the
// shared read, the flight's double-check, the acquire script, and the
// complete script, which also makes the fenced write, writes the done
// marker, releases the lease and publishes to the key's followers.
func TestColdMissInClusterModeCostsFourRoundTrips(t *testing.T) {
	addr, prefix := sharedRedis(t)
	hook := &roundTripHook{}
	in := newInstance(t, newClient(t, addr, hook), prefix, instanceConfig{})
	ctx := context.Background()
	load := func(context.Context) (string, error) { return "v", nil }
	// The scripts are loaded (a first EVALSHA answers NOSCRIPT, then EVAL)
	// by a miss of another key.
	if _, err := in.cache.Fetch(ctx, "warm-up", load); err != nil {
		t.Fatal(err)
	}
	hook.watch("cold-key")
	res, err := in.cache.Fetch(ctx, "cold-key", load)
	if err != nil || res.Value != "v" {
		t.Fatalf("cold Fetch: %v %v", res.Value, err)
	}
	trips := hook.seen()
	want := []string{"get", "get", "evalsha", "evalsha"}
	if fmt.Sprint(trips) != fmt.Sprint(want) {
		t.Fatalf("a cold miss made %d round trips %q, want %d %q", len(trips), trips, len(want), want)
	}
	t.Logf("a cold miss in cluster mode: %d round trips %q (outcome %v)", len(trips), trips, res.Outcome)
}
