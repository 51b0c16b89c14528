package bench_test

// go-redis client-side caching (RESP3 CLIENT TRACKING) beside flightcache's
// memory tier with a Bus, on the same Redis, in one run:
//
//	go test -run '^$' -bench 'CSC' -benchtime 1x -count 1 .       # staleness, pause
//	go test -run '^$' -bench 'CSCHit' -benchmem -count 6 .          # hit ns/op
//
// The hit and staleness benchmarks use the shared Redis at 127.0.0.1:6379;
// the pause benchmark starts a private redis-server and stops it with
// SIGSTOP.

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testenv"
	"github.com/flightcache/flightcache/memstore"
	"github.com/flightcache/flightcache/redislease"
	"github.com/flightcache/flightcache/redisstore"
	"github.com/redis/go-redis/v9"
)

// cscValue is a 100-byte value, version i.
func cscValue(i int) string {
	s := "v" + strconv.Itoa(i) + ":"
	return s + strings.Repeat("x", 100-len(s))
}

// newCSCClient is a go-redis client with its built-in client-side cache
// at its defaults (no MaxStaleness), and the request-path timeouts the
// redisstore documentation recommends.
func newCSCClient(tb testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: addr, Protocol: 3, ClientSideCacheConfig: &redis.ClientSideCacheConfig{},
		ContextTimeoutEnabled: true, MaxRetries: -1,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
	})
	tb.Cleanup(func() { c.Close() })
	return c
}

// newBusCache is one instance of flightcache as it would cache the same
// data locally: memstore, redisstore and a redislease Coordinator as
// Coordinator and Bus, on its own client.
func newBusCache(tb testing.TB, addr, prefix string, load flightcache.LoadFunc[string]) *flightcache.Cache[string] {
	client := redis.NewClient(&redis.Options{
		Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
	})
	store, err := redisstore.New(client, redisstore.Options{Prefix: prefix, HashTag: true})
	if err != nil {
		tb.Fatal(err)
	}
	// The start checks (a publish and a subscription among them) on a
	// host that runs make test beside another: 5s was not always enough.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	coord, err := redislease.New(ctx, client, store, redislease.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	local, err := memstore.New(memstore.Options[string]{})
	if err != nil {
		tb.Fatal(err)
	}
	c, err := flightcache.New(flightcache.Options[string]{
		Name: "csc", Local: local, Shared: store, Coordinator: coord, Bus: coord,
		TTL: time.Hour, Jitter: flightcache.DisableJitter, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		c.Close()
		coord.Close()
		local.Close()
		cleanPrefix(tb, client, prefix)
		client.Close()
	})
	return c
}

