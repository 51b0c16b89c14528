package memstore

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/leakcheck"
)

// otter runs a periodic clean-up goroutine per cache; every test closes the
// stores it creates, so no goroutine may outlive the tests.
func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// fakeClock is a manually advanced time source shared by a Store and its
// test, so expiry is decided without waiting on real time.
type fakeClock struct{ nanos atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.nanos.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time                  { return time.Unix(0, c.nanos.Load()) }
func (c *fakeClock) Advance(d time.Duration)         { c.nanos.Add(int64(d)) }
func (c *fakeClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

func newStore[V any](t *testing.T, opts Options[V]) *Store[V] {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func item[V any](v V, now time.Time, fresh, stale time.Duration) driver.Item[V] {
	return driver.Item[V]{Value: v, Meta: driver.Meta{
		FreshUntil:   now.Add(fresh),
		StaleUntil:   now.Add(stale),
		LoadDuration: 3 * time.Millisecond,
	}}
}

func TestSetGetDeleteRoundTripsItem(t *testing.T) {
	clk := newFakeClock()
	s := newStore(t, Options[*string]{Now: clk.Now})
	v := "hello"
	want := item(&v, clk.Now(), time.Minute, time.Hour)
	want.NotFound = true
	want.Version = time.Unix(1700000000, 123456789) // wall clock, not the store's
	want.LoadedAt = clk.Now()

	if _, ok := s.Get("k"); ok {
		t.Fatal("Get on empty store: found")
	}
	s.Set("k", want)
	got, ok := s.Get("k")
	if !ok {
		t.Fatal("Get after Set: not found")
	}
	if got.Value != want.Value || !got.FreshUntil.Equal(want.FreshUntil) || !got.StaleUntil.Equal(want.StaleUntil) ||
		got.LoadDuration != want.LoadDuration || got.NotFound != want.NotFound ||
		!got.Version.Equal(want.Version) || !got.LoadedAt.Equal(want.LoadedAt) {
		t.Fatalf("Get = %+v, want %+v", got, want)
	}

	w := "replaced"
	s.Set("k", item(&w, clk.Now(), time.Minute, time.Hour))
	if got, _ := s.Get("k"); got.Value != &w {
		t.Fatalf("Set did not replace: got %q", *got.Value)
	}

	s.Delete("k")
	if _, ok := s.Get("k"); ok {
		t.Fatal("Get after Delete: found")
	}
	s.Delete("missing") // must not panic or error
}

func TestItemIsNotReturnedOnceStaleUntilPasses(t *testing.T) {
	clk := newFakeClock()
	s := newStore(t, Options[int]{Now: clk.Now})
	it := item(7, clk.Now(), time.Second, 10*time.Second)
	s.Set("k", it)

	clk.Advance(clk.Until(it.StaleUntil) - time.Nanosecond)
	if _, ok := s.Get("k"); !ok {
		t.Fatal("item missing 1ns before StaleUntil")
	}
	clk.Advance(time.Nanosecond)
	if got, ok := s.Get("k"); ok {
		t.Fatalf("item returned at StaleUntil: %+v", got)
	}
}

func TestItemExpiresIndependentlyOfOthers(t *testing.T) {
	clk := newFakeClock()
	s := newStore(t, Options[int]{Now: clk.Now})
	s.Set("short", item(1, clk.Now(), time.Second, 2*time.Second))
	s.Set("long", item(2, clk.Now(), time.Second, time.Hour))

	clk.Advance(time.Minute)
	if _, ok := s.Get("short"); ok {
		t.Error("short-lived item survived its StaleUntil")
	}
	if got, ok := s.Get("long"); !ok || got.Value != 2 {
		t.Errorf("long-lived item = %v, %v; want 2, true", got.Value, ok)
	}
}

func TestSetOfExpiredItemRemovesPreviousItem(t *testing.T) {
	clk := newFakeClock()
	s := newStore(t, Options[int]{Now: clk.Now})
	s.Set("k", item(1, clk.Now(), time.Minute, time.Hour))

	for name, it := range map[string]driver.Item[int]{
		"past StaleUntil":  item(2, clk.Now(), -2*time.Second, -time.Second),
		"StaleUntil = now": item(3, clk.Now(), 0, 0),
		"zero StaleUntil":  {Value: 4},
	} {
		t.Run(name, func(t *testing.T) {
			s.Set("k", item(1, clk.Now(), time.Minute, time.Hour))
			s.Set("k", it)
			if got, ok := s.Get("k"); ok {
				t.Fatalf("Get = %+v; want miss", got)
			}
		})
	}
}

// With the real clock (otter's own time source and periodic clean-up) an
// item must still disappear at its StaleUntil and never be seen after it.
func TestItemExpiresAtStaleUntilOnRealClock(t *testing.T) {
	s := newStore(t, Options[int]{})
	it := item(1, time.Now(), 20*time.Millisecond, 50*time.Millisecond)
	s.Set("k", it)
	// otter adds the time left to a clock reading taken just before it is
	// computed, so expiry may come a hair early, never late.
	const early = 10 * time.Millisecond // room for a preempted goroutine on a loaded machine
	deadline := it.StaleUntil.Add(5 * time.Second)
	for {
		before := time.Now()
		_, ok := s.Get("k")
		after := time.Now()
		if ok && !before.Before(it.StaleUntil) {
			t.Fatalf("item returned by a Get that started %v after its StaleUntil", before.Sub(it.StaleUntil))
		}
		if !ok {
			if after.Before(it.StaleUntil.Add(-early)) {
				t.Fatalf("item vanished %v before its StaleUntil", it.StaleUntil.Sub(after))
			}
			return
		}
		if after.After(deadline) {
			t.Fatal("item still present 5s after its StaleUntil")
		}
		time.Sleep(time.Millisecond) // polling with a deadline: expiry has no event to wait on
	}
}

// GetAt judges StaleUntil by the caller's reading alone: up to the instant
// before StaleUntil the item is there, from StaleUntil on it is not, even
// while the Store's own clock still says it lives.
func TestGetAtJudgesByTheCallersTime(t *testing.T) {
	clk := newFakeClock()
	s := newStore(t, Options[int]{Now: clk.Now})
	it := item(1, clk.Now(), time.Minute, time.Hour)
	s.Set("k", it)
	if got, ok := s.GetAt("k", it.StaleUntil.Add(-time.Nanosecond)); !ok || got.Value != 1 {
		t.Fatalf("GetAt 1ns before StaleUntil = %v, %v; want the item", got, ok)
	}
	for _, at := range []time.Time{it.StaleUntil, it.StaleUntil.Add(time.Hour)} {
		if got, ok := s.GetAt("k", at); ok {
			t.Fatalf("GetAt %v after StaleUntil = %+v; want a miss", at.Sub(it.StaleUntil), got)
		}
	}
	if _, ok := s.Get("k"); !ok {
		t.Fatal("Get on the Store's clock (an hour before StaleUntil) missed")
	}
}

// By default otter runs on a coarse clock and removes an item a second or
// so after its StaleUntil; Get and All must stop returning it at
// StaleUntil all the same, and otter must remove it in the end.
func TestDefaultClockHidesExpiredItemsBeforeOtterRemovesThem(t *testing.T) {
	s := newStore(t, Options[int]{})
	it := item(1, time.Now(), 10*time.Millisecond, 30*time.Millisecond)
	s.Set("k", it)
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := time.Now()
		_, ok := s.Get("k")
		if ok && !before.Before(it.StaleUntil) {
			t.Fatalf("Get returned the item %v after its StaleUntil", before.Sub(it.StaleUntil))
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("item still returned 10s after its StaleUntil")
		}
		time.Sleep(time.Millisecond) // polling with a deadline: expiry has no event to wait on
	}
	if time.Now().Before(it.StaleUntil) {
		t.Fatalf("item vanished %v before its StaleUntil", it.StaleUntil.Sub(time.Now()))
	}
	for k := range s.All() {
		t.Fatalf("All yielded %q after its StaleUntil", k)
	}
	for {
		if _, held := s.c.GetIfPresent("k"); !held {
			return // otter removed it
		}
		if time.Now().After(deadline) {
			t.Fatal("otter still holds the item 10s after its StaleUntil")
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline, as above
	}
}

func TestMaxEntriesBoundsSize(t *testing.T) {
	clk := newFakeClock()
	const max = 100
	s := newStore(t, Options[int]{MaxEntries: max, Now: clk.Now})
	for i := range 10 * max {
		s.Set(strconv.Itoa(i), item(i, clk.Now(), time.Minute, time.Hour))
	}
	s.c.CleanUp() // finish pending evictions so Len is exact
	if n := s.Len(); n > max || n == 0 {
		t.Fatalf("Len = %d after %d Sets; want 1..%d", n, 10*max, max)
	}
	present := 0
	for i := range 10 * max {
		if got, ok := s.Get(strconv.Itoa(i)); ok {
			present++
			if got.Value != i {
				t.Fatalf("key %d holds %d", i, got.Value)
			}
		}
	}
	if present > max {
		t.Fatalf("%d items readable; want at most %d", present, max)
	}
}

func TestDefaultMaxEntriesBoundsZeroOptions(t *testing.T) {
	s := newStore(t, Options[int]{})
	if got := s.c.GetMaximum(); got != DefaultMaxEntries {
		t.Fatalf("maximum = %d, want %d", got, DefaultMaxEntries)
	}
}

func TestCostBoundsTotalCost(t *testing.T) {
	clk := newFakeClock()
	const maxCost = 1000
	cost := func(_ string, it driver.Item[string]) uint32 { return uint32(len(it.Value)) }
	s := newStore(t, Options[string]{Cost: cost, MaxCost: maxCost, Now: clk.Now})
	val := string(make([]byte, 100))
	for i := range 100 {
		s.Set(strconv.Itoa(i), item(val, clk.Now(), time.Minute, time.Hour))
	}
	s.c.CleanUp()
	var total uint64
	for i := range 100 {
		if got, ok := s.Get(strconv.Itoa(i)); ok {
			total += uint64(cost("", *got))
		}
	}
	if total > maxCost || total == 0 {
		t.Fatalf("total cost of readable items = %d; want 1..%d", total, maxCost)
	}
	if w := s.c.WeightedSize(); w > maxCost {
		t.Fatalf("weighted size = %d > %d", w, maxCost)
	}

	// An item costlier than the whole budget is not kept.
	s.Set("huge", item(string(make([]byte, 2*maxCost)), clk.Now(), time.Minute, time.Hour))
	s.c.CleanUp()
	if _, ok := s.Get("huge"); ok {
		t.Fatal("item costing twice MaxCost was kept")
	}
}

func TestZeroCostIsCountedAsOne(t *testing.T) {
	clk := newFakeClock()
	s := newStore(t, Options[int]{
		Cost:    func(string, driver.Item[int]) uint32 { return 0 },
		MaxCost: 10,
		Now:     clk.Now,
	})
	for i := range 100 {
		s.Set(strconv.Itoa(i), item(i, clk.Now(), time.Minute, time.Hour))
	}
	s.c.CleanUp()
	if n := s.Len(); n > 10 {
		t.Fatalf("Len = %d with zero-cost items and MaxCost 10; zero cost must still be bounded", n)
	}
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	cost := func(string, driver.Item[int]) uint32 { return 1 }
	for _, tc := range []struct {
		name  string
		opts  Options[int]
		field string
	}{
		{"negative MaxEntries", Options[int]{MaxEntries: -1}, "MaxEntries"},
		{"MaxEntries with Cost", Options[int]{MaxEntries: 5, Cost: cost, MaxCost: 5}, "MaxEntries"},
		{"Cost without MaxCost", Options[int]{Cost: cost}, "MaxCost"},
		{"MaxCost without Cost", Options[int]{MaxCost: 5}, "MaxCost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.opts)
			if s != nil {
				s.Close()
			}
			if !errors.Is(err, flightcache.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			var ce *flightcache.ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("err = %#v, want *ConfigError for %s", err, tc.field)
			}
		})
	}
}

// Concurrent Sets, Gets and Deletes on overlapping keys must never return an
// item stored under another key, nor an item past its StaleUntil (run with
// -race).
func TestConcurrentUseNeverMixesKeys(t *testing.T) {
	clk := newFakeClock()
	s := newStore(t, Options[*string]{MaxEntries: 64, Now: clk.Now})
	const workers, ops, keys = 8, 2000, 128
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range ops {
				k := strconv.Itoa((i*7 + w) % keys)
				switch i % 5 {
				case 0:
					s.Delete(k)
				case 1, 2:
					v := "v" + k
					s.Set(k, item(&v, clk.Now(), time.Minute, time.Hour))
				default:
					if got, ok := s.Get(k); ok {
						if *got.Value != "v"+k {
							errs <- fmt.Errorf("Get(%s) = %q", k, *got.Value)
							return
						}
						if !got.StaleUntil.After(clk.Now()) {
							errs <- fmt.Errorf("Get(%s) returned an item past StaleUntil", k)
							return
						}
					}
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s.c.CleanUp()
	if n := s.Len(); n > 64 {
		t.Fatalf("Len = %d > MaxEntries 64 after concurrent use", n)
	}
}

func TestCloseIsIdempotentAndStoreStillWorks(t *testing.T) {
	s, err := New(Options[int]{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	s.Set("k", item(1, time.Now(), time.Minute, time.Hour))
	if got, ok := s.Get("k"); !ok || got.Value != 1 {
		t.Fatalf("Get after Close = %v, %v", got.Value, ok)
	}
}

// With ClockResolution the Store runs on a coarse clock that lags the real
// one, so an item may outlive its StaleUntil by about a resolution but must
// never vanish before it, and must vanish.
func TestCoarseClockItemNeverExpiresEarly(t *testing.T) {
	s := newStore(t, Options[int]{ClockResolution: time.Millisecond})
	it := item(1, time.Now(), 10*time.Millisecond, 30*time.Millisecond)
	s.Set("k", it)
	deadline := it.StaleUntil.Add(5 * time.Second)
	for {
		_, ok := s.Get("k")
		after := time.Now()
		if !ok {
			if after.Before(it.StaleUntil) {
				t.Fatalf("item vanished %v before its StaleUntil", it.StaleUntil.Sub(after))
			}
			return
		}
		if after.After(deadline) {
			t.Fatal("item still present 5s after its StaleUntil")
		}
		time.Sleep(100 * time.Microsecond) // polling with a deadline: expiry has no event
	}
}

func TestClockResolutionValidation(t *testing.T) {
	for name, o := range map[string]Options[int]{
		"negative": {ClockResolution: -1},
		"with Now": {ClockResolution: time.Millisecond, Now: time.Now},
	} {
		t.Run(name, func(t *testing.T) {
			if s, err := New(o); !errors.Is(err, flightcache.ErrInvalidConfig) || s != nil {
				t.Fatalf("New = %v, %v; want ErrInvalidConfig", s, err)
			}
		})
	}
}

// An item's tags are kept as given: the Cache compares them with its tag
// fences on every hit.
func TestItemKeepsItsTags(t *testing.T) {
	clk := newFakeClock()
	s := newStore(t, Options[*string]{Now: clk.Now})
	v := "hello"
	want := item(&v, clk.Now(), time.Minute, time.Hour)
	want.Tags = []string{"product:42", "category:tea"}
	s.Set("k", want)
	got, ok := s.Get("k")
	if !ok || len(got.Tags) != 2 || got.Tags[0] != "product:42" || got.Tags[1] != "category:tea" {
		t.Fatalf("Get = %+v, %v; want the tags kept", got, ok)
	}
}
