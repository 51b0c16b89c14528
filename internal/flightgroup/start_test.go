package flightgroup_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/flightgroup"
)

func TestStartLeadsAFreeKeyAndJoinsOneInFlight(t *testing.T) {
	obs := &counter{}
	g := flightgroup.New[string, int](flightgroup.WithObserver(obs))
	lead, err := g.Start(context.Background(), "k")
	if err != nil || !lead.Led() {
		t.Fatalf("first Start: led %v, %v", lead.Led(), err)
	}
	joined, err := g.Start(context.Background(), "k")
	if err != nil || joined.Led() {
		t.Fatalf("second Start: led %v, %v; want joined", joined.Led(), err)
	}
	doDone := make(chan int)
	go func() {
		v, _, _ := g.Do(context.Background(), "k", func(context.Context) (int, error) {
			t.Error("Do ran its own function for a key Start leads")
			return -1, nil
		})
		doDone <- v
	}()
	obs.joined(t, 3) // the leader, joined and Do
	if g.InFlight() != 1 {
		t.Fatalf("InFlight = %d, want 1", g.InFlight())
	}
	joined.Complete(99, nil) // not the leader: ignored
	lead.Complete(7, nil)
	if v, shared, err := lead.Wait(context.Background()); v != 7 || !shared || err != nil {
		t.Fatalf("leader Wait = %v, %v, %v", v, shared, err)
	}
	if v, _, err := joined.Wait(context.Background()); v != 7 || err != nil {
		t.Fatalf("joined Wait = %v, %v", v, err)
	}
	if v := <-doDone; v != 7 {
		t.Fatalf("Do got %v", v)
	}
	if lead.Context().Err() == nil {
		t.Fatal("the execution's context is still live after Complete")
	}
}

func TestStartedExecutionTimesOutAndDropsALateResult(t *testing.T) {
	obs := &counter{}
	g := flightgroup.New[string, int](flightgroup.WithLoaderTimeout(10*time.Millisecond), flightgroup.WithObserver(obs))
	f, err := g.Start(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	<-f.Context().Done()
	if _, _, err := f.Wait(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait after the loader timeout = %v", err)
	}
	f.Complete(1, nil)
	if obs.count(flightgroup.EventLateResult) != 1 {
		t.Fatal("a Complete after the timeout was not reported as late")
	}
	if g.InFlight() != 0 {
		t.Fatal("the timed-out key is still registered")
	}
}

func TestStartIsRefusedWhenClosedOrOverTheLimits(t *testing.T) {
	g := flightgroup.New[string, int](flightgroup.WithMaxInFlight(1), flightgroup.WithMaxWaiters(1))
	f, err := g.Start(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Start(context.Background(), "b"); !errors.Is(err, flightgroup.ErrTooManyInFlight) {
		t.Fatalf("a second key over MaxInFlight: %v", err)
	}
	if _, err := g.Start(context.Background(), "a"); !errors.Is(err, flightgroup.ErrTooManyWaiters) {
		t.Fatalf("a second waiter over MaxWaiters: %v", err)
	}
	g.Close()
	if _, _, err := f.Wait(context.Background()); !errors.Is(err, flightgroup.ErrClosed) {
		t.Fatalf("a started execution after Close: %v", err)
	}
	if !errors.Is(context.Cause(f.Context()), flightgroup.ErrClosed) {
		t.Fatal("Close did not cancel the started execution's context")
	}
	if _, err := g.Start(context.Background(), "c"); !errors.Is(err, flightgroup.ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
}

func TestWaitOfAStartedExecutionEndsWithTheCallersContext(t *testing.T) {
	g := flightgroup.New[string, int]()
	f, _ := g.Start(context.Background(), "k")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := f.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a cancelled ctx = %v", err)
	}
	other, _ := g.Start(context.Background(), "k")
	f.Complete(5, nil) // the execution went on for the others
	if v, _, err := other.Wait(context.Background()); v != 5 || err != nil {
		t.Fatalf("the other caller got %v, %v", v, err)
	}
}

func TestStartManySharesOneTimeoutAndCompletesIndependently(t *testing.T) {
	g := flightgroup.New[string, int](flightgroup.WithLoaderTimeout(20 * time.Millisecond))
	held, _ := g.Start(context.Background(), "joined")
	keys := []string{"a", "joined", "b"}
	fs := make([]flightgroup.Flight[string, int], len(keys))
	errs := make([]error, len(keys))
	g.StartMany(context.Background(), keys, fs, errs)
	if !fs[0].Led() || fs[1].Led() || !fs[2].Led() || errs[0] != nil || errs[1] != nil {
		t.Fatalf("led = %v %v %v, errs %v", fs[0].Led(), fs[1].Led(), fs[2].Led(), errs)
	}
	held.Complete(7, nil)
	if v, _, _ := fs[1].Wait(context.Background()); v != 7 {
		t.Fatalf("joined = %v", v)
	}
	fs[0].Complete(1, nil) // one completion must not cancel the others' timeout
	if v, _, err := fs[0].Wait(context.Background()); v != 1 || err != nil {
		t.Fatalf("a = %v, %v", v, err)
	}
	if _, _, err := fs[2].Wait(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b, never completed, = %v; want the loader timeout", err)
	}
	fs[2].Complete(2, nil) // late: dropped
	if g.InFlight() != 0 {
		t.Fatalf("InFlight = %d", g.InFlight())
	}
}

// counter is an Observer counting events by kind.
type counter struct {
	mu     sync.Mutex
	counts map[flightgroup.EventKind]int
}

func (c *counter) ObserveFlight(e flightgroup.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[flightgroup.EventKind]int{}
	}
	c.counts[e.Kind]++
}

func (c *counter) count(k flightgroup.EventKind) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[k]
}

