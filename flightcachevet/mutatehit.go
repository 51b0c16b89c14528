package flightcachevet

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
)

// MutateHit reports writes through a value that a Cache shares.
var MutateHit = &analysis.Analyzer{
	Name: "mutatehit",
	Doc: `report writes through a value that the Cache shares with every caller

Without Options.Clone, the value that Cache.Get or Fetch returns is the
very value handed to every other caller of the same load and kept in the
local tier. When V is a pointer, a map or a slice, writing through it
changes what every other caller sees, now and until the entry expires, and
races with them.

Whether Clone is set is a property of the Cache, not of the call, so the
check reports only what it can prove, and says nothing otherwise:

  - the Cache is held in a local variable, an unexported package variable
    or an unexported field (or any variable or field of a main package),
    and every assignment to it in the package is the result of
    flightcache.New with an Options composite literal that leaves Clone
    unset (directly, or through variables and fields that are themselves
    such); a Cache received as a parameter, built from options assembled
    elsewhere, or assigned from outside the package is never reported;
  - the value is a variable assigned once, from Get, or from the Value
    field of a Result that Fetch returned and that is itself assigned once;
  - the write is an assignment (=, op=, ++, --) to a field, element or
    pointee reached through that variable, or delete or clear on it.

A write through a method with a pointer receiver, through a copy of the
pointer made any other way, or through GetMany and FetchMany results is
not followed.`,
	URL:      "https://pkg.go.dev/github.com/flightcache/flightcache/flightcachevet#MutateHit",
	Requires: []*analysis.Analyzer{inspect.Analyzer},
	Run:      runMutateHit,
}

