package productd

import (
	"os"
	"testing"

	"github.com/flightcache/flightcache/cmd/internal/testleak"
)

func TestMain(m *testing.M) {
	testleak.Main(m, func() {
		if binDir != "" {
			os.RemoveAll(binDir)
		}
	})
}
