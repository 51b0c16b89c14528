package product

import (
	"testing"

	"github.com/flightcache/flightcache/cmd/internal/testleak"
)

func TestMain(m *testing.M) { testleak.Main(m, nil) }
