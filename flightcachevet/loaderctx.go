package flightcachevet

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/token"
	"go/types"
	"slices"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
)

// LoaderCtx reports loaders that use the caller's context instead of their
// own.
var LoaderCtx = &analysis.Analyzer{
	Name: "loaderctx",
	Doc: `report loaders that use the caller's context instead of their own

A loader passed to flightcache's Cache.Get, Fetch, GetMany or FetchMany, or
to singleflight's Group.Do or DoChan, runs once for every caller that shares
its key. It receives its own context, which carries the values of the caller
that started it but not that caller's cancellation, and which ends at the
loader timeout or when the Cache or Group closes. A loader that uses instead
a context.Context variable of the enclosing function (typically the ctx of
the request that happened to lead) is cancelled when that one caller leaves,
and the load fails for every waiter; it also escapes the loader timeout.

The check looks at function literals passed as loaders (directly, through a
local variable, through a method value such as get := c.Get, or through an
alias or instantiation of Cache or Group), and reports any use in them of a
context.Context variable declared outside the literal, or of r.Context() on
such a variable, including one passed on to a helper. The suggested fix uses
the loader's own parameter, naming it when it is _ or unnamed.

It also follows loader factories: a call such as c.Get(ctx, k, loaderFor(ctx,
id)), where loaderFor returns a literal that uses its own context parameter,
is reported at the argument that the loader captures.`,
	URL:       "https://pkg.go.dev/github.com/flightcache/flightcache/flightcachevet#LoaderCtx",
	Requires:  []*analysis.Analyzer{inspect.Analyzer},
	FactTypes: []analysis.Fact{new(loaderFactory)},
	Run:       runLoaderCtx,
}

// loaderFactory is the fact that a function returns a loader literal that
// uses some of the function's own context parameters (by index) instead of
// the loader's.
type loaderFactory struct {
	Params []int
}

// AFact marks loaderFactory as an analysis.Fact.
func (*loaderFactory) AFact() {}

func (f *loaderFactory) String() string { return fmt.Sprintf("loaderFactory%v", f.Params) }

func runLoaderCtx(pass *analysis.Pass) (any, error) {
	ins := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	rep := newReporter(pass)
	res := newResolver(pass)
	single := singleAssignments(pass)

	// Facts first, so that calls in this package see its own factories.
	for c := range ins.Root().Preorder((*ast.FuncDecl)(nil)) {
		fd := c.Node().(*ast.FuncDecl)
		if fd.Body == nil {
			continue
		}
		if f := factoryFact(pass, fd, single); f != nil {
			pass.ExportObjectFact(pass.TypesInfo.Defs[fd.Name], f)
		}
	}

	checked := make(map[*ast.FuncLit]bool)
	for c := range ins.Root().Preorder((*ast.CallExpr)(nil)) {
		ce := c.Node().(*ast.CallExpr)
		if tv, ok := pass.TypesInfo.Types[ce.Fun]; !ok || tv.IsType() {
			continue // a conversion
		}
		cl := res.resolve(ce)
		for _, arg := range loaderArgs(pass, cl) {
			switch a := ast.Unparen(arg).(type) {
			case *ast.FuncLit:
				if !checked[a] {
					checked[a] = true
					checkLoaderLit(pass, rep, a, cl)
				}
			case *ast.Ident:
				if v, ok := pass.TypesInfo.Uses[a].(*types.Var); ok {
					if lit := funcLitOf(single, v); lit != nil && !checked[lit] {
						checked[lit] = true
						checkLoaderLit(pass, rep, lit, cl)
					}
				}
			case *ast.CallExpr:
				checkFactoryCall(pass, rep, res.resolve(a))
			}
		}
	}
	return nil, nil
}

// loaderArgs returns the arguments of cl that are loaders: those passed to a
// parameter of type flightcache.LoadFunc or BatchLoadFunc (whatever is
// called: a Cache method, a method value, an interface method), and the fn
// of singleflight's Group.Do and DoChan.
func loaderArgs(pass *analysis.Pass, cl call) []ast.Expr {
	var out []ast.Expr
	if sig, ok := typeOf(pass.TypesInfo, cl.expr.Fun).Underlying().(*types.Signature); ok {
		for i, a := range cl.expr.Args {
			t := paramType(sig, i, cl.expr.Ellipsis.IsValid())
			if t != nil && (isNamedFrom(t, modulePath, "LoadFunc") || isNamedFrom(t, modulePath, "BatchLoadFunc")) {
				out = append(out, a)
			}
		}
	}
	if cl.id.isGroupMethod("Do", "DoChan") && len(cl.args) == 3 && !slices.Contains(out, cl.args[2]) {
		out = append(out, cl.args[2])
	}
	return out
}

