package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/breaker"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/testlocal"
)

// failingShared fails every call at once and counts the calls that reach it.
type failingShared struct{ calls atomic.Int64 }

var errSharedDown = errors.New("connection refused")

func (s *failingShared) Get(context.Context, string) (driver.Entry, bool, error) {
	s.calls.Add(1)
	return driver.Entry{}, false, errSharedDown
}

func (s *failingShared) Set(context.Context, string, driver.Entry) error {
	s.calls.Add(1)
	return errSharedDown
}

func (s *failingShared) Delete(context.Context, string) error {
	s.calls.Add(1)
	return errSharedDown
}

// A Cache whose shared tier fails every call, behind a Breaker: once its
// consecutive failures are reached, no call reaches the failing tier.
func TestFailingSharedTierIsSkippedByTheBreaker(t *testing.T) {
	br, err := breaker.New(breaker.Options{ConsecutiveFailures: 5, CoolDown: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	shared := &failingShared{}
	c, err := flightcache.New(flightcache.Options[string]{
		Local: testlocal.New[string](nil), Shared: shared, SharedBreaker: br,
		SharedTimeout: 2 * time.Second, // room for a busy machine
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 200 {
		id := fmt.Sprint(i)
		if _, err := c.Get(context.Background(), "p:"+id, func(context.Context) (string, error) { return id, nil }); err != nil {
			t.Fatalf("Get %d: %v", i, err)
		}
	}
	if n := shared.calls.Load(); n != 5 {
		t.Fatalf("%d calls reached the failing tier, want 5", n)
	}
	if br.State() != driver.BreakerOpen {
		t.Fatalf("breaker %v, want open", br.State())
	}
}
