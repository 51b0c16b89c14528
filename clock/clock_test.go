package clock

import (
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// The coarse time is a past reading of the real clock: never ahead of it,
// and it keeps moving.
func TestCoarseNeverRunsAheadAndAdvances(t *testing.T) {
	c := NewCoarse(time.Millisecond)
	defer c.Stop()
	first := c.NowNano()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := c.NowNano()
		if real := time.Now().UnixNano(); got > real {
			t.Fatalf("coarse time %d is ahead of the real time %d", got, real)
		}
		if got > first {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("coarse clock did not advance within 5s")
		}
		time.Sleep(100 * time.Microsecond) // polling with a deadline: no event marks a tick
	}
	if n, tm := c.NowNano(), c.Now(); tm.UnixNano() < n {
		t.Fatalf("Now %v before NowNano %d", tm, n)
	}
}

// A stopped clock keeps answering, with the precise time: a cache still
// holding it must not see time stand still.
func TestStoppedCoarseReadsPreciseTime(t *testing.T) {
	c := NewCoarse(time.Hour) // would never tick on its own
	c.Stop()
	c.Stop() // idempotent
	before := time.Now()
	time.Sleep(2 * time.Millisecond)
	if got := c.Now(); !got.After(before) {
		t.Fatalf("stopped clock reads %v, not after %v", got, before)
	}
	if got := c.NowNano(); got <= before.UnixNano() {
		t.Fatalf("stopped clock NowNano %d, not after %d", got, before.UnixNano())
	}
}

func TestNonPositiveResolutionMeansDefault(t *testing.T) {
	c := NewCoarse(0)
	defer c.Stop()
	if c.NowNano() == 0 {
		t.Fatal("clock not started")
	}
}

func TestMonotonicFollowsTheRealClock(t *testing.T) {
	before := time.Now()
	m := Monotonic()
	after := time.Now()
	// The monotonic readings order them exactly; the wall reading may
	// differ from time.Now only by wall-clock steps since start, so allow
	// a generous margin for a test machine whose clock is being slewed.
	if m.Before(before) || m.After(after) {
		t.Fatalf("Monotonic() = %v, not between %v and %v", m, before, after)
	}
	if d := m.Round(0).Sub(after.Round(0)); d > time.Second || d < -time.Second {
		t.Fatalf("Monotonic's wall time is %v away from time.Now's", d)
	}
}