// singleAssignments maps each local variable that is assigned exactly once
// in the package, with a known value (load := func(ctx context.Context)
// ...), to that value.
func singleAssignments(pass *analysis.Pass) map[*types.Var]ast.Expr {
	vals := make(map[*types.Var]ast.Expr)
	bad := make(map[*types.Var]bool)
	for _, f := range pass.Files {
		eachAssignment(pass.TypesInfo, f, func(v *types.Var, rhs ast.Expr) {
			if bad[v] || v.IsField() || !isLocal(v) {
				return
			}
			if _, seen := vals[v]; seen || rhs == nil {
				bad[v] = true
				delete(vals, v)
				return
			}
			vals[v] = rhs
		})
	}
	return vals
}

// funcLitOf returns the function literal that the single assignment of v
// holds, or nil.
func funcLitOf(single map[*types.Var]ast.Expr, v *types.Var) *ast.FuncLit {
	lit, _ := ast.Unparen(orBad(single[v])).(*ast.FuncLit)
	return lit
}

// isLocal reports whether v is a variable (or parameter) of a function
// rather than of a package.
func isLocal(v *types.Var) bool {
	return v.Pkg() != nil && v.Parent() != nil && v.Parent() != v.Pkg().Scope()
}

// isContext reports whether t is context.Context or a type that implements
// it (a framework's request context).
func isContext(t types.Type) bool {
	if isNamedFrom(t, "context", "Context") {
		return true
	}
	ms := types.NewMethodSet(t)
	for _, m := range []string{"Deadline", "Done", "Err", "Value"} {
		if ms.Lookup(nil, m) == nil {
			return false
		}
	}
	return true
}

// offence is one use of an outer context inside a loader literal.
type offence struct {
	expr ast.Expr   // the identifier, or the r.Context() call
	obj  *types.Var // the outer variable
}

// outerContexts returns the uses, inside lit, of context variables declared
// outside it (and r.Context() calls on such variables), in source order.
func outerContexts(info *types.Info, lit *ast.FuncLit) []offence {
	outside := func(v *types.Var) bool {
		return isLocal(v) && !v.IsField() && (v.Pos() < lit.Pos() || v.Pos() >= lit.End())
	}
	var out []offence
	ast.Inspect(lit.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			if v, ok := info.Uses[n].(*types.Var); ok && outside(v) && isContext(v.Type()) {
				out = append(out, offence{n, v})
			}
		case *ast.CallExpr:
			sel, ok := ast.Unparen(n.Fun).(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Context" || len(n.Args) != 0 || !isContext(typeOf(info, n)) {
				return true
			}
			if id, ok := ast.Unparen(sel.X).(*ast.Ident); ok {
				if v, ok := info.Uses[id].(*types.Var); ok && outside(v) && !isContext(v.Type()) {
					out = append(out, offence{n, v})
					return false
				}
			}
		}
		return true
	})
	return out
}

// calleeName is how a message names what a loader was passed to.
func calleeName(cl call) string {
	switch {
	case cl.id.isCacheMethod("Get", "Fetch", "GetMany", "FetchMany", "Refresh"), cl.id.isGroupMethod("Do", "DoChan"):
		return cl.id.recv + "." + cl.id.name
	case cl.fn != nil:
		return cl.fn.Name()
	}
	return "a call"
}

func checkLoaderLit(pass *analysis.Pass, rep *reporter, lit *ast.FuncLit, cl call) {
	params := lit.Type.Params.List
	if len(params) == 0 || !isContext(typeOf(pass.TypesInfo, params[0].Type)) {
		return
	}
	offences := outerContexts(pass.TypesInfo, lit)
	if len(offences) == 0 {
		return
	}
	var param *types.Var // nil when the parameter is _ or unnamed
	if names := params[0].Names; len(names) > 0 && names[0].Name != "_" {
		param, _ = pass.TypesInfo.Defs[names[0]].(*types.Var)
	}
	first := offences[0]
	use := "its own context parameter"
	if param != nil {
		use = "its own context parameter " + param.Name()
	}
	d := analysis.Diagnostic{
		Pos: first.expr.Pos(), End: first.expr.End(),
		Message: fmt.Sprintf("loader passed to %s uses %s from the enclosing function instead of %s: the first caller to leave would cancel the load shared by every waiter",
			calleeName(cl), render(pass.Fset, first.expr), use),
	}
	if fix, ok := useParamFix(pass, lit, param, offences); ok {
		d.SuggestedFixes = []analysis.SuggestedFix{fix}
	}
	rep.report(d)
}

