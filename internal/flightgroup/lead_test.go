package flightgroup

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

func TestDoChanLeadSaysAtOnceWhetherItLeads(t *testing.T) {
	g := New[string, int]()
	release := make(chan struct{})
	ran := make(chan struct{})
	ch, led := g.DoChanLead(context.Background(), "k", func(context.Context) (int, error) {
		close(ran)
		<-release // waits for something done after DoChanLead returned
		return 1, nil
	})
	if !led {
		t.Fatal("the first call for a key did not lead")
	}
	joined, led2 := g.DoChanLead(context.Background(), "k", func(context.Context) (int, error) {
		t.Error("a joining call's function ran")
		return 2, nil
	})
	if led2 {
		t.Fatal("a call for a key in flight led")
	}
	<-ran
	close(release)
	if r := <-ch; r.Val != 1 || r.Err != nil {
		t.Fatalf("leader got %+v", r)
	}
	if r := <-joined; r.Val != 1 || !r.Shared {
		t.Fatalf("joiner got %+v, want the leader's result, shared", r)
	}
}

func TestDoChanLeadRefusedCallDoesNotLead(t *testing.T) {
	g := New[string, int](WithMaxInFlight(1), WithMaxWaiters(1))
	release := make(chan struct{})
	first, _ := g.DoChanLead(context.Background(), "a", func(context.Context) (int, error) { <-release; return 1, nil })
	ch, led := g.DoChanLead(context.Background(), "b", func(context.Context) (int, error) { return 2, nil })
	if r := <-ch; led || !errors.Is(r.Err, ErrTooManyInFlight) {
		t.Fatalf("over the in-flight limit: led %v, %+v", led, r)
	}
	ch, led = g.DoChanLead(context.Background(), "a", func(context.Context) (int, error) { return 2, nil })
	if r := <-ch; led || !errors.Is(r.Err, ErrTooManyWaiters) {
		t.Fatalf("over the waiters limit: led %v, %+v", led, r)
	}
	ch, led = g.DoChanLead(context.Background(), "c", nil)
	if r := <-ch; led || !errors.Is(r.Err, ErrNilFunc) {
		t.Fatalf("nil function: led %v, %+v", led, r)
	}
	close(release)
	<-first
	g.Close()
	ch, led = g.DoChanLead(context.Background(), "a", func(context.Context) (int, error) { return 3, nil })
	if r := <-ch; led || !errors.Is(r.Err, ErrClosed) {
		t.Fatalf("after Close: led %v, %+v", led, r)
	}
}

// Inline execution (no way to cancel the caller, no timeout) must not run
// fn before the caller learns that it leads.
func TestDoChanLeadReportsLeadershipBeforeAnInlineFunctionRuns(t *testing.T) {
	g := New[string, int]()
	decided := make(chan struct{})
	ch, led := g.DoChanLead(context.Background(), "k", func(context.Context) (int, error) {
		<-decided
		return 1, nil
	})
	close(decided)
	if r := <-ch; !led || r.Val != 1 {
		t.Fatalf("led %v, %+v", led, r)
	}
}

// A leader's function that ends its goroutine with runtime.Goexit, run
// inline in the goroutine DoChanLead started, still yields one Result.
func TestDoChanLeadGoexitInInlineLeaderStillDelivers(t *testing.T) {
	g := New[string, int]()
	ch, led := g.DoChanLead(context.Background(), "k", func(context.Context) (int, error) {
		runtime.Goexit()
		return 1, nil
	})
	if r := <-ch; !led || r.Err == nil {
		t.Fatalf("led %v, %+v; want a leader with an error", led, r)
	}
	if n := g.InFlight(); n != 0 {
		t.Fatalf("InFlight() = %d after the loader ended, want 0", n)
	}
}

// A call from inside a loader, with its context, for the loader's own key
// runs its function directly: it leads.
func TestDoChanLeadReentrantCallLeads(t *testing.T) {
	g := New[string, int]()
	v, _, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		ch, led := g.DoChanLead(ctx, "k", func(context.Context) (int, error) { return 2, nil })
		if !led {
			return 0, errors.New("a reentrant call did not lead")
		}
		r := <-ch
		return r.Val, r.Err
	})
	if v != 2 || err != nil {
		t.Fatalf("Do = %d, %v; want the reentrant call's 2", v, err)
	}
}

// A leader whose context can be cancelled leaves on cancellation like any
// caller of DoChan; its loader goes on for the caller that joined.
func TestDoChanLeadLeaderLeavesOnItsOwnCancellation(t *testing.T) {
	g := New[string, int]()
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	ch, led := g.DoChanLead(ctx, "k", func(context.Context) (int, error) { <-release; return 1, nil })
	joined, joinedLed := g.DoChanLead(context.Background(), "k", func(context.Context) (int, error) { return 2, nil })
	if !led || joinedLed {
		t.Fatalf("led %v and %v, want true then false", led, joinedLed)
	}
	cancel()
	if r := <-ch; !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("cancelled leader got %+v, want context.Canceled", r)
	}
	close(release)
	if r := <-joined; r.Val != 1 || r.Err != nil {
		t.Fatalf("joiner got %+v, want the loader's 1", r)
	}
}

// Whatever the interleaving, exactly one of many concurrent callers of one
// key leads, its function is the only one that runs, and everyone gets its
// value.
func TestDoChanLeadElectsExactlyOneLeaderPerExecution(t *testing.T) {
	const callers = 64
	for _, ctx := range []context.Context{context.Background(), t.Context()} {
		g := New[string, int]()
		var ran, leaders atomic.Int32
		release := make(chan struct{})
		results := make([]<-chan Result[int], callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				ch, led := g.DoChanLead(ctx, "k", func(context.Context) (int, error) {
					ran.Add(1)
					<-release
					return 7, nil
				})
				if led {
					leaders.Add(1)
				}
				results[i] = ch
			})
		}
		wg.Wait() // every call has been decided while the loader is held open
		close(release)
		for i, ch := range results {
			if r := <-ch; r.Val != 7 || r.Err != nil {
				t.Fatalf("caller %d got %+v, want 7", i, r)
			}
		}
		if l, r := leaders.Load(), ran.Load(); l != 1 || r != 1 {
			t.Fatalf("%d leaders and %d loader runs for one key, want 1 and 1", l, r)
		}
		if n := g.InFlight(); n != 0 {
			t.Fatalf("InFlight() = %d after every result, want 0", n)
		}
	}
}
