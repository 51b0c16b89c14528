package redislease

import (
	"bufio"
	"context"
	"io"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/redislease/internal/buswire"
	"github.com/redis/go-redis/v9"
)

// benchInvalidation is a typical invalidation: one key of a named cache.
var benchInvalidation = driver.Invalidation{Kind: driver.InvalidationKey, Target: "product:1234567", Version: time.Now()}

const benchCache = "product"

// processCPU is the CPU time this process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the CPU time a redis-server used so far (INFO cpu).
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// countingHandler counts invalidations; reached is closed when the count
// reaches target.
type countingHandler struct {
	n       atomic.Int64
	target  atomic.Int64
	reached chan struct{}
	up      chan struct{}
}

func newCountingHandler() *countingHandler {
	return &countingHandler{reached: make(chan struct{}, 1), up: make(chan struct{}, 1)}
}

func (h *countingHandler) Invalidated(driver.Invalidation) {
	if h.n.Add(1) == h.target.Load() {
		h.reached <- struct{}{}
	}
}

func (h *countingHandler) BusChanged(s driver.BusState) {
	if s == driver.BusUp {
		select {
		case h.up <- struct{}{}:
		default:
		}
	}
}

// rawPublisher publishes pre-encoded messages over a bare connection, so
// that the cost of publishing hardly shows in this process's CPU time.
type rawPublisher struct {
	conn net.Conn
	w    *bufio.Writer
	done chan struct{}
}

func newRawPublisher(b *testing.B, addr string) *rawPublisher {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	p := &rawPublisher{conn: conn, w: bufio.NewWriterSize(conn, 1<<20), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		_, _ = io.Copy(io.Discard, conn)
	}()
	b.Cleanup(func() { conn.Close(); <-p.done })
	return p
}

func (p *rawPublisher) publish(b *testing.B, channel string, msg []byte, n int) {
	for range n {
		p.w.WriteString("*3\r\n$7\r\nPUBLISH\r\n$")
		p.w.WriteString(strconv.Itoa(len(channel)))
		p.w.WriteString("\r\n")
		p.w.WriteString(channel)
		p.w.WriteString("\r\n$")
		p.w.WriteString(strconv.Itoa(len(msg)))
		p.w.WriteString("\r\n")
		p.w.Write(msg)
		p.w.WriteString("\r\n")
	}
	if err := p.w.Flush(); err != nil {
		b.Fatal(err)
	}
}

// externalSubscriber subscribes channel from a redis-cli process of its
// own, so that Redis delivers every message to one subscriber without the
// receiver's cost showing in this process's CPU time.
func externalSubscriber(b *testing.B, srv *testenv.RedisServer, channel string) {
	cmd := exec.Command("redis-cli", "-p", strconv.Itoa(srv.Port), "subscribe", channel)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Skipf("redis-cli: %v", err)
	}
	r := bufio.NewReader(out)
	for range 3 { // the confirmation: subscribe, the channel, the count
		if _, err := r.ReadString('\n'); err != nil {
			b.Fatal(err)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(io.Discard, r)
	}()
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
	})
}

