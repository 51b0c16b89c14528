package redislease

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightcache/flightcache/internal/testenv"
)

// writeClock records when the leader's fenced write (the complete script)
// came back from Redis.
type writeClock struct{ at atomic.Int64 }

func (h *writeClock) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *writeClock) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *writeClock) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); len(args) > 1 && args[0] == "evalsha" && args[1] == completeScript.Hash() {
			h.at.Store(time.Now().UnixNano())
		}
		return err
	}
}

// BenchmarkFollowerLatency measures, with 8 instances on loopback, the time
// from the leader's fenced write returning to each follower's Get
// returning: the pub/sub wake-up and the follower's look at the lease,
// which brings the stored value with it (read-or-claim). Each iteration is
// one key with seven followers.
func BenchmarkFollowerLatency(b *testing.B) {
	addr, prefix := sharedRedis(b)
	clock := &writeClock{}
	leader := newInstance(b, newClient(b, addr, clock), prefix, instanceConfig{})
	follow := &faultHook{following: make(chan struct{}, 16)}
	var followers []*instance
	for range 7 {
		followers = append(followers, newInstance(b, newClient(b, addr, follow), prefix, instanceConfig{}))
	}
	ctx := context.Background()
	// Loaded up front, so the leader's write is always an EVALSHA.
	if err := completeScript.Load(ctx, leader.client).Err(); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key := "k" + strconv.Itoa(i)
		o := &origin{value: "v", gate: make(chan struct{}), started: make(chan int64, 1)}
		lg := fetchAsync(ctx, leader.cache, key, o.load)
		<-o.started
		var waits []<-chan getResult
		for _, f := range followers {
			waits = append(waits, fetchAsync(ctx, f.cache, key, o.load))
		}
		for range followers {
			<-follow.following
		}
		close(o.gate)
		<-lg
		wrote := time.Unix(0, clock.at.Load())
		for _, w := range waits {
			r := <-w
			if r.err != nil || r.r.Value != "v" {
				b.Fatalf("follower = %q, %v", r.r.Value, r.err)
			}
			lat = append(lat, r.at.Sub(wrote))
		}
	}
	b.StopTimer()
	testenv.ReportLatencies(b, lat)
}

// BenchmarkColdMiss measures a cold miss of one instance in cluster mode,
// nobody else asking, by default: the shared read, read-or-claim, and
// complete-and-publish (TestColdMissInClusterModeCostsThreeRoundTrips
// counts them; BenchmarkColdMissLookVsPlainRead compares ReadInClaim). serial is one miss at a time, its latency; parallel keeps
// 16 misses in flight per core, its throughput in misses per second.
func BenchmarkColdMiss(b *testing.B) {
	addr, prefix := sharedRedis(b)
	in := newInstance(b, newClient(b, addr), prefix, instanceConfig{})
	ctx := context.Background()
	load := func(context.Context) (string, error) { return "v", nil }
	if _, err := in.cache.Fetch(ctx, "warm-up", load); err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	miss := func(b *testing.B) {
		key := "cold" + strconv.FormatInt(n.Add(1), 10)
		r, err := in.cache.Fetch(ctx, key, load)
		if err != nil || r.Value != "v" {
			b.Fatalf("Fetch(%s) = %+v, %v", key, r, err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			miss(b)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(16)
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				miss(b)
			}
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "misses/s")
	})
}
