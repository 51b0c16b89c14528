package archtest

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/flightcache/flightcache"

// The core (engine, keys, cache-aside orchestration) must build with the
// standard library alone, so that users who take only the core take no
// third-party code; Redis, SQL and metrics live in their own packages, in
// modules of their own (modules_test.go).
var core = []string{
	module + "/singleflight",
	module + "/internal/flightgroup", // the engine behind singleflight and the Cache
	module + "/key",
	module + "/clock",
	module + "/internal/coherence", // the coherence model
	module + "/driver",             // the contracts for tiers, coordinators, buses, codecs and observers
	module + "/flightstats",        // the dependency-free observer
	module + "/cachestatus",        // the RFC 9211 Cache-Status field
	module,
}

func TestCorePackagesImportOnlyTheStandardLibrary(t *testing.T) {
	for _, pkg := range core {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep != module && !strings.HasPrefix(dep, module+"/") {
				t.Errorf("%s depends on %s; core packages may import only the standard library and each other", pkg, dep)
			}
			if strings.HasPrefix(dep, module+"/") && !isCore(dep) && !strings.HasPrefix(dep, module+"/internal/") {
				t.Errorf("%s depends on non-core package %s", pkg, dep)
			}
		}
	}
}

func isCore(pkg string) bool {
	for _, c := range core {
		if c == pkg {
			return true
		}
	}
	return false
}
