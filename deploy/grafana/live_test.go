package grafana

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestDashboardLiveScript runs deploy/prometheus/dashboard-live.sh the way
// docs/OBSERVABILITY.md says (a real productd scraped by a real Prometheus
// with rules.yml loaded), with 10 s of traffic instead of 40 to keep the
// suite short. It must exit 0 (no query refused), and the queries without
// data must be the ones the docs name: those of the cluster and Bus panels,
// which have nothing to show on one productd without Redis. Without
// prometheus, curl or jq the test is skipped, except under CI=true.
func TestDashboardLiveScript(t *testing.T) {
	for _, tool := range []string{"prometheus", "curl", "jq", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not on PATH; under CI=true it must be (apt-get install prometheus curl jq): %v", tool, err)
			}
			t.Skipf("%s not on PATH (apt-get install prometheus curl jq): %v", tool, err)
		}
	}
	cmd := exec.Command("bash", "../prometheus/dashboard-live.sh")
	cmd.Env = append(os.Environ(), "DASHBOARD_LIVE_SECONDS=10")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dashboard-live.sh: %v\n%s", err, out)
	}
	summary := regexp.MustCompile(`(?m)^dashboard-live: (\d+) queries, (\d+) without data, 0 refused$`).FindSubmatch(out)
	if summary == nil {
		t.Fatalf("no summary line with 0 refused queries:\n%s", out)
	}
	// Without Redis there is no cluster coalescing and no Bus: their
	// queries have no data. Everything else must have some.
	clusterOrBus := regexp.MustCompile(`flightcache_cluster_|flightcache_bus_|flightcache_invalidation_last_received`)
	for _, line := range strings.Split(string(out), "\n") {
		if q, ok := strings.CutPrefix(line, "NO DATA  "); ok && !clusterOrBus.MatchString(q) {
			t.Errorf("a query without data on a single productd that is not about the cluster or the Bus: %s", q)
		}
	}
	if t.Failed() {
		t.Logf("dashboard-live.sh said:\n%s", out)
	}
}
