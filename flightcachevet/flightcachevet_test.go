package flightcachevet_test

import (
	"testing"

	"github.com/flightcache/flightcache/flightcachevet"
	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"
)

func TestLoaderCtx(t *testing.T) {
	analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), flightcachevet.LoaderCtx, "loaderctx", "github.com/flightcache/flightcache/internal/enginecase")
}

func TestShortLived(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), flightcachevet.ShortLived, "shortlived", "shortlivedmain")
}

func TestHandKey(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), flightcachevet.HandKey, "handkey")
}

func TestDirective(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), flightcachevet.Directive, "directive")
}

func TestMutateHit(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), flightcachevet.MutateHit, "mutatehit")
}

// TestExample runs every check, handkey included, over a small service that
// makes each mistake, as the command with -handkey would.
func TestExample(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), all(t), "example/...")
}

// all is one analyzer that runs every check, so that one analysistest run
// sees all their findings.
func all(t *testing.T) *analysis.Analyzer {
	checks := append(flightcachevet.Analyzers[:len(flightcachevet.Analyzers):len(flightcachevet.Analyzers)], flightcachevet.HandKey)
	a := &analysis.Analyzer{Name: "flightcachevet", Doc: "every check"}
	seen := make(map[*analysis.Analyzer]bool)
	for _, c := range checks {
		for _, r := range c.Requires {
			if !seen[r] {
				seen[r] = true
				a.Requires = append(a.Requires, r)
			}
		}
		a.FactTypes = append(a.FactTypes, c.FactTypes...)
	}
	a.Run = func(pass *analysis.Pass) (any, error) {
		for _, c := range checks {
			p := *pass
			p.Analyzer = c
			if _, err := c.Run(&p); err != nil {
				t.Errorf("%s: %v", c.Name, err)
			}
		}
		return nil, nil
	}
	return a
}
