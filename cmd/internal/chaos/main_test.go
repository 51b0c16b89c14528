package chaos

import (
	"testing"

	"github.com/flightcache/flightcache/cmd/internal/testleak"
)

// A run stops every goroutine it started (workload, faults, caches,
// coordinators, clients) before it returns.
func TestMain(m *testing.M) { testleak.Main(m, nil) }
