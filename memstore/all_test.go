package memstore

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
)

// collect ranges over s.All and returns how many times each key was
// yielded, failing the test if an item does not belong to its key.
func collect(t *testing.T, s *Store[*string]) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for k, it := range s.All() {
		if it == nil || it.Value == nil || *it.Value != "v"+k {
			t.Fatalf("All yielded %q with item %+v", k, it)
		}
		seen[k]++
	}
	return seen
}

func TestAllYieldsEveryItemOnceAsGetSharesIt(t *testing.T) {
	clk := newFakeClock()
	s := newStore(t, Options[*string]{Now: clk.Now})
	const n = 1000
	for i := range n {
		k := strconv.Itoa(i)
		v := "v" + k
		s.Set(k, item(&v, clk.Now(), time.Minute, time.Hour))
	}
	seen := collect(t, s)
	if len(seen) != n {
		t.Fatalf("All yielded %d keys, want %d", len(seen), n)
	}
	for k, c := range seen {
		if c != 1 {
			t.Fatalf("All yielded %q %d times", k, c)
		}
	}
	for k, it := range s.All() {
		got, ok := s.Get(k)
		if !ok || got != it {
			t.Fatalf("All's item for %q is not the one Get shares (%p, %p)", k, it, got)
		}
	}
}

func TestAllOfEmptyStoreYieldsNothing(t *testing.T) {
	s := newStore(t, Options[*string]{})
	for k := range s.All() {
		t.Fatalf("empty store yielded %q", k)
	}
}

func TestAllSkipsItemsPastStaleUntil(t *testing.T) {
	clk := newFakeClock()
	s := newStore(t, Options[*string]{Now: clk.Now})
	short, long := "vshort", "vlong"
	s.Set("short", item(&short, clk.Now(), time.Second, 10*time.Second))
	s.Set("long", item(&long, clk.Now(), time.Second, time.Hour))

	clk.Advance(10*time.Second - time.Nanosecond)
	if seen := collect(t, s); seen["short"] != 1 || seen["long"] != 1 || len(seen) != 2 {
		t.Fatalf("1ns before short's StaleUntil All yielded %v, want both", seen)
	}
	clk.Advance(time.Nanosecond) // exactly short's StaleUntil: Get no longer returns it
	if _, ok := s.Get("short"); ok {
		t.Fatal("Get returned short at its StaleUntil")
	}
	if seen := collect(t, s); seen["short"] != 0 || seen["long"] != 1 || len(seen) != 1 {
		t.Fatalf("at short's StaleUntil All yielded %v, want only long", seen)
	}
}

func TestAllStopsWhenTheLoopBreaks(t *testing.T) {
	clk := newFakeClock()
	s := newStore(t, Options[*string]{Now: clk.Now})
	for i := range 100 {
		v := "v" + strconv.Itoa(i)
		s.Set(strconv.Itoa(i), item(&v, clk.Now(), time.Minute, time.Hour))
	}
	n := 0
	for range s.All() {
		n++
		if n == 3 {
			break
		}
	}
	if n != 3 {
		t.Fatalf("loop ran %d times, want 3", n)
	}
}

// Bulk invalidation deletes from inside the loop: every key deleted as it
// is yielded, or a key other than the one yielded, must neither deadlock
// nor upset the iteration.
func TestAllAllowsDeleteAndSetWhileRanging(t *testing.T) {
	clk := newFakeClock()
	s := newStore(t, Options[*string]{Now: clk.Now})
	const n = 2000
	for i := range n {
		k := strconv.Itoa(i)
		v := "v" + k
		s.Set(k, item(&v, clk.Now(), time.Minute, time.Hour))
	}
	// Delete the odd keys while ranging (the one yielded, or its
	// neighbour), and replace the even ones with a new Item.
	seen := map[string]int{}
	for k, it := range s.All() {
		if *it.Value != "v"+k {
			t.Fatalf("All yielded %q with value %q", k, *it.Value)
		}
		seen[k]++
		i, _ := strconv.Atoi(k)
		if i%2 == 1 {
			s.Delete(k)
			continue
		}
		s.Delete(strconv.Itoa(i + 1)) // a key that may be yielded later
		v := "v" + k
		s.Set(k, item(&v, clk.Now(), time.Minute, 2*time.Hour))
	}
	for i := 0; i < n; i += 2 {
		if c := seen[strconv.Itoa(i)]; c != 1 {
			t.Fatalf("even key %d, never deleted, yielded %d times", i, c)
		}
	}
	for k, c := range seen {
		if c != 1 {
			t.Fatalf("key %q yielded %d times", k, c)
		}
	}
	after := collect(t, s)
	if len(after) != n/2 {
		t.Fatalf("after deleting the odd keys All yields %d keys, want %d", len(after), n/2)
	}
	for k := range after {
		if i, _ := strconv.Atoi(k); i%2 == 1 {
			t.Fatalf("deleted key %q still yielded", k)
		}
		if it, _ := s.Get(k); !it.StaleUntil.Equal(clk.Now().Add(2 * time.Hour)) {
			t.Fatalf("key %q: the replacement Set was lost", k)
		}
	}
}

// Ranging while other goroutines Set and Delete (run with -race): keys
// nobody touches are yielded exactly once per iteration, and a churned key
// is never yielded with another key's item.
func TestAllUnderConcurrentSetAndDelete(t *testing.T) {
	clk := newFakeClock()
	s := newStore(t, Options[*string]{MaxEntries: 100_000, Now: clk.Now})
	const stable, churn, writers, rangers, rounds = 500, 200, 4, 2, 20
	for i := range stable {
		k := "stable:" + strconv.Itoa(i)
		v := "v" + k
		s.Set(k, item(&v, clk.Now(), time.Minute, time.Hour))
	}

	stop := make(chan struct{})
	start := make(chan struct{})
	var writersWG, rangersWG sync.WaitGroup
	for w := range writers {
		writersWG.Add(1)
		go func() {
			defer writersWG.Done()
			<-start
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := "churn:" + strconv.Itoa((i*7+w)%churn)
				if i%3 == 0 {
					s.Delete(k)
					continue
				}
				v := "v" + k
				s.Set(k, item(&v, clk.Now(), time.Minute, time.Hour))
			}
		}()
	}
	errs := make(chan error, rangers)
	for range rangers {
		rangersWG.Add(1)
		go func() {
			defer rangersWG.Done()
			<-start
			for range rounds {
				seen := make(map[string]int, stable+churn)
				for k, it := range s.All() {
					if *it.Value != "v"+k {
						errs <- fmt.Errorf("All yielded %q with value %q", k, *it.Value)
						return
					}
					seen[k]++
					if strings.HasPrefix(k, "churn:") {
						s.Delete(k) // rangers delete too, as bulk invalidation does
					}
				}
				for i := range stable {
					if c := seen["stable:"+strconv.Itoa(i)]; c != 1 {
						errs <- fmt.Errorf("stable key %d yielded %d times in one iteration", i, c)
						return
					}
				}
			}
		}()
	}
	close(start)
	rangersWG.Wait()
	close(stop)
	writersWG.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// The interface bulk invalidation consumes, through a plain LocalStore.
func TestStoreIsALocalRanger(t *testing.T) {
	var local driver.LocalStore[int] = newStore(t, Options[int]{})
	if _, ok := local.(driver.LocalRanger[int]); !ok {
		t.Fatal("*Store does not implement driver.LocalRanger")
	}
}