// joined waits until n callers are on one execution: the leader and n-1
// that joined it (EventShared).
func (c *counter) joined(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.count(flightgroup.EventShared)+1 < n {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d callers to join", n)
		}
		runtime.Gosched()
		time.Sleep(50 * time.Microsecond)
	}
}

// An execution released by StopTimeout outlives the loader timeout: its
// result reaches the waiters, and its context reports no deadline. The
// timeout still ends one that was not released.
func TestStopTimeoutKeepsTheLoaderTimeoutFromCuttingTheRestOfTheWork(t *testing.T) {
	const timeout = 20 * time.Millisecond
	g := flightgroup.New[string, int](flightgroup.WithLoaderTimeout(timeout))
	if flightgroup.StopTimeout(context.Background()) {
		t.Fatal("StopTimeout released a context that is no execution's")
	}
	v, _, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("no deadline before StopTimeout")
		}
		if !flightgroup.StopTimeout(ctx) {
			t.Error("StopTimeout did not release an execution whose timeout had not fired")
		}
		if !flightgroup.StopTimeout(ctx) {
			t.Error("a second StopTimeout did not report the execution released")
		}
		if _, ok := ctx.Deadline(); ok {
			t.Error("the context still reports a deadline after StopTimeout")
		}
		<-time.After(3 * timeout) // the work the timeout must no longer cut short
		return 1, ctx.Err()
	})
	if v != 1 || err != nil {
		t.Fatalf("Do = %v, %v; want the released execution's result", v, err)
	}
	_, _, err = g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		if flightgroup.StopTimeout(ctx) {
			t.Error("StopTimeout released an execution whose timeout had fired")
		}
		return 2, nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do = %v; want the loader timeout", err)
	}
}

// In a StartMany, releasing one execution keeps it from the shared
// timeout; the others still expire with it.
func TestStopTimeoutReleasesOneExecutionOfAStartMany(t *testing.T) {
	g := flightgroup.New[string, int](flightgroup.WithLoaderTimeout(20 * time.Millisecond))
	keys := []string{"a", "b"}
	fs := make([]flightgroup.Flight[string, int], len(keys))
	errs := make([]error, len(keys))
	g.StartMany(context.Background(), keys, fs, errs)
	if !flightgroup.StopTimeout(fs[0].Context()) {
		t.Fatal("StopTimeout did not release a led execution")
	}
	if _, _, err := fs[1].Wait(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b = %v; want the loader timeout", err)
	}
	if err := fs[0].Context().Err(); err != nil {
		t.Fatalf("a's context ended (%v) though it was released", err)
	}
	fs[0].Complete(1, nil)
	fs[1].Complete(2, nil) // late: dropped
	if v, _, err := fs[0].Wait(context.Background()); v != 1 || err != nil {
		t.Fatalf("a = %v, %v; want its result after the timeout", v, err)
	}
	if g.InFlight() != 0 {
		t.Fatalf("InFlight = %d", g.InFlight())
	}
}

// LoadContext's cancel says the origin call is over: it releases the
// execution from the loader timeout as StopTimeout does, so the work after
// the origin answered is not cut short; the load context itself ends.
func TestLoadContextCancelReleasesTheLoaderTimeout(t *testing.T) {
	const timeout = 20 * time.Millisecond
	g := flightgroup.New[string, int](flightgroup.WithLoaderTimeout(timeout))
	v, _, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		lctx, cancel := flightgroup.LoadContext(ctx, time.Hour)
		if d, ok := lctx.Deadline(); !ok || time.Until(d) > timeout {
			t.Errorf("load context deadline %v, %v; want no later than the execution's", d, ok)
		}
		cancel()
		if lctx.Err() != context.Canceled {
			t.Errorf("load context after cancel: %v, want context.Canceled", lctx.Err())
		}
		if _, ok := ctx.Deadline(); ok {
			t.Error("the execution still reports a deadline after the load context's cancel")
		}
		if !flightgroup.StopTimeout(ctx) {
			t.Error("StopTimeout does not report the execution released")
		}
		<-time.After(3 * timeout) // the work the timeout must no longer cut short
		return 1, ctx.Err()
	})
	if v != 1 || err != nil {
		t.Fatalf("Do = %v, %v; want the released execution's result", v, err)
	}
}
