package flightcachevet

import (
	"fmt"
	"go/ast"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
)

// ShortLived reports a Cache or Group made for one function call.
var ShortLived = &analysis.Analyzer{
	Name: "shortlived",
	Doc: `report a Cache or Group created and dropped within one function call

A singleflight.Group coalesces only the calls made through it, and a
flightcache.Cache caches only for the callers that share it. One created
inside a request handler, used there and dropped, coalesces nothing: every
request builds its own registry and its own empty cache, and the origin
sees the whole herd.

The check reports a local variable holding the result of flightcache.New
or singleflight.New, or a zero or new singleflight.Group (&Group{},
new(Group), var g Group), when its only uses are method calls on it made
directly in the function that declares it (defer v.Close() included, go
v.Do(...) not), one at least a load (Get, Fetch, GetMany, FetchMany, Do). Any
other use is taken as the value outliving the call, and silences the
check: storing it in a field or a package variable, returning it, passing
it to a function, taking its address or a method value, or using it in a
function literal or goroutine (which may run concurrently, as DoChan calls
do, so a Group used that way can coalesce within the call; DoChan calls
made directly are exempt for the same reason). A call chained on the
constructor, singleflight.New[K, V]().Do(...), is reported too.

Exempt are _test.go files and, in a main package, the body of func main and
of the functions that only main-like functions call, directly from their
own body (the func main() { if err := run(); ... } pattern): there,
building one Cache or Group for the life of the program or the test is the
normal pattern. A handler literal inside main is not exempt.`,
	URL:      "https://pkg.go.dev/github.com/flightcache/flightcache/flightcachevet#ShortLived",
	Requires: []*analysis.Analyzer{inspect.Analyzer},
	Run:      runShortLived,
}

func runShortLived(pass *analysis.Pass) (any, error) {
	ins := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	rep := newReporter(pass)
	res := newResolver(pass)
	funcTypes := []ast.Node{(*ast.FuncDecl)(nil), (*ast.FuncLit)(nil)}

	// uses maps each variable to the cursors of its uses.
	uses := make(map[*types.Var][]inspector.Cursor)
	for c := range ins.Root().Preorder((*ast.Ident)(nil)) {
		if v, ok := pass.TypesInfo.Uses[c.Node().(*ast.Ident)].(*types.Var); ok && isLocal(v) {
			uses[v] = append(uses[v], c)
		}
	}
	enclosingFunc := func(c inspector.Cursor) ast.Node {
		for f := range c.Enclosing(funcTypes...) {
			return f.Node()
		}
		return nil
	}
	mainLike := mainLikeFuncs(pass, ins)
	exempt := func(c inspector.Cursor) bool {
		if isTestFile(pass, c.Node()) {
			return true
		}
		fd, ok := enclosingFunc(c).(*ast.FuncDecl)
		return ok && mainLike[fd]
	}

	// onlyDirectCalls reports whether every use of v is a method call on it,
	// other than DoChan, in fn itself, and one at least is a load (Get,
	// Fetch, GetMany, FetchMany, Do): a Cache built only to check its
	// options, then closed, is no mistake.
	onlyDirectCalls := func(v *types.Var, fn ast.Node) bool {
		loads := false
		for _, u := range uses[v] {
			if enclosingFunc(u) != fn {
				return false
			}
			sel, ok := u.Parent().Node().(*ast.SelectorExpr)
			if !ok || sel.X != u.Node() {
				return false
			}
			s := pass.TypesInfo.Selections[sel]
			if s == nil || s.Kind() != types.MethodVal || s.Obj().Name() == "DoChan" {
				return false
			}
			loads = loads || in(s.Obj().Name(), []string{"Get", "Fetch", "GetMany", "FetchMany", "Do"})
			ce, ok := u.Parent().Parent().Node().(*ast.CallExpr)
			if !ok || ast.Unparen(ce.Fun) != sel {
				return false
			}
			if _, ok := u.Parent().Parent().Parent().Node().(*ast.GoStmt); ok {
				return false // concurrent calls may share a load
			}
		}
		return loads
	}

	report := func(at ast.Node, what string) {
		rep.report(analysis.Diagnostic{
			Pos: at.Pos(), End: at.End(),
			Message: fmt.Sprintf("%s is created and used only within this call: %s; create it once and share it (a field or a package variable)", what, consequence(what)),
		})
	}

	// Constructor calls.
	for c := range ins.Root().Preorder((*ast.CallExpr)(nil)) {
		ce := c.Node().(*ast.CallExpr)
		cl := res.resolve(ce)
		what := ""
		switch {
		case cl.id.isConstructor():
			what = cl.id.pkgType()
		case isNewGroup(pass, ce):
			what = "singleflight.Group"
		default:
			continue
		}
		if exempt(c) {
			continue
		}
		parent := c.Parent()
		// The constructor call itself may be the receiver of a chained call.
		if sel, ok := parent.Node().(*ast.SelectorExpr); ok && sel.X == ce {
			if pce, ok := parent.Parent().Node().(*ast.CallExpr); ok && pce.Fun == sel {
				if s := pass.TypesInfo.Selections[sel]; s != nil && s.Kind() == types.MethodVal && in(s.Obj().Name(), []string{"Get", "Fetch", "GetMany", "FetchMany", "Do"}) {
					report(ce, what)
				}
			}
			continue
		}
		if v := definedBy(pass, parent.Node(), ce); v != nil && onlyDirectCalls(v, enclosingFunc(c)) {
			report(ce, what)
		}
	}
	// Composite literals: &singleflight.Group[K, V]{} and the like.
	for c := range ins.Root().Preorder((*ast.CompositeLit)(nil)) {
		cl := c.Node().(*ast.CompositeLit)
		if !isNamedFrom(typeOf(pass.TypesInfo, cl), singleflightPkg, "Group") || exempt(c) {
			continue
		}
		at, parent := ast.Node(cl), c.Parent()
		if u, ok := parent.Node().(*ast.UnaryExpr); ok {
			at, parent = u, parent.Parent()
		}
		if v := definedBy(pass, parent.Node(), at.(ast.Expr)); v != nil && onlyDirectCalls(v, enclosingFunc(c)) {
			report(at, "singleflight.Group")
		}
	}
	// var g singleflight.Group[K, V]
	for c := range ins.Root().Preorder((*ast.ValueSpec)(nil)) {
		vs := c.Node().(*ast.ValueSpec)
		if len(vs.Values) != 0 || exempt(c) {
			continue
		}
		for _, name := range vs.Names {
			v, ok := pass.TypesInfo.Defs[name].(*types.Var)
			if ok && isLocal(v) && isNamedFrom(v.Type(), singleflightPkg, "Group") && onlyDirectCalls(v, enclosingFunc(c)) {
				report(name, "singleflight.Group")
			}
		}
	}
	return nil, nil
}

