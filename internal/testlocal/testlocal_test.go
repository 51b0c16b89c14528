package testlocal

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache/driver"
)

type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

func item(v string, staleUntil time.Time) driver.Item[string] {
	return driver.Item[string]{Value: v, Meta: driver.Meta{FreshUntil: staleUntil, StaleUntil: staleUntil}}
}

func TestItemLivesUntilItsStaleUntil(t *testing.T) {
	clk := &fakeClock{}
	clk.ns.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s := New[string](clk.Now)
	s.Set("k", item("v", clk.Now().Add(time.Second)))
	if it, ok := s.Get("k"); !ok || it.Value != "v" {
		t.Fatalf("Get = %+v, %v; want v", it, ok)
	}
	clk.ns.Add(int64(time.Second))
	if _, ok := s.Get("k"); ok {
		t.Fatal("Get returned the item at its StaleUntil")
	}
	for k := range s.All() {
		t.Fatalf("All yielded %q past its StaleUntil", k)
	}
	s.Set("k", item("v", clk.Now())) // already stale: not stored
	if s.Len() != 0 {
		t.Fatalf("Len = %d after Set of a stale item, want 0", s.Len())
	}
}

func TestAllAllowsDeleteWhileRanging(t *testing.T) {
	s := New[string](nil)
	for i := range 100 {
		s.Set(strconv.Itoa(i), item("v", time.Now().Add(time.Hour)))
	}
	n := 0
	for k := range s.All() {
		s.Delete(k)
		n++
	}
	if n != 100 || s.Len() != 0 {
		t.Fatalf("ranged %d items, %d left; want 100 and 0", n, s.Len())
	}
}
