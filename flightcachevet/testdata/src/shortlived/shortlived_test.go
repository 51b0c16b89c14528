package shortlived

import (
	"context"
	"testing"

	"github.com/flightcache/flightcache/singleflight"
)

// Tests are exempt: one Group per test is the normal pattern.
func TestOne(t *testing.T) {
	g := singleflight.New[string, *Product]()
	_, _, _ = g.Do(context.Background(), "k", load)
}
