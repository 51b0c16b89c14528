package driver_test

import (
	"testing"

	"github.com/flightcache/flightcache/internal/leakcheck"
)

// The examples run Caches, which start goroutines; none may outlive them.
func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
