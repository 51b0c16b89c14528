package productd

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/redis/go-redis/v9"
)

func TestBloomFlagsFollowTheEnvironment(t *testing.T) {
	vars := map[string]string{"PRODUCTD_BLOOM": "false", "PRODUCTD_BLOOM_REBUILD": "3m"}
	c, err := ParseFlags(nil, env(vars), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Bloom || c.BloomRebuild != 3*time.Minute {
		t.Fatalf("Bloom %v, BloomRebuild %v; want the environment's false and 3m", c.Bloom, c.BloomRebuild)
	}
	if d := Default(); !d.Bloom || d.BloomFPRate != 0.01 {
		t.Fatalf("defaults: Bloom %v, BloomFPRate %v; want on at 1 %%", d.Bloom, d.BloomFPRate)
	}
	for _, args := range [][]string{{"-bloom-rebuild", "0s"}, {"-bloom-fp-rate", "1"}, {"-bloom-expected", "0"}} {
		if _, err := ParseFlags(args, env(nil), io.Discard); err == nil {
			t.Errorf("ParseFlags(%v) accepted an out-of-range value", args)
		}
	}
}

// A lookup Redis does not answer leaves the decision to the filter, built
// from the origin (see penetrationGuard), and tells the guard once per
// episode, for an early rebuild.
func TestRecentCreationsLookupFailureLeavesTheFilterToDecide(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	troubles := 0
	r := &recentCreations{rdb: rdb, prefix: "x:", keep: time.Minute, timeout: time.Second, onTrouble: func() { troubles++ }}
	r.trust("e1")
	for range 3 {
		if r.contains(context.Background(), "acme", "p-1") {
			t.Fatal("a failed lookup answered maybe: Redis trouble would send every made-up id to the origin")
		}
	}
	if troubles != 1 {
		t.Fatalf("three failed lookups called onTrouble %d times, want once", troubles)
	}
	if err := r.record(context.Background(), "acme", "p-1"); err == nil {
		t.Fatal("record reported success without Redis")
	}
}

func TestRecentCreationsKeepOnlyTheRecentWindow(t *testing.T) {
	addr := testenv.RequireRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	r := &recentCreations{rdb: rdb, prefix: testenv.UniqueName("productd-recent-") + ":", keep: time.Minute, timeout: time.Second}
	t.Cleanup(func() { rdb.Del(context.Background(), r.key("acme"), r.epochKey()) })
	epoch, err := r.adopt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r.trust(epoch)
	if r.contains(ctx, "acme", "p-1") {
		t.Fatal("an id never recorded answered maybe")
	}
	if err := r.record(ctx, "acme", "p-1"); err != nil {
		t.Fatal(err)
	}
	if !r.contains(ctx, "acme", "p-1") {
		t.Fatal("a recorded id answered no")
	}
	if r.contains(ctx, "globex", "p-1") {
		t.Fatal("an id recorded for acme answered maybe for globex")
	}
	old := float64(time.Now().Add(-2 * time.Minute).UnixMilli())
	if err := rdb.ZAdd(ctx, r.key("acme"), redis.Z{Score: old, Member: "p-old"}).Err(); err != nil {
		t.Fatal(err)
	}
	if r.contains(ctx, "acme", "p-old") {
		t.Fatal("an id recorded longer than keep ago answered maybe")
	}
	if err := r.record(ctx, "acme", "p-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := rdb.ZScore(ctx, r.key("acme"), "p-old").Result(); err != redis.Nil {
		t.Fatalf("record did not trim the old entry: %v", err)
	}
	if ttl := rdb.PTTL(ctx, r.key("acme")).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("set TTL %v, want (0, 1m]", ttl)
	}
}

// The sets are trusted only under the epoch the filter covers: an epoch
// gone or changed makes every id "maybe" and calls onLoss once, until the
// guard trusts the new epoch.
func TestRecentCreationsLostEpochAnswersMaybeUntilTrustedAgain(t *testing.T) {
	addr := testenv.RequireRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	losses := 0
	r := &recentCreations{rdb: rdb, prefix: testenv.UniqueName("productd-epoch-") + ":", keep: time.Minute, timeout: time.Second,
		onLoss: func() { losses++ }}
	t.Cleanup(func() { rdb.Del(context.Background(), r.key("acme"), r.epochKey()) })
	epoch, err := r.adopt(ctx)
	if err != nil || epoch == "" {
		t.Fatalf("adopt: %q, %v", epoch, err)
	}
	if again, err := r.adopt(ctx); err != nil || again != epoch {
		t.Fatalf("a second adopt answered %q, %v; want the first epoch %q", again, err, epoch)
	}
	r.trust(epoch)
	if r.contains(ctx, "acme", "p-1") {
		t.Fatal("an id never recorded answered maybe under the trusted epoch")
	}
	rdb.Del(ctx, r.epochKey()) // what a Redis restarted empty answers
	for range 2 {
		if !r.contains(ctx, "acme", "p-1") {
			t.Fatal("with the epoch gone, an id not in the set answered no")
		}
	}
	if losses != 1 {
		t.Fatalf("onLoss called %d times, want once", losses)
	}
	if err := r.record(ctx, "acme", "p-2"); err != nil {
		t.Fatal(err)
	}
	if !r.contains(ctx, "acme", "p-1") {
		t.Fatal("a record wrote a new epoch, and the sets were trusted again without a rebuild")
	}
	epoch, err = r.adopt(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r.trust(epoch)
	if r.contains(ctx, "acme", "p-1") || !r.contains(ctx, "acme", "p-2") {
		t.Fatal("under the adopted epoch the set did not answer from its contents")
	}
	rdb.Set(ctx, r.epochKey(), "other", 0) // a replica with another history
	if !r.contains(ctx, "acme", "p-1") || losses != 2 {
		t.Fatalf("a changed epoch: contains no or onLoss not called (%d)", losses)
	}
}