// BenchmarkBusPublish measures Publish on loopback, with one subscriber in
// another process: serially (each op is a round trip) and 16 at a time.
// It reports the message's size, this process's CPU per Publish and the
// private Redis server's (delivery to the subscriber included), and the
// same for a bare PING as a baseline; bulk-serial publishes a prefix
// invalidation, which a script also records for replay. The *-echo cases
// repeat them with the publisher subscribed, as a Cache's Coordinator is:
// Publish then waits for its own message to come back.
func BenchmarkBusPublish(b *testing.B) {
	srv := testenv.StartRedis(b)
	admin := newClient(b, srv.Addr)
	pub := newBusCoordinator(b, newClient(b, srv.Addr), "bench:", Options{})
	externalSubscriber(b, srv, pub.bus.channel)
	if n, err := admin.PubSubNumSub(context.Background(), pub.bus.channel).Result(); err != nil || n[pub.bus.channel] != 1 {
		b.Fatalf("subscribers of the bus channel %v, %v; want 1", n, err)
	}
	ctx := context.Background()
	run := func(b *testing.B, parallel bool, inv driver.Invalidation) {
		msg, err := buswire.Append(nil, pub.bus.origin, benchCache, inv)
		if err != nil {
			b.Fatal(err)
		}
		s0, c0 := serverCPU(b, admin), processCPU(b)
		b.ResetTimer()
		if parallel {
			b.SetParallelism(8) // 16 publishes in flight on 2 CPUs
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := pub.Publish(ctx, benchCache, inv); err != nil {
						b.Error(err)
						return
					}
				}
			})
		} else {
			for range b.N {
				if err := pub.Publish(ctx, benchCache, inv); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(len(msg)), "msg-bytes")
		b.ReportMetric(float64(processCPU(b)-c0)/float64(b.N), "cpu-ns/msg")
		b.ReportMetric(float64(serverCPU(b, admin)-s0)/float64(b.N), "redis-cpu-ns/msg")
	}
	b.Run("serial", func(b *testing.B) { run(b, false, benchInvalidation) })
	b.Run("parallel", func(b *testing.B) { run(b, true, benchInvalidation) })
	// A prefix invalidation is recorded in the cache's retained set by
	// the script that publishes it.
	prefix := driver.Invalidation{Kind: driver.InvalidationPrefix, Target: "tenant-a:", Version: time.Now()}
	b.Run("bulk-serial", func(b *testing.B) { run(b, false, prefix) })
	// The same three with the publisher subscribed, as a Cache with a Bus
	// always is: each Publish then also waits for its message to come
	// back on its own subscription.
	stop, err := pub.Subscribe(benchCache, newCountingHandler())
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	eventually(b, 10*time.Second, "bus up", func() bool { return pub.BusStats().State == driver.BusUp })
	b.Run("serial-echo", func(b *testing.B) { run(b, false, benchInvalidation) })
	b.Run("parallel-echo", func(b *testing.B) { run(b, true, benchInvalidation) })
	b.Run("bulk-serial-echo", func(b *testing.B) { run(b, false, prefix) })
	// The same machine's price of a bare round trip, to read the others
	// by.
	b.Run("ping-baseline", func(b *testing.B) {
		c := newClient(b, srv.Addr)
		s0, c0 := serverCPU(b, admin), processCPU(b)
		b.ResetTimer()
		for range b.N {
			if err := c.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(processCPU(b)-c0)/float64(b.N), "cpu-ns/msg")
		b.ReportMetric(float64(serverCPU(b, admin)-s0)/float64(b.N), "redis-cpu-ns/msg")
	})
}

// BenchmarkBusDeliver measures the receiving side on loopback.
//
// latency: one Publish at a time, from its call to the handler's; ns/op is
// that round, p50/p99 its quantiles.
//
// receive: messages written by a bare connection in bursts of 2,000; ns/op
// is the wall time per message, cpu-ns/msg this process's CPU per message
// received, decoded and handed to a handler (go-redis's reader included).
//
// fanout: the same with 32 subscribed Coordinators: redis-cpu-ns/delivery
// is the server's CPU per message per subscriber, cpu-ns/delivery this
// process's.
func BenchmarkBusDeliver(b *testing.B) {
	srv := testenv.StartRedis(b)
	admin := newClient(b, srv.Addr)
	ctx := context.Background()
	subscribe := func(b *testing.B, n int) ([]*countingHandler, string) {
		var hs []*countingHandler
		var channel string
		for range n {
			c := newBusCoordinator(b, newClient(b, srv.Addr), "bench:", Options{})
			h := newCountingHandler()
			stop, err := c.Subscribe(benchCache, h)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(stop)
			<-h.up
			hs = append(hs, h)
			channel = c.bus.channel
		}
		return hs, channel
	}

	b.Run("latency", func(b *testing.B) {
		pub := newBusCoordinator(b, newClient(b, srv.Addr), "bench:", Options{})
		sub := newBusCoordinator(b, newClient(b, srv.Addr), "bench:", Options{})
		got := make(chan time.Time, 1)
		h := &latencyHandler{got: got, up: make(chan struct{}, 1)}
		stop, err := sub.Subscribe(benchCache, h)
		if err != nil {
			b.Fatal(err)
		}
		defer stop()
		<-h.up
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			start := time.Now()
			if err := pub.Publish(ctx, benchCache, benchInvalidation); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, (<-got).Sub(start))
		}
		b.StopTimer()
		slices.Sort(lat)
		q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
		b.ReportMetric(q(0.5), "p50-µs")
		b.ReportMetric(q(0.99), "p99-µs")
	})

	// burst publishes b.N messages in pipelined chunks of chunk, waiting
	// for every subscriber to get each chunk: chunk 1 is unbatched traffic
	// (one write per subscriber per message at the server), the usual
	// case for invalidations, which come one write at a time.
	burst := func(b *testing.B, subscribers, chunk int) {
		hs, channel := subscribe(b, subscribers)
		msg, err := buswire.Append(nil, 1, benchCache, benchInvalidation)
		if err != nil {
			b.Fatal(err)
		}
		p := newRawPublisher(b, srv.Addr)
		s0, c0 := serverCPU(b, admin), processCPU(b)
		b.ResetTimer()
		for sent := 0; sent < b.N; {
			n := min(chunk, b.N-sent)
			sent += n
			for _, h := range hs {
				h.target.Store(h.n.Load() + int64(n))
			}
			p.publish(b, channel, msg, n)
			for _, h := range hs {
				select {
				case <-h.reached:
				case <-time.After(30 * time.Second):
					b.Fatalf("a subscriber got %d of %d", h.n.Load(), sent)
				}
			}
		}
		b.StopTimer()
		deliveries := float64(b.N) * float64(subscribers)
		b.ReportMetric(float64(processCPU(b)-c0)/deliveries, "cpu-ns/delivery")
		b.ReportMetric(float64(serverCPU(b, admin)-s0)/deliveries, "redis-cpu-ns/delivery")
	}
	b.Run("receive", func(b *testing.B) { burst(b, 1, 2000) })
	b.Run("fanout32", func(b *testing.B) { burst(b, 32, 2000) })
	b.Run("fanout32-serial", func(b *testing.B) { burst(b, 32, 1) })
}