// awaitBus waits until c's Bus is up: before that, local items are served
// for at most BusDownTTL.
func awaitBus(tb testing.TB, c *flightcache.Cache[string]) {
	deadline := time.Now().Add(10 * time.Second)
	for c.BusState() != driver.BusUp {
		if time.Now().After(deadline) {
			tb.Fatal("the Bus did not come up within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var errNoOrigin = errors.New("the origin is not part of this comparison")

func noOrigin(context.Context) (string, error) { return "", errNoOrigin }

var sinkString string

// BenchmarkCSCHit: a hit of a warm 100-byte value, one goroutine.
func BenchmarkCSCHit(b *testing.B) {
	addr := testenv.RequireRedis(b)
	ctx := context.Background()
	prefix := uniquePrefix(b)
	b.Run("impl=go-redis-csc", func(b *testing.B) {
		c := newCSCClient(b, addr)
		key := prefix + "csc"
		if err := c.Set(ctx, key, cscValue(0), time.Hour).Err(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cleanPrefix(b, c, prefix) })
		for range 3 {
			c.Get(ctx, key) // the first fills the client's cache
		}
		b.ReportAllocs()
		for b.Loop() {
			sinkString, _ = c.Get(ctx, key).Result()
		}
		if st := c.CSCStats(); st.Hits < uint64(b.N) {
			b.Fatalf("%d client-side hits for %d GETs: the client did not cache", st.Hits, b.N)
		}
	})
	b.Run("impl=flightcache-memory-bus", func(b *testing.B) {
		c := newBusCache(b, addr, prefix, noOrigin)
		if err := c.Set(ctx, "k", cscValue(0)); err != nil {
			b.Fatal(err)
		}
		awaitBus(b, c)
		b.ReportAllocs()
		for b.Loop() {
			sinkString, _ = c.Get(ctx, "k", noOrigin)
		}
	})
	b.Run("impl=go-redis-plain", func(b *testing.B) {
		// The round trip both avoid.
		c := newRedisClient(b)
		key := prefix + "plain"
		c.Set(ctx, key, cscValue(0), time.Hour)
		b.ReportAllocs()
		for b.Loop() {
			sinkString, _ = c.Get(ctx, key).Result()
		}
	})
}

// staleness is what a reader sees after a write by another client has
// returned: whether its next read is stale, and how long until it reads
// the new value (it reads in a loop).
type staleness struct {
	stale int
	lags  []time.Duration
}

// round measures one write: write writes version i and returns; read
// reads until it gets version i.
func (s *staleness) round(tb testing.TB, i int, write func(string) error, read func() (string, error)) {
	want := cscValue(i)
	if err := write(want); err != nil {
		tb.Fatal(err)
	}
	wrote := time.Now()
	for first := true; ; first = false {
		got, err := read()
		if err != nil {
			tb.Fatal(err)
		}
		if got == want {
			s.lags = append(s.lags, time.Since(wrote))
			return
		}
		if first {
			s.stale++
		}
		if time.Since(wrote) > 5*time.Second {
			tb.Fatalf("version %d still unseen 5s after its write", i)
		}
	}
}

func (s *staleness) report(b *testing.B) {
	slices.Sort(s.lags)
	pct := func(p float64) float64 {
		return float64(s.lags[int(p*float64(len(s.lags)-1))].Microseconds())
	}
	b.ReportMetric(float64(s.stale)/float64(len(s.lags)), "stale-reads/write")
	b.ReportMetric(pct(0.5), "lag-p50-µs")
	b.ReportMetric(pct(0.99), "lag-p99-µs")
	b.ReportMetric(pct(1), "lag-max-µs")
	b.ReportMetric(0, "ns/op")
}

// cscWrites is the number of writes each side of the staleness benchmark
// measures.
const cscWrites = 500

// BenchmarkCSCStaleAfterWrite: a writer (another client, or another
// instance) writes a new version of a value a reader has cached; once
// the write has returned, the reader reads it in a loop. Reported: the
// share of writes after which the reader's next read was stale, and the
// lag until it read the new version. Run with -benchtime 1x.
func BenchmarkCSCStaleAfterWrite(b *testing.B) {
	addr := testenv.RequireRedis(b)
	ctx := context.Background()
	b.Run("impl=go-redis-csc", func(b *testing.B) {
		prefix := uniquePrefix(b)
		key := prefix + "k"
		writer := newRedisClient(b)
		reader := newCSCClient(b, addr)
		b.Cleanup(func() { cleanPrefix(b, writer, prefix) })
		var s staleness
		for b.Loop() {
			for i := range cscWrites {
				if i == 0 { // fill the reader's cache
					writer.Set(ctx, key, cscValue(-1), time.Hour)
					reader.Get(ctx, key)
				}
				s.round(b, i,
					func(v string) error { return writer.Set(ctx, key, v, time.Hour).Err() },
					func() (string, error) { return reader.Get(ctx, key).Result() })
			}
		}
		if st := reader.CSCStats(); st.Hits == 0 {
			b.Fatalf("the reader never hit its client-side cache: %+v", st)
		}
		s.report(b)
	})
	b.Run("impl=flightcache-memory-bus", func(b *testing.B) {
		prefix := uniquePrefix(b)
		writer := newBusCache(b, addr, prefix, noOrigin)
		reader := newBusCache(b, addr, prefix, noOrigin)
		awaitBus(b, writer)
		awaitBus(b, reader)
		var s staleness
		for b.Loop() {
			for i := range cscWrites {
				if i == 0 {
					writer.Set(ctx, "k", cscValue(-1))
					if _, err := reader.Get(ctx, "k", noOrigin); err != nil {
						b.Fatal(err)
					}
				}
				s.round(b, i,
					func(v string) error { return writer.Set(ctx, "k", v) },
					func() (string, error) { return reader.Get(ctx, "k", noOrigin) })
			}
		}
		s.report(b)
	})
}

// pauseReads is what one side's reads saw while Redis was stopped.
type pauseReads struct {
	reads, served int
	maxWait       time.Duration
	coldWait      time.Duration
	coldErr       error
}

// read runs get every 10ms for d, then once for a key never read before.
func (p *pauseReads) read(d time.Duration, get func(ctx context.Context, key string) (string, error)) {
	timed := func(key string) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		_, err := get(ctx, key)
		return time.Since(start), err
	}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		wait, err := timed("warm")
		p.reads++
		if err == nil {
			p.served++
		}
		p.maxWait = max(p.maxWait, wait)
	}
	p.coldWait, p.coldErr = timed("cold")
}

func (p *pauseReads) report(b *testing.B) {
	b.ReportMetric(float64(p.served)/float64(p.reads), "warm-served/read")
	b.ReportMetric(float64(p.maxWait.Milliseconds()), "warm-max-ms")
	b.ReportMetric(float64(p.coldWait.Milliseconds()), "cold-ms")
	cold := 0.0
	if p.coldErr == nil {
		cold = 1
	}
	b.ReportMetric(cold, "cold-served")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkCSCRedisPaused: a private Redis is stopped (SIGSTOP) for 3s
// while each side reads a value it has cached, every 10ms, then a value
// it has not. go-redis has no origin to turn to; flightcache's loader
// stands for the database (it answers at once). Both sides read at the
// same time, from one pause. Run with -benchtime 1x.
func BenchmarkCSCRedisPaused(b *testing.B) {
	srv := testenv.StartRedis(b)
	ctx := context.Background()
	csc := newCSCClient(b, srv.Addr)
	origin := func(context.Context) (string, error) { return cscValue(0), nil }
	fc := newBusCache(b, srv.Addr, "fcbench:", origin)
	awaitBus(b, fc)
	if err := csc.Set(ctx, "warm", cscValue(0), time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
	csc.Get(ctx, "warm")
	fc.Get(ctx, "warm", origin)
	var side [2]pauseReads
	for b.Loop() {
		srv.Pause()
		done := make(chan struct{})
		go func() {
			defer close(done)
			side[0].read(3*time.Second, func(ctx context.Context, key string) (string, error) { return csc.Get(ctx, key).Result() })
		}()
		side[1].read(3*time.Second, func(ctx context.Context, key string) (string, error) { return fc.Get(ctx, key, origin) })
		<-done
		srv.Resume()
	}
	b.Run("impl=go-redis-csc", func(b *testing.B) {
		for b.Loop() {
		}
		side[0].report(b)
	})
	b.Run("impl=flightcache-memory-bus", func(b *testing.B) {
		for b.Loop() {
		}
		side[1].report(b)
	})
}
