package chaos

import (
	"testing"

	"go.uber.org/goleak"
)

// A run stops every goroutine it started (workload, faults, caches,
// coordinators, clients) before it returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