// latencyHandler hands the time of each invalidation to the benchmark.
type latencyHandler struct {
	got chan time.Time
	up  chan struct{}
}

func (h *latencyHandler) Invalidated(driver.Invalidation) { h.got <- time.Now() }

func (h *latencyHandler) BusChanged(s driver.BusState) {
	if s == driver.BusUp {
		select {
		case h.up <- struct{}{}:
		default:
		}
	}
}

// seqHandler counts the invalidations it applied and hands the time of
// each to the benchmark.
type seqHandler struct {
	applied atomic.Int64
	got     chan time.Time
	up      chan struct{}
}

func (h *seqHandler) Invalidated(driver.Invalidation) {
	h.applied.Add(1)
	h.got <- time.Now()
}

func (h *seqHandler) BusChanged(s driver.BusState) {
	if s == driver.BusUp {
		select {
		case h.up <- struct{}{}:
		default:
		}
	}
}

// BenchmarkBusPublishToApply measures, on loopback, one Publish at a time
// from a subscribed Coordinator to another one's handler: ns/op is a
// whole round, publish-p50-µs/publish-p99-µs the time Publish took, and
// lag-*-µs the time from Publish's return to the other handler's call
// (negative when the handler ran first); applied-before-return-% is the
// share of rounds in which the other handler had been called by the time
// Publish returned.
func BenchmarkBusPublishToApply(b *testing.B) {
	srv := testenv.StartRedis(b)
	ctx := context.Background()
	pub := newBusCoordinator(b, newClient(b, srv.Addr), "bench:", Options{})
	sub := newBusCoordinator(b, newClient(b, srv.Addr), "bench:", Options{})
	own := &seqHandler{got: make(chan time.Time, 1), up: make(chan struct{}, 1)}
	stop, err := pub.Subscribe(benchCache, own) // the publisher's own subscription
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	h := &seqHandler{got: make(chan time.Time, 1), up: make(chan struct{}, 1)}
	stop2, err := sub.Subscribe(benchCache, h)
	if err != nil {
		b.Fatal(err)
	}
	defer stop2()
	<-own.up
	<-h.up
	took := make([]time.Duration, 0, b.N)
	lag := make([]time.Duration, 0, b.N)
	before := 0
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if err := pub.Publish(ctx, benchCache, benchInvalidation); err != nil {
			b.Fatal(err)
		}
		returned := time.Now()
		if h.applied.Load() == int64(i+1) {
			before++
		}
		took = append(took, returned.Sub(start))
		lag = append(lag, (<-h.got).Sub(returned))
	}
	b.StopTimer()
	q := func(d []time.Duration, p float64) float64 {
		return float64(d[int(p*float64(len(d)-1))].Nanoseconds()) / 1e3
	}
	slices.Sort(took)
	slices.Sort(lag)
	b.ReportMetric(q(took, 0.5), "publish-p50-µs")
	b.ReportMetric(q(took, 0.99), "publish-p99-µs")
	b.ReportMetric(q(lag, 0.5), "lag-p50-µs")
	b.ReportMetric(q(lag, 0.99), "lag-p99-µs")
	b.ReportMetric(q(lag, 1), "lag-max-µs")
	b.ReportMetric(100*float64(before)/float64(b.N), "applied-before-return-%")
}
