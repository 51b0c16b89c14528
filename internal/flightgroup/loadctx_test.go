package flightgroup_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/flightgroup"
)

type loadKey struct{}

// inFlight runs fn as the loader of one execution of g and returns what it
// returned, failing the test on an engine error.
func inFlight[V any](t *testing.T, g *flightgroup.Group[string, V], ctx context.Context, fn func(context.Context) (V, error)) V {
	t.Helper()
	v, _, err := g.Do(ctx, "k", fn)
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	return v
}

func TestLoadContextCarriesTheValuesAndEndsAtItsOwnDeadline(t *testing.T) {
	g := flightgroup.New[string, error](flightgroup.WithLoaderTimeout(time.Minute))
	defer g.Close()
	ctx := context.WithValue(context.Background(), loadKey{}, "trace-1")
	err := inFlight(t, g, ctx, func(fctx context.Context) (error, error) {
		before := time.Now()
		lctx, cancel := flightgroup.LoadContext(fctx, 20*time.Millisecond)
		defer cancel()
		if got := lctx.Value(loadKey{}); got != "trace-1" {
			return errors.New("the caller's value is missing"), nil
		}
		d, ok := lctx.Deadline()
		if !ok || d.Before(before.Add(20*time.Millisecond)) || d.After(time.Now().Add(20*time.Millisecond)) {
			return errors.New("the deadline is not d from LoadContext"), nil
		}
		<-lctx.Done()
		if !errors.Is(lctx.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(lctx), context.DeadlineExceeded) {
			return errors.New("ended without DeadlineExceeded"), nil
		}
		if fctx.Err() != nil {
			return errors.New("the load's deadline ended the execution's context"), nil
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLoadContextEndsOnCancelOnly(t *testing.T) {
	g := flightgroup.New[string, error](flightgroup.WithLoaderTimeout(time.Minute))
	defer g.Close()
	err := inFlight(t, g, context.Background(), func(fctx context.Context) (error, error) {
		lctx, cancel := flightgroup.LoadContext(fctx, time.Minute)
		if lctx.Err() != nil {
			return errors.New("ended before cancel"), nil
		}
		cancel()
		<-lctx.Done()
		if !errors.Is(lctx.Err(), context.Canceled) || fctx.Err() != nil {
			return errors.New("cancel did not end the load context alone"), nil
		}
		// Nothing may outlive the load context's deadline: the timer is
		// stopped (goleak checks the rest).
		cancel()
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLoadContextEndsWithTheExecutionAndItsCause(t *testing.T) {
	g := flightgroup.New[string, int](flightgroup.WithLoaderTimeout(time.Minute))
	loading := make(chan struct{})
	causes := make(chan error, 1)
	go func() {
		g.Do(context.Background(), "k", func(fctx context.Context) (int, error) {
			lctx, cancel := flightgroup.LoadContext(fctx, time.Minute)
			defer cancel()
			close(loading)
			<-lctx.Done()
			causes <- context.Cause(lctx)
			return 0, lctx.Err()
		})
	}()
	<-loading
	g.Close()
	if cause := <-causes; !errors.Is(cause, flightgroup.ErrClosed) {
		t.Fatalf("load context's cause after Close: %v, want ErrClosed", cause)
	}
}

func TestLoadContextEndsAtTheExecutionsHardTimeout(t *testing.T) {
	g := flightgroup.New[string, error](flightgroup.WithLoaderTimeout(30 * time.Millisecond))
	defer g.Close()
	errs := make(chan error, 1)
	_, _, err := g.Do(context.Background(), "k", func(fctx context.Context) (error, error) {
		// A load context asked for longer than the execution may run is
		// bounded by the execution's deadline, as context.WithTimeout is.
		lctx, cancel := flightgroup.LoadContext(fctx, time.Hour)
		defer cancel()
		if d, ok := lctx.Deadline(); !ok || time.Until(d) > time.Second {
			errs <- errors.New("deadline past the execution's")
			return nil, nil
		}
		<-lctx.Done()
		errs <- lctx.Err()
		<-fctx.Done() // a loader that returns late
		return nil, nil
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do: %v, want the loader timeout", err)
	}
	if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("load context: %v, want DeadlineExceeded", err)
	}
}

func TestLoadContextKeepsItsOwnCauseWhenTheExecutionEndsLater(t *testing.T) {
	g := flightgroup.New[string, int](flightgroup.WithLoaderTimeout(time.Minute))
	ended := make(chan struct{})
	causes := make(chan error, 1)
	go func() {
		g.Do(context.Background(), "k", func(fctx context.Context) (int, error) {
			lctx, cancel := flightgroup.LoadContext(fctx, time.Millisecond)
			defer cancel()
			<-lctx.Done()
			close(ended)
			<-fctx.Done() // Close
			causes <- context.Cause(lctx)
			return 0, nil
		})
	}()
	<-ended
	g.Close()
	if cause := <-causes; !errors.Is(cause, context.DeadlineExceeded) {
		t.Fatalf("cause of a load context that ended at its deadline, after Close: %v, want DeadlineExceeded", cause)
	}
}

func TestLoadContextIsNoExecutionContext(t *testing.T) {
	g := flightgroup.New[string, error](flightgroup.WithLoaderTimeout(time.Minute))
	defer g.Close()
	err := inFlight(t, g, context.Background(), func(fctx context.Context) (error, error) {
		lctx, cancel := flightgroup.LoadContext(fctx, time.Minute)
		defer cancel()
		if flightgroup.StopTimeout(lctx) {
			return errors.New("StopTimeout released an execution through a load context"), nil
		}
		// A call for the same key from inside the load runs its own
		// function instead of waiting for itself.
		v, _, err := g.Do(lctx, "k", func(context.Context) (error, error) { return nil, nil })
		if v != nil || err != nil {
			return errors.New("reentrant call through a load context failed"), nil
		}
		// A second load context of the execution, while the first is
		// live, is a standard one, and works the same.
		l2, cancel2 := flightgroup.LoadContext(fctx, time.Millisecond)
		defer cancel2()
		<-l2.Done()
		if !errors.Is(l2.Err(), context.DeadlineExceeded) || lctx.Err() != nil {
			return errors.New("second load context"), nil
		}
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLoadContextOfAnyOtherContextIsWithTimeout(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), loadKey{}, "v"))
	lctx, cancel := flightgroup.LoadContext(parent, time.Minute)
	defer cancel()
	if _, ok := lctx.Deadline(); !ok || lctx.Value(loadKey{}) != "v" {
		t.Fatal("not a timeout context carrying the parent's values")
	}
	cancelParent()
	<-lctx.Done()
	if !errors.Is(lctx.Err(), context.Canceled) {
		t.Fatalf("Err = %v", lctx.Err())
	}
}

func TestLoadContextOfAFlightEndsWithIt(t *testing.T) {
	g := flightgroup.New[string, int]()
	f, err := g.Start(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := flightgroup.LoadContext(f.Context(), time.Minute)
	defer cancel()
	f.Complete(1, nil)
	<-lctx.Done()
	if !errors.Is(lctx.Err(), context.Canceled) {
		t.Fatalf("Err after Complete = %v, want Canceled", lctx.Err())
	}
	g.Close()
}