func runMutateHit(pass *analysis.Pass) (any, error) {
	ins := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	rep := newReporter(pass)
	res := newResolver(pass)
	info := pass.TypesInfo
	single := singleAssignments(pass)

	// Every value assigned to each variable or field (nil: unknown), and
	// the variables whose Clone field some statement sets (opts.Clone = f).
	assigned := make(map[*types.Var][]ast.Expr)
	cloneSet := make(map[*types.Var]bool)
	for _, f := range pass.Files {
		eachAssignment(info, f, func(v *types.Var, rhs ast.Expr) {
			v = v.Origin()
			assigned[v] = append(assigned[v], rhs)
		})
		markClone := func(e ast.Expr) {
			if sel, ok := ast.Unparen(e).(*ast.SelectorExpr); ok && sel.Sel.Name == "Clone" {
				if id, ok := ast.Unparen(sel.X).(*ast.Ident); ok {
					if v, ok := info.Uses[id].(*types.Var); ok {
						cloneSet[v] = true
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				for _, l := range n.Lhs {
					markClone(l)
				}
			case *ast.UnaryExpr:
				if n.Op == token.AND {
					markClone(n.X) // &opts.Clone
				}
			}
			return true
		})
	}

	// holderOf returns the variable or field that e reads, or nil.
	holderOf := func(e ast.Expr) *types.Var {
		switch e := ast.Unparen(e).(type) {
		case *ast.Ident:
			v, _ := info.Uses[e].(*types.Var)
			return v
		case *ast.SelectorExpr:
			if s := info.Selections[e]; s != nil {
				if s.Kind() == types.FieldVal {
					return s.Obj().(*types.Var).Origin()
				}
				return nil
			}
			v, _ := info.Uses[e.Sel].(*types.Var)
			return v
		}
		return nil
	}
	private := func(v *types.Var) bool {
		return v.Pkg() == pass.Pkg && (isLocal(v) || !v.Exported() || pass.Pkg.Name() == "main")
	}

	// cloneless reports whether the Cache that e evaluates to is known to
	// have been built without Clone.
	memo := make(map[*types.Var]bool)
	var cloneless func(e ast.Expr) bool
	holderCloneless := func(v *types.Var) bool {
		if r, ok := memo[v]; ok {
			return r
		}
		memo[v] = false // a cycle proves nothing
		rhs := assigned[v]
		r := len(rhs) > 0 && private(v)
		for _, x := range rhs {
			r = r && x != nil && cloneless(x)
		}
		memo[v] = r
		return r
	}
	cloneless = func(e ast.Expr) bool {
		e = ast.Unparen(e)
		if ce, ok := e.(*ast.CallExpr); ok {
			cl := res.resolve(ce)
			return cl.id.isConstructor() && cl.id.pkg == modulePath && len(cl.args) == 1 && optionsWithoutClone(info, single, cl.args[0], cloneSet)
		}
		if v := holderOf(e); v != nil {
			return holderCloneless(v)
		}
		return false
	}

	// The variables that hold a shared value (Get's result, or a Fetch
	// Result's Value), and those that hold a Fetch Result.
	values := make(map[*types.Var]string)  // the method that returned it
	results := make(map[*types.Var]string) // idem
	for v, rhs := range single {
		ce, ok := ast.Unparen(rhs).(*ast.CallExpr)
		if !ok {
			continue
		}
		cl := res.resolve(ce)
		if !cl.id.isCacheMethod("Get", "Fetch", "Refresh", "Peek") || cl.recv == nil || !cloneless(cl.recv) {
			continue
		}
		if cl.id.name != "Fetch" && sharesMemory(v.Type()) {
			values[v] = cl.id.name
		}
		if cl.id.name == "Fetch" {
			results[v] = "Fetch"
		}
	}
	for v, rhs := range single {
		if sel, ok := ast.Unparen(rhs).(*ast.SelectorExpr); ok && sel.Sel.Name == "Value" && sharesMemory(v.Type()) {
			if id, ok := ast.Unparen(sel.X).(*ast.Ident); ok {
				if r, ok := info.Uses[id].(*types.Var); ok && results[r] != "" {
					values[v] = results[r]
				}
			}
		}
	}
	if len(values) == 0 && len(results) == 0 {
		return nil, nil
	}

	// check reports target when writing to it writes through a shared
	// value; through says that the write is to what target refers to
	// (delete(m, k)) rather than to target itself.
	check := func(target ast.Expr, through bool) {
		path := accessPath(target)
		root, ok := path[len(path)-1].(*ast.Ident)
		if !ok {
			return
		}
		v, _ := info.Uses[root].(*types.Var)
		if v == nil {
			return
		}
		steps := len(path) - 1 // each one a dereference of a shared value
		if through {
			steps++
		}
		method := ""
		switch {
		case values[v] != "" && steps >= 1:
			method = values[v]
		case results[v] != "" && steps >= 2:
			if sel, ok := path[len(path)-2].(*ast.SelectorExpr); ok && sel.Sel.Name == "Value" && sharesMemory(typeOf(info, sel)) {
				method = results[v]
			}
		}
		if method == "" {
			return
		}
		rep.report(analysis.Diagnostic{
			Pos: target.Pos(), End: target.End(),
			Message: fmt.Sprintf("write through the value %s returned: without Options.Clone the Cache hands this same value to every caller of the key and may keep it in its local tier; copy it before changing it, or set Options.Clone", method),
		})
	}
	for c := range ins.Root().Preorder((*ast.AssignStmt)(nil), (*ast.IncDecStmt)(nil), (*ast.CallExpr)(nil)) {
		switch n := c.Node().(type) {
		case *ast.AssignStmt:
			if n.Tok.String() != ":=" {
				for _, l := range n.Lhs {
					check(l, false)
				}
			}
		case *ast.IncDecStmt:
			check(n.X, false)
		case *ast.CallExpr:
			if id, ok := ast.Unparen(n.Fun).(*ast.Ident); ok && len(n.Args) > 0 {
				if b, ok := info.Uses[id].(*types.Builtin); ok && (b.Name() == "delete" || b.Name() == "clear") {
					check(n.Args[0], true)
				}
			}
		}
	}
	return nil, nil
}

// accessPath returns the chain of selector, index and star expressions from
// e down to its root, e first. Below a shared value (a pointer, a map or a
// slice), every step is a dereference: a write to the path writes to memory
// that every holder of the value sees.
func accessPath(e ast.Expr) []ast.Expr {
	var path []ast.Expr
	for {
		path = append(path, e)
		switch x := e.(type) {
		case *ast.ParenExpr:
			path = path[:len(path)-1]
			e = x.X
		case *ast.SelectorExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		default:
			return path
		}
	}
}

// sharesMemory reports whether a value of type t refers to memory that
// copies of it share: a pointer, a map or a slice.
func sharesMemory(t types.Type) bool {
	switch t.Underlying().(type) {
	case *types.Pointer, *types.Map, *types.Slice:
		return true
	}
	return false
}

// optionsWithoutClone reports whether e, the argument of flightcache.New,
// is an Options composite literal that leaves Clone unset (or nil), or a
// local variable assigned once from one, whose Clone no statement sets
// (v.Clone = f) and whose address is never taken.
func optionsWithoutClone(info *types.Info, single map[*types.Var]ast.Expr, e ast.Expr, cloneSet map[*types.Var]bool) bool {
	e = ast.Unparen(e)
	if id, ok := e.(*ast.Ident); ok {
		v, ok := info.Uses[id].(*types.Var)
		if !ok || single[v] == nil || cloneSet[v] {
			return false
		}
		e = ast.Unparen(single[v])
	}
	lit, ok := e.(*ast.CompositeLit)
	if !ok || !isNamedFrom(typeOf(info, lit), modulePath, "Options") {
		return false
	}
	for _, el := range lit.Elts {
		kv, ok := el.(*ast.KeyValueExpr)
		if !ok {
			return false // positional: every field is set
		}
		if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Clone" {
			if tv, ok := info.Types[kv.Value]; !ok || !tv.IsNil() {
				return false
			}
		}
	}
	return true
}
