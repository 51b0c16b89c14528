package stampede

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// Distinct made-up ids: naive cache-aside and negative caching each send
// every one to the origin; the guard sends (almost) none, and every
// request answers 404 in all three.
func TestPenetrationModeGuardSparesTheOriginWhereNegativeCachingCannot(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := mainWith(context.Background(), Config{Catalog: &smallCatalog, OriginLatency: 1},
		[]string{"-json", "-mode", "penetration", "-n", "500", "-report", ""}, &stdout, &stderr, false)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	res := decode(t, stdout.Bytes())
	naive, neg, guard := res[ModePenetrationNaive], res[ModePenetrationNegative], res[ModePenetrationGuard]
	for _, r := range []Result{naive, neg, guard} {
		if r.Requests != 500 || r.Errors != 0 {
			t.Fatalf("%s: %d requests, %d not a 404 (%v)", r.Mode, r.Requests, r.Errors, r.CacheStatus)
		}
	}
	if naive.OriginQueries != 500 {
		t.Fatalf("origin queries: naive %d; want one per distinct id", naive.OriginQueries)
	}
	// Negative caching cannot spare a first miss: every distinct id is read
	// at the origin, though concurrent misses share batched statements.
	if neg.OriginRows != 500 || neg.OriginQueries < 1 || neg.OriginQueries > 500 {
		t.Fatalf("negative caching: %d origin rows in %d queries; want one row per distinct id, in at most 500 queries", neg.OriginRows, neg.OriginQueries)
	}
	if guard.OriginQueries > 10 { // 2 % of 500: the filter's false positives
		t.Fatalf("guard: %d origin queries for 500 missing ids; want at most 10 (%v)", guard.OriginQueries, guard.CacheStatus)
	}
	filtered := 0
	for status, n := range guard.CacheStatus {
		if strings.Contains(status, "detail=filtered") {
			filtered += n
		}
	}
	if filtered < 490 {
		t.Fatalf("guard Cache-Status %v: want the requests filtered", guard.CacheStatus)
	}
}