// useParamFix makes the offences use lit's context parameter, naming it when
// it is _ or unnamed. It gives up (ok false) when the name would change the
// meaning of another identifier.
func useParamFix(pass *analysis.Pass, lit *ast.FuncLit, param *types.Var, offences []offence) (analysis.SuggestedFix, bool) {
	info := pass.TypesInfo
	name := "ctx"
	if param != nil {
		name = param.Name()
	} else if id, ok := offences[0].expr.(*ast.Ident); ok {
		name = id.Name
	}
	isOffence := make(map[*types.Var]bool)
	for _, o := range offences {
		isOffence[o.obj] = true
	}
	inside := func(obj types.Object) bool { return obj.Pos() >= lit.Pos() && obj.Pos() < lit.End() }
	safe := true
	// Naming the parameter must not capture an outer identifier that is not
	// one of the offences.
	if param == nil {
		ast.Inspect(lit.Body, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && id.Name == name {
				if obj := info.Uses[id]; obj != nil && !inside(obj) {
					if v, ok := obj.(*types.Var); !ok || !isOffence[v] {
						safe = false
					}
				}
			}
			return safe
		})
	}
	var edits []analysis.TextEdit
	for _, o := range offences {
		if id, ok := o.expr.(*ast.Ident); ok && id.Name == name {
			continue // the parameter, once named, is what it refers to
		}
		// At the offence, name must refer to the parameter once named.
		if scope := pass.Pkg.Scope().Innermost(o.expr.Pos()); scope != nil {
			if _, obj := scope.LookupParent(name, o.expr.Pos()); obj != nil && obj != types.Object(param) && inside(obj) {
				safe = false
			}
		}
		edits = append(edits, analysis.TextEdit{Pos: o.expr.Pos(), End: o.expr.End(), NewText: []byte(name)})
	}
	if !safe {
		return analysis.SuggestedFix{}, false
	}
	msg := "Use the loader's context parameter " + name
	if param == nil {
		msg = "Name the loader's context parameter " + name + " and use it"
		fields := lit.Type.Params.List
		if names := fields[0].Names; len(names) > 0 {
			edits = append(edits, analysis.TextEdit{Pos: names[0].Pos(), End: names[0].End(), NewText: []byte(name)})
		} else {
			// Unnamed parameters: all or none must be named.
			for i, f := range fields {
				n := "_ "
				if i == 0 {
					n = name + " "
				}
				edits = append(edits, analysis.TextEdit{Pos: f.Type.Pos(), End: f.Type.Pos(), NewText: []byte(n)})
			}
		}
	}
	return analysis.SuggestedFix{Message: msg, TextEdits: edits}, true
}

// factoryFact computes the loaderFactory fact of fd: the indexes of the
// context parameters of fd that a returned loader literal uses.
func factoryFact(pass *analysis.Pass, fd *ast.FuncDecl, single map[*types.Var]ast.Expr) *loaderFactory {
	fn, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func)
	if !ok {
		return nil
	}
	sig := fn.Type().(*types.Signature)
	index := make(map[*types.Var]int)
	for i := range sig.Params().Len() {
		if p := sig.Params().At(i); isContext(p.Type()) {
			index[p] = i
		}
	}
	if len(index) == 0 {
		return nil
	}
	var used []int
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			return false // a nested function's returns are not fd's
		case *ast.ReturnStmt:
			for _, r := range n.Results {
				lit, _ := ast.Unparen(r).(*ast.FuncLit)
				if id, ok := ast.Unparen(r).(*ast.Ident); ok {
					if v, ok := pass.TypesInfo.Uses[id].(*types.Var); ok {
						lit = funcLitOf(single, v)
					}
				}
				if lit == nil || len(lit.Type.Params.List) == 0 || !isContext(typeOf(pass.TypesInfo, lit.Type.Params.List[0].Type)) {
					continue
				}
				for _, o := range outerContexts(pass.TypesInfo, lit) {
					if i, ok := index[o.obj]; ok && !slices.Contains(used, i) {
						used = append(used, i)
					}
				}
			}
		}
		return true
	})
	if len(used) == 0 {
		return nil
	}
	slices.Sort(used)
	return &loaderFactory{Params: used}
}

// checkFactoryCall reports the context arguments of a call to a loader
// factory that the returned loader uses instead of its own.
func checkFactoryCall(pass *analysis.Pass, rep *reporter, cl call) {
	if cl.fn == nil {
		return
	}
	var fact loaderFactory
	if !pass.ImportObjectFact(cl.fn.Origin(), &fact) {
		return
	}
	for _, i := range fact.Params {
		if i >= len(cl.args) {
			continue
		}
		arg := cl.args[i]
		rep.report(analysis.Diagnostic{
			Pos: arg.Pos(), End: arg.End(),
			Message: fmt.Sprintf("the loader returned by %s uses %s, passed here, instead of its own context parameter: the first caller to leave would cancel the load shared by every waiter",
				cl.fn.Name(), render(pass.Fset, arg)),
		})
	}
}

// render prints e as source, shortened.
func render(fset *token.FileSet, e ast.Expr) string {
	var b bytes.Buffer
	if err := format.Node(&b, fset, e); err != nil {
		return "?"
	}
	s := b.String()
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return s
}
