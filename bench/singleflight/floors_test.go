package singleflight_test

// Floors: what the runtime itself charges for the work the engine cannot
// avoid, measured with the same harness as the engine's benchmarks so that
// the two can be read side by side (docs/PERFORMANCE.md, "Speed goals"):
//
//	go test -run '^$' -bench 'Leader/ctx=cancellable|HotKey|Floor' -benchmem -count 6 .
//
// None of them is an implementation of anything; each is the least code
// that does what the engine's path must do.

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkFloorLeaderCancellable: the floor of a leader whose context can
// be cancelled. Such a leader must be able to return the moment its
// context ends while the loader goes on for the others, so the loader runs
// in a goroutine of its own: one channel, one goroutine start, and a
// select on the loader's completion and on ctx.Done(). Compare with
// BenchmarkLeader/ctx=cancellable.
func BenchmarkFloorLeaderCancellable(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Run("impl=goroutine-handoff", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b, 1)()
		for b.Loop() {
			done := make(chan struct{})
			go func() { close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
			}
		}
	})
	// The same with the loader's result handed over, as a leader needs it
	// (the goroutine's closure then holds the result's destination too).
	b.Run("impl=goroutine-handoff-result", func(b *testing.B) {
		b.ReportAllocs()
		defer reportCPU(b, 1)()
		for i := 0; b.Loop(); i++ {
			done := make(chan struct{})
			var v int
			go func() { v = i; close(done) }()
			select {
			case <-done:
				sinkInt += v
			case <-ctx.Done():
			}
		}
	})
}

// floorGroup is the least a coalescer of one key can do: a mutex, a
// pointer to the execution in flight, a channel closed when it finishes.
type floorGroup struct {
	mu sync.Mutex
	c  *floorCall
}

type floorCall struct {
	done chan struct{}
	v    int
}

// do runs fn, or waits for the execution in flight; fn does not escape.
func (g *floorGroup) do(fn func() int) int {
	g.mu.Lock()
	if c := g.c; c != nil {
		g.mu.Unlock()
		<-c.done
		return c.v
	}
	c := &floorCall{done: make(chan struct{})}
	g.c = c
	g.mu.Unlock()
	c.v = fn()
	g.mu.Lock()
	g.c = nil
	g.mu.Unlock()
	close(c.done)
	return c.v
}

// lastFn and escape make a function escape to the heap, as an engine whose
// leader may run it in a goroutine of its own must; nothing is ever
// stored.
var lastFn func() int

//go:noinline
func escape(fn func() int) {
	if fn == nil {
		lastFn = fn
	}
}

// BenchmarkFloorHotKey is BenchmarkHotKey's herd (1,000 fresh goroutines on
// one key, the execution held open until all have entered) on floorGroup:
// the per-waiter floor. impl=floor-closure-escapes is the floor of an
// engine that must heap-allocate each caller's closure (2 allocations per
// caller: the goroutine's and the closure); impl=floor that of one whose
// callers' closures stay on their stacks (1: the goroutine's).
func BenchmarkFloorHotKey(b *testing.B) {
	b.Run("impl=floor-closure-escapes", func(b *testing.B) {
		var g floorGroup
		hotKey(b, func(key string, fn func() int) {
			f := func() int { return fn() }
			escape(f)
			g.do(f)
		})
	})
	b.Run("impl=floor", func(b *testing.B) {
		var g floorGroup
		hotKey(b, func(key string, fn func() int) {
			g.do(func() int { return fn() })
		})
	})
}

