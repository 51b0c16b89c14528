package bench_test

// Helpers of the benchmarks, copied from the tests of the core and of
// redisstore (another module's tests cannot be imported).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/redis/go-redis/v9"
)

type product struct {
	ID    string
	Name  string
	Price int
}

// guardFunc adapts a function to driver.Guard.
type guardFunc func(key string) bool

func (g guardFunc) MayExist(_ context.Context, key string) bool { return g(key) }

// newRedisClient connects to the real Redis the benchmarks need, with
// hooks around the real client. testenv.RequireRedis skips without a
// server, or fails when CI=true.
func newRedisClient(tb testing.TB, hooks ...redis.Hook) *redis.Client {
	tb.Helper()
	client := redis.NewClient(&redis.Options{Addr: testenv.RequireRedis(tb), ContextTimeoutEnabled: true})
	for _, h := range hooks {
		client.AddHook(h)
	}
	tb.Cleanup(func() { client.Close() })
	return client
}

// uniquePrefix gives each benchmark its own key space.
func uniquePrefix(tb testing.TB) string {
	var b [6]byte
	rand.Read(b[:])
	name := strings.NewReplacer("/", ".", " ", "_").Replace(tb.Name())
	return "fctest:" + name + ":" + hex.EncodeToString(b[:]) + ":"
}

func newRedisStore(tb testing.TB, client redis.UniversalClient, prefix string) *redisstore.Store {
	tb.Helper()
	s, err := redisstore.New(client, redisstore.Options{Prefix: prefix})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cleanPrefix(tb, client, prefix) })
	return s
}

// cleanPrefix deletes the benchmark's keys under prefix (SCAN, not KEYS:
// the shared Redis is not blocked while it walks).
func cleanPrefix(tb testing.TB, client redis.UniversalClient, prefix string) {
	ctx := context.Background()
	iter := client.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		client.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		tb.Errorf("clean up the benchmark's keys: %v", err)
	}
}

// roundTrips is a redis.Hook that counts round trips: every command sent on
// its own and every pipeline (connection set-up left out).
type roundTrips struct {
	mu sync.Mutex
	n  int
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name != "hello" && name != "client" {
			h.mu.Lock()
			h.n++
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if name := cmds[0].Name(); name != "hello" && name != "client" {
			h.mu.Lock()
			h.n++
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// reset returns the round trips counted since the last reset.
func (h *roundTrips) reset() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.n
	h.n = 0
	return n
}

// reportCPU starts counting the CPU time the process spends (user and
// system, from getrusage) and returns the function that reports it per
// operation as cpu-ns/op. On a machine that other processes keep busy,
// wall time measures the wait for a core as much as the work; CPU time
// measures the work (the test binary's other goroutines included, which
// these benchmarks keep idle).
func reportCPU(b *testing.B) func() {
	start := cpuTime(b)
	return func() {
		b.ReportMetric(float64((cpuTime(b)-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
