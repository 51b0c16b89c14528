package flightcachevet

import (
	"go/ast"
	"go/token"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// ignorePrefix starts a comment that silences the findings on its line and
// on the next one. A reason must follow.
const ignorePrefix = "//flightcachevet:ignore"

// Directive reports //flightcachevet:ignore comments without a reason.
var Directive = &analysis.Analyzer{
	Name: "directive",
	Doc: `report //flightcachevet:ignore comments that give no reason

A finding of any flightcachevet check is silenced by a comment
//flightcachevet:ignore <reason> on its line or on the line before. The
reason is required, so that the next reader knows why the pattern is
deliberate; an ignore without one silences nothing and is reported.`,
	URL: "https://pkg.go.dev/github.com/flightcache/flightcache/flightcachevet#Directive",
	Run: runDirective,
}

func runDirective(pass *analysis.Pass) (any, error) {
	for _, f := range pass.Files {
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				reason, ok := parseIgnore(c.Text)
				if ok && reason == "" {
					pass.Report(analysis.Diagnostic{
						Pos: c.Pos(), End: c.End(),
						Message: "flightcachevet:ignore needs a reason (//flightcachevet:ignore <why this is safe>); without one it silences nothing",
					})
				}
			}
		}
	}
	return nil, nil
}

// parseIgnore reports whether text is an ignore directive, and its reason.
func parseIgnore(text string) (reason string, ok bool) {
	rest, ok := strings.CutPrefix(text, ignorePrefix)
	if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '\t') {
		return "", false
	}
	return strings.TrimSpace(rest), true
}

// reporter reports a pass's diagnostics except those an ignore directive
// with a reason covers.
type reporter struct {
	pass *analysis.Pass
	// ignored holds, per file, the lines an ignore directive covers.
	ignored map[*token.File]map[int]bool
}

func newReporter(pass *analysis.Pass) *reporter {
	r := &reporter{pass: pass, ignored: make(map[*token.File]map[int]bool)}
	for _, f := range pass.Files {
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if reason, ok := parseIgnore(c.Text); ok && reason != "" {
					tf := pass.Fset.File(c.Pos())
					if r.ignored[tf] == nil {
						r.ignored[tf] = make(map[int]bool)
					}
					line := tf.Line(c.Pos())
					r.ignored[tf][line] = true
					r.ignored[tf][line+1] = true
				}
			}
		}
	}
	return r
}

// report reports d unless an ignore directive covers its line.
func (r *reporter) report(d analysis.Diagnostic) {
	tf := r.pass.Fset.File(d.Pos)
	if tf != nil && r.ignored[tf][tf.Line(d.Pos)] {
		return
	}
	r.pass.Report(d)
}

// isTestFile reports whether n is in a _test.go file.
func isTestFile(pass *analysis.Pass, n ast.Node) bool {
	return strings.HasSuffix(pass.Fset.File(n.Pos()).Name(), "_test.go")
}