// pkgType is how a message names what a constructor builds.
func (id apiFunc) pkgType() string {
	if id.pkg == modulePath {
		return "flightcache.Cache"
	}
	return "singleflight.Group"
}

func consequence(what string) string {
	if what == "flightcache.Cache" {
		return "every call gets an empty cache and its own single-flight registry, so nothing is cached or coalesced across calls"
	}
	return "every call gets its own registry, so no two callers ever share a load"
}

// isNewGroup reports whether ce is new(singleflight.Group[K, V]).
func isNewGroup(pass *analysis.Pass, ce *ast.CallExpr) bool {
	id, ok := ast.Unparen(ce.Fun).(*ast.Ident)
	if !ok || len(ce.Args) != 1 {
		return false
	}
	if b, ok := pass.TypesInfo.Uses[id].(*types.Builtin); !ok || b.Name() != "new" {
		return false
	}
	return isNamedFrom(typeOf(pass.TypesInfo, ce.Args[0]), singleflightPkg, "Group")
}

// definedBy returns the local variable that parent (a := or var statement)
// defines with the value e as the first of its results, or nil.
func definedBy(pass *analysis.Pass, parent ast.Node, e ast.Expr) *types.Var {
	var lhs ast.Expr
	switch p := parent.(type) {
	case *ast.AssignStmt:
		if p.Tok.String() != ":=" {
			return nil
		}
		switch {
		case len(p.Rhs) == 1 && p.Rhs[0] == e:
			lhs = p.Lhs[0]
		case len(p.Rhs) == len(p.Lhs):
			for i, r := range p.Rhs {
				if r == e {
					lhs = p.Lhs[i]
				}
			}
		}
	case *ast.ValueSpec:
		switch {
		case len(p.Values) == 1 && p.Values[0] == e:
			lhs = p.Names[0]
		case len(p.Values) == len(p.Names):
			for i, r := range p.Values {
				if r == e {
					lhs = p.Names[i]
				}
			}
		}
	}
	id, ok := lhs.(*ast.Ident)
	if !ok {
		return nil
	}
	v, ok := pass.TypesInfo.Defs[id].(*types.Var)
	if !ok || !isLocal(v) {
		return nil
	}
	return v
}

// mainLikeFuncs returns, in a main package, func main and the functions that
// run once per program as it does: those referred to only by calls made
// directly in the body of main-like functions (not in a function literal,
// which may run per request, nor in a go statement or a loop).
func mainLikeFuncs(pass *analysis.Pass, ins *inspector.Inspector) map[*ast.FuncDecl]bool {
	mainLike := make(map[*ast.FuncDecl]bool)
	if pass.Pkg.Name() != "main" {
		return mainLike
	}
	decls := make(map[*types.Func]*ast.FuncDecl)
	for c := range ins.Root().Preorder((*ast.FuncDecl)(nil)) {
		fd := c.Node().(*ast.FuncDecl)
		if fn, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func); ok && fd.Recv == nil {
			decls[fn] = fd
			if fd.Name.Name == "main" && !isTestFile(pass, fd) {
				mainLike[fd] = true
			}
		}
	}
	// callers maps each function to the function declarations it is used
	// in, nil for a use that is not a direct call in a declaration's body.
	callers := make(map[*types.Func][]*ast.FuncDecl)
	for c := range ins.Root().Preorder((*ast.Ident)(nil)) {
		fn, ok := pass.TypesInfo.Uses[c.Node().(*ast.Ident)].(*types.Func)
		if !ok || decls[fn] == nil {
			continue
		}
		var caller *ast.FuncDecl
		if ce, ok := c.Parent().Node().(*ast.CallExpr); ok && ce.Fun == c.Node() {
			for e := range c.Enclosing((*ast.FuncDecl)(nil), (*ast.FuncLit)(nil), (*ast.GoStmt)(nil), (*ast.ForStmt)(nil), (*ast.RangeStmt)(nil)) {
				caller, _ = e.Node().(*ast.FuncDecl)
				break
			}
		}
		callers[fn] = append(callers[fn], caller)
	}
	for changed := true; changed; {
		changed = false
		for fn, fd := range decls {
			if mainLike[fd] || len(callers[fn]) == 0 {
				continue
			}
			all := true
			for _, caller := range callers[fn] {
				all = all && caller != nil && mainLike[caller]
			}
			if all {
				mainLike[fd], changed = true, true
			}
		}
	}
	return mainLike
}
