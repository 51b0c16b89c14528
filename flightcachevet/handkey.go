package flightcachevet

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
	"golang.org/x/tools/go/types/typeutil"
)

// HandKey reports cache keys assembled by hand. It is off by default in the
// flightcachevet command (the -handkey flag turns it on) and is not in
// Analyzers.
var HandKey = &analysis.Analyzer{
	Name: "handkey",
	Doc: `report cache keys assembled by hand instead of with package key (off by default)

A key is a promise that any two requests mapping to it may share one
answer. Assembled by hand, "product:" + id or fmt.Sprintf("%s:%s", tenant,
id), it is where a tenant or a locale gets left out (and the first
request's answer is served to everyone), and where two different tuples
collide ("a:b"+"c" and "a"+"b:c"). Package key names every dimension and
encodes them injectively.

The check reports the key argument of flightcache's Cache.Get, Fetch, Set
and Delete, and of singleflight's Group.Do, DoChan and Forget (for string
keys), when it is built at the call site with fmt.Sprintf, strings.Join or
+ on strings, or is a local variable assigned once from such an
expression. Test files are exempt: their keys are synthetic. It is a
warning, off by default: the flightcachevet command runs it with -handkey. A deliberate hand-built key is silenced with a
//flightcachevet:ignore <reason> comment on its line or the line before.`,
	URL:      "https://pkg.go.dev/github.com/flightcache/flightcache/flightcachevet#HandKey",
	Requires: []*analysis.Analyzer{inspect.Analyzer},
	Run:      runHandKey,
}

func runHandKey(pass *analysis.Pass) (any, error) {
	ins := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	rep := newReporter(pass)
	res := newResolver(pass)
	single := singleAssignments(pass)

	for c := range ins.Root().Preorder((*ast.CallExpr)(nil)) {
		if isTestFile(pass, c.Node()) {
			continue
		}
		cl := res.resolve(c.Node().(*ast.CallExpr))
		var k ast.Expr
		switch {
		case cl.id.isCacheMethod("Get", "Fetch", "Set", "Delete", "Refresh", "Peek"), cl.id.isGroupMethod("Do", "DoChan"):
			if len(cl.args) > 1 {
				k = cl.args[1]
			}
		case cl.id.isGroupMethod("Forget"):
			if len(cl.args) > 0 {
				k = cl.args[0]
			}
		}
		if k == nil || !isString(typeOf(pass.TypesInfo, k)) {
			continue
		}
		how := handBuilt(pass.TypesInfo, k)
		if how == "" {
			if id, ok := ast.Unparen(k).(*ast.Ident); ok {
				if v, ok := pass.TypesInfo.Uses[id].(*types.Var); ok && single[v] != nil {
					if h := handBuilt(pass.TypesInfo, single[v]); h != "" {
						how = fmt.Sprintf("%s (line %d)", h, pass.Fset.Position(single[v].Pos()).Line)
					}
				}
			}
		}
		if how == "" {
			continue
		}
		rep.report(analysis.Diagnostic{
			Pos: k.Pos(), End: k.End(),
			Message: fmt.Sprintf("cache key built by hand with %s: build it with package key (key.New(namespace).Tenant(t).ID(id)...Build()), which names every dimension and cannot collide", how),
		})
	}
	return nil, nil
}

// handBuilt says how e assembles a string by hand ("fmt.Sprintf",
// "strings.Join", "+"), or "" when it does not.
func handBuilt(info *types.Info, e ast.Expr) string {
	if tv, ok := info.Types[e]; ok && tv.Value != nil {
		return "" // a constant
	}
	switch e := ast.Unparen(e).(type) {
	case *ast.CallExpr:
		fn := typeutil.StaticCallee(info, e)
		if fn == nil || fn.Pkg() == nil {
			return ""
		}
		switch p, n := fn.Pkg().Path(), fn.Name(); {
		case p == "fmt" && n == "Sprintf" && len(e.Args) > 1:
			return "fmt.Sprintf"
		case p == "strings" && n == "Join":
			return "strings.Join"
		}
	case *ast.BinaryExpr:
		if e.Op == token.ADD && isString(typeOf(info, e)) {
			return "+"
		}
	}
	return ""
}

func isString(t types.Type) bool {
	b, ok := t.Underlying().(*types.Basic)
	return ok && b.Info()&types.IsString != 0
}
