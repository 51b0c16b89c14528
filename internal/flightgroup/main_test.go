package flightgroup

import (
	"testing"

	"github.com/flightcache/flightcache/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