// BenchmarkFloorHerdWake: the floor of a herd's wake-up. n goroutines are
// blocked on one execution; it ends; how long until each of them runs
// again? Per round, every goroutine reads the clock as soon as it runs
// again; the metrics are over all rounds, in milliseconds after the end:
// the median, the 99th percentile and the last goroutine to run, and
// first10pct-p99-ms, the 99th percentile of the 10 % that blocked first
// (who, in a herd that arrived over time, have waited longest: a wake-up
// order that serves them late makes them the herd's p99).
//
//   - wake=close: one channel, closed (what the engine did before its
//     waves). The runtime readies the receivers in the reverse of the order
//     they blocked in; the scheduler's run queues then run the first ~256
//     early and the rest latest first.
//   - wake=waitgroup: a sync.WaitGroup (what x/sync and sturdyc do): the
//     semaphore readies them in the order they blocked in.
//   - wake=waves: a channel per 64 goroutines in the order they blocked,
//     closed in that order (what the engine does, flightgroup's enlist).
//
// stack=fresh: goroutines started for the round, blocked at once (their
// stacks never grew). stack=grown: long-lived goroutines that block with
// several KiB of stack in use, as a server's request goroutines do.
func BenchmarkFloorHerdWake(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		for _, stack := range []string{"fresh", "grown"} {
			for _, wake := range []string{"close", "waitgroup", "waves"} {
				b.Run("waiters="+strconv.Itoa(n)+"/stack="+stack+"/wake="+wake, func(b *testing.B) {
					herdWake(b, n, stack == "grown", wake)
				})
			}
		}
	}
}

// herdRound is one round of BenchmarkFloorHerdWake: the goroutines block on
// waves[0] (wake=close), on the wave of their place in arrival order
// (wake=waves) or on wg (wake=waitgroup).
type herdRound struct {
	waves   []chan struct{}
	perWave int64
	wg      sync.WaitGroup
	useWG   bool
	arrived atomic.Int64
	end     time.Time       // when the execution ended (done closed)
	wake    []time.Duration // by arrival order: from end to running again
	fin     sync.WaitGroup
}

// block is a herd goroutine's part of the round.
func (r *herdRound) block() {
	i := r.arrived.Add(1) - 1
	if r.useWG {
		r.wg.Wait()
	} else {
		<-r.waves[i/r.perWave]
	}
	r.wake[i] = time.Since(r.end)
	r.fin.Done()
}

func herdWake(b *testing.B, n int, grown bool, wake string) {
	var workers []chan *herdRound
	if grown {
		// Long-lived goroutines, each parked between rounds with a few
		// KiB of stack in use (so the garbage collector never shrinks it).
		workers = make([]chan *herdRound, n)
		for i := range workers {
			ch := make(chan *herdRound)
			workers[i] = ch
			go deepWorker(ch, 24)
		}
		defer func() {
			for _, ch := range workers {
				close(ch)
			}
		}()
	}
	var all, first []time.Duration
	for b.Loop() {
		r := &herdRound{useWG: wake == "waitgroup", perWave: int64(n), wake: make([]time.Duration, n)}
		if wake == "waves" {
			r.perWave = 64
		}
		for range (int64(n) + r.perWave - 1) / r.perWave {
			r.waves = append(r.waves, make(chan struct{}))
		}
		r.wg.Add(1)
		r.fin.Add(n)
		for i := range n {
			if grown {
				workers[i] <- r
			} else {
				go r.block()
			}
		}
		// Every goroutine has taken its place; give the last ones time to
		// park.
		for r.arrived.Load() < int64(n) {
			runtime.Gosched()
		}
		time.Sleep(time.Millisecond)
		r.end = time.Now()
		if r.useWG {
			r.wg.Done()
		} else {
			for _, w := range r.waves {
				close(w)
			}
		}
		r.fin.Wait()
		all = append(all, r.wake...)
		first = append(first, r.wake[:n/10]...)
	}
	slices.Sort(all)
	slices.Sort(first)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(all[len(all)/2]), "wake-p50-ms")
	b.ReportMetric(ms(all[len(all)*99/100]), "wake-p99-ms")
	b.ReportMetric(ms(all[len(all)-1]), "wake-max-ms")
	b.ReportMetric(ms(first[len(first)*99/100]), "first10pct-p99-ms")
}

// deepWorker serves herd rounds from depth frames of about 256 bytes
// each, so that it blocks with that much stack in use.
//
//go:noinline
func deepWorker(in chan *herdRound, depth int) {
	var pad [256]byte
	if depth > 0 {
		deepWorker(in, depth-1)
		if pad[depth%len(pad)] != 0 {
			panic("unreachable")
		}
		return
	}
	for r := range in {
		r.block()
	}
}
