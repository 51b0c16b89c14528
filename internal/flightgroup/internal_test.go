package flightgroup

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
	"unsafe"
)

// TestShardsStartOnACacheLine pins the padding in Group: the shards, written
// on every call, must not share a cache line with the fields read on every
// call, nor with each other.
func TestShardsStartOnACacheLine(t *testing.T) {
	var g Group[string, int]
	if off, size := unsafe.Offsetof(g.shards), unsafe.Sizeof(g.shards[0]); off%64 != 0 || size%64 != 0 {
		t.Fatalf("shards at offset %d, %d bytes each; want both multiples of 64", off, size)
	}
}

// TestLoaderExtraFitsTheSixtyFourByteSizeClass pins loaderExtra's size:
// every execution with a loader timeout allocates one.
func TestLoaderExtraFitsTheSixtyFourByteSizeClass(t *testing.T) {
	if size := unsafe.Sizeof(loaderExtra{}); size > 64 {
		t.Fatalf("loaderExtra is %d bytes; want at most 64", size)
	}
}

type observerFunc func(Event)

func (f observerFunc) ObserveFlight(e Event) { f(e) }

// leftovers counts what a Group's shards still hold: map entries, the
// keys InFlight counts, and detached executions.
func leftovers[K comparable, V any](g *Group[K, V]) (entries, counted, detached int) {
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		entries += len(sh.m)
		detached += len(sh.detached)
		sh.mu.Unlock()
	}
	return entries, g.InFlight(), detached
}

// nanKeyCalls makes calls whose key is not equal to itself, in every mode an
// execution can run in: inline, in its own goroutine, forgotten, timed out,
// failed and panicking, and checks each got its own loader's result.
func nanKeyCalls[K comparable](t *testing.T, key K) {
	t.Helper()
	const calls = 1000
	for _, opts := range [][]Option{nil, {WithLoaderTimeout(time.Minute), WithMaxInFlight(1000)}, {WithCancelWhenAbandoned()}} {
		// Late results are reported after a loader gave its slot back.
		late := make(chan struct{}, 2)
		opts = append(opts, WithObserver(observerFunc(func(e Event) {
			if e.Kind == EventLateResult {
				late <- struct{}{}
			}
		})))
		g := New[K, int](opts...)
		cancellable, cancel := context.WithCancel(context.Background())
		for i := range calls {
			ctx := context.Background()
			if i%2 == 1 {
				ctx = cancellable // runs the loader in its own goroutine
			}
			if i%3 == 0 {
				g.Forget(key)
			}
			want := i
			v, shared, err := g.Do(ctx, key, func(context.Context) (int, error) {
				switch i % 10 {
				case 7:
					return 0, errors.New("origin down")
				case 9:
					panic("bad loader")
				}
				return want, nil
			})
			var pe *PanicError
			switch {
			case shared:
				t.Fatalf("call %d shared an execution", i)
			case i%10 == 7 && err == nil, i%10 == 9 && !errors.As(err, &pe):
				t.Fatalf("call %d = %v, want its own loader's error", i, err)
			case i%10 < 7 && (v != want || err != nil):
				t.Fatalf("call %d = %d, %v; want its own %d", i, v, err, want)
			}
		}
		cancel()
		// Two executions Close must end: one its caller abandoned (without
		// WithCancelWhenAbandoned, its loader goes on), one still awaited.
		started := make(chan struct{}, 2)
		untilCancelled := func(ctx context.Context) (int, error) {
			started <- struct{}{}
			<-ctx.Done()
			return 0, ctx.Err()
		}
		abandoned, leave := context.WithCancel(context.Background())
		a := g.DoChan(abandoned, key, untilCancelled)
		<-started
		leave()
		<-a
		r := g.DoChan(context.Background(), key, untilCancelled)
		<-started
		g.Close()
		if res := <-r; !errors.Is(res.Err, ErrClosed) {
			t.Fatalf("Close did not reach a running NaN-key execution: %+v", res)
		}
		<-late
		<-late
		if e, n, d := leftovers(g); e != 0 || n != 0 || d != 0 {
			t.Fatalf("after %d calls with a key not equal to itself: %d map entries, count %d, %d detached; want none", calls, e, n, d)
		}
		if n := g.InFlight(); n != 0 {
			t.Fatalf("InFlight() = %d, want 0", n)
		}
		if n := g.loaders.Load(); n != 0 {
			t.Fatalf("%d loaders still counted after every loader returned, want 0", n)
		}
	}
}

// TestKeysNotEqualToThemselvesLeaveNothingBehind: a NaN key, a struct holding
// one, and an interface holding one can be stored in a Go map but never found
// again, not even by delete. Such calls must run without leaving an entry.
func TestKeysNotEqualToThemselvesLeaveNothingBehind(t *testing.T) {
	type product struct {
		ID    int
		Price float64
	}
	t.Run("float64", func(t *testing.T) { nanKeyCalls(t, math.NaN()) })
	t.Run("struct", func(t *testing.T) { nanKeyCalls(t, product{ID: 42, Price: math.NaN()}) })
	t.Run("array", func(t *testing.T) { nanKeyCalls(t, [2]float64{1, math.NaN()}) })
	t.Run("interface", func(t *testing.T) { nanKeyCalls[any](t, math.NaN()) })
}

// TestAfterFuncStopsAnyRegistration stops registrations at every place of
// the list loaderCtx keeps them in, and runs only the others.
func TestAfterFuncStopsAnyRegistration(t *testing.T) {
	var l loaderCtx
	l.parent = context.Background()
	ran := make(chan int, 4)
	stops := make([]func() bool, 4)
	for i := range stops {
		stops[i] = l.AfterFunc(func() { ran <- i })
	}
	// Registered 0, 1, 2, 3: stop the first, one in the middle, the last.
	for _, i := range []int{0, 2, 3} {
		if !stops[i]() {
			t.Fatalf("stop %d: not registered", i)
		}
		if stops[i]() {
			t.Fatalf("stop %d twice: still registered", i)
		}
	}
	n := 0
	for a := l.extra.Load().afters; a != nil; a = a.next {
		n++
	}
	if n != 1 {
		t.Fatalf("%d registrations left, want 1", n)
	}
	l.cancel(ctxCanceled, nil)
	if got := <-ran; got != 1 {
		t.Fatalf("ran %d, want 1", got)
	}
	if stops[1]() {
		t.Fatal("stop after the function ran reported it stopped")
	}
}
