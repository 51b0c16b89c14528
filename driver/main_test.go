package driver_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The examples run Caches, which start goroutines; none may outlive them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
