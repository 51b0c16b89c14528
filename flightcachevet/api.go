package flightcachevet

import (
	"go/ast"
	"go/token"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

// The packages whose API the analyzers know. singleflight is a façade over
// internal/flightgroup (some of its types are aliases of the engine's), so a
// method is recognised by the package that declares it, whichever of the two
// that is.
const (
	modulePath      = "github.com/flightcache/flightcache"
	singleflightPkg = modulePath + "/singleflight"
	flightgroupPkg  = modulePath + "/internal/flightgroup"
)

// apiFunc names a function or method of the flightcache module: the path of
// the package that declares it, the name of its receiver's type ("" for a
// function) and its own name.
type apiFunc struct {
	pkg, recv, name string
}

// identify returns the apiFunc of fn, looking through instantiations
// (Cache[*Product].Get is Cache[V].Get) and aliases of the receiver type.
func identify(fn *types.Func) apiFunc {
	if fn == nil || fn.Pkg() == nil {
		return apiFunc{}
	}
	fn = fn.Origin()
	id := apiFunc{pkg: fn.Pkg().Path(), name: fn.Name()}
	if recv := fn.Type().(*types.Signature).Recv(); recv != nil {
		if n := namedOf(recv.Type()); n != nil {
			id.recv = n.Origin().Obj().Name()
		}
	}
	return id
}

// namedOf returns the named type of t or of what t points to, through
// aliases; nil if there is none.
func namedOf(t types.Type) *types.Named {
	t = types.Unalias(t)
	if p, ok := t.(*types.Pointer); ok {
		t = types.Unalias(p.Elem())
	}
	n, _ := t.(*types.Named)
	return n
}

// isCacheMethod reports whether id is the method name of flightcache.Cache.
func (id apiFunc) isCacheMethod(names ...string) bool {
	return id.pkg == modulePath && id.recv == "Cache" && in(id.name, names)
}

// isGroupMethod reports whether id is the method name of singleflight.Group
// (or of the engine's Group behind it).
func (id apiFunc) isGroupMethod(names ...string) bool {
	return (id.pkg == singleflightPkg || id.pkg == flightgroupPkg) && id.recv == "Group" && in(id.name, names)
}

// isConstructor reports whether id is flightcache.New or singleflight.New
// (or the engine's New).
func (id apiFunc) isConstructor() bool {
	return id.recv == "" && id.name == "New" &&
		(id.pkg == modulePath || id.pkg == singleflightPkg || id.pkg == flightgroupPkg)
}

func in(s string, set []string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

// isNamedFrom reports whether t (through aliases and instantiation) is the
// named type pkg.name.
func isNamedFrom(t types.Type, pkg, name string) bool {
	n, ok := types.Unalias(t).(*types.Named)
	if !ok {
		return false
	}
	obj := n.Origin().Obj()
	return obj.Pkg() != nil && obj.Pkg().Path() == pkg && obj.Name() == name
}

// call is a call expression resolved to what it calls: fn is the static
// callee when known (nil for a call through an interface or an unknown func
// value), and args are the arguments matched to fn's parameters (for a method
// expression, T.M(recv, a, b), the receiver is dropped). recv is the receiver
// expression of a method call or method value, when there is one.
type call struct {
	expr *ast.CallExpr
	fn   *types.Func
	id   apiFunc
	args []ast.Expr
	recv ast.Expr
}

// resolver resolves calls, including calls through local variables that
// hold a method value (do := g.Do; do(ctx, k, fn)).
type resolver struct {
	info *types.Info
	// methodValues maps a variable to the method value it holds, when every
	// assignment to it in the package is the same method value's.
	methodValues map[*types.Var]*ast.SelectorExpr
}

func newResolver(pass *analysis.Pass) *resolver {
	r := &resolver{info: pass.TypesInfo, methodValues: make(map[*types.Var]*ast.SelectorExpr)}
	bad := make(map[*types.Var]bool)
	for _, f := range pass.Files {
		eachAssignment(pass.TypesInfo, f, func(v *types.Var, rhs ast.Expr) {
			if bad[v] {
				return
			}
			sel, ok := ast.Unparen(orBad(rhs)).(*ast.SelectorExpr)
			if ok {
				if s := pass.TypesInfo.Selections[sel]; s == nil || s.Kind() != types.MethodVal {
					ok = false
				}
			}
			prev, seen := r.methodValues[v]
			if !ok || (seen && !sameMethod(pass.TypesInfo, prev, sel)) {
				bad[v] = true
				delete(r.methodValues, v)
				return
			}
			r.methodValues[v] = sel
		})
	}
	return r
}

// orBad returns e, or a BadExpr for nil (an assignment of an unknown value),
// so that type switches need no nil check.
func orBad(e ast.Expr) ast.Expr {
	if e == nil {
		return &ast.BadExpr{}
	}
	return e
}

func sameMethod(info *types.Info, a, b *ast.SelectorExpr) bool {
	sa, sb := info.Selections[a], info.Selections[b]
	return sa != nil && sb != nil && sa.Obj().(*types.Func).Origin() == sb.Obj().(*types.Func).Origin()
}

// resolve resolves ce.
func (r *resolver) resolve(ce *ast.CallExpr) call {
	c := call{expr: ce, args: ce.Args}
	fun := ast.Unparen(ce.Fun)
	switch f := fun.(type) {
	case *ast.IndexExpr:
		fun = ast.Unparen(f.X)
	case *ast.IndexListExpr:
		fun = ast.Unparen(f.X)
	}
	if id, ok := fun.(*ast.Ident); ok {
		if v, ok := r.info.Uses[id].(*types.Var); ok {
			if sel := r.methodValues[v]; sel != nil {
				c.fn = r.info.Selections[sel].Obj().(*types.Func)
				c.recv = sel.X
				c.id = identify(c.fn)
				return c
			}
		}
	}
	c.fn = typeutil.StaticCallee(r.info, ce)
	if c.fn == nil {
		// A call through an interface: still a method, whose receiver
		// type is the interface.
		if fn, ok := typeutil.Callee(r.info, ce).(*types.Func); ok {
			c.fn = fn
		}
	}
	if sel, ok := fun.(*ast.SelectorExpr); ok {
		if s := r.info.Selections[sel]; s != nil {
			switch s.Kind() {
			case types.MethodVal:
				c.recv = sel.X
			case types.MethodExpr:
				if len(c.args) > 0 {
					c.recv = c.args[0]
					c.args = c.args[1:]
				}
			}
		}
	}
	c.id = identify(c.fn)
	return c
}

// paramType returns the type of the parameter that the i-th argument of a
// call of signature sig is passed to (nil if there is none). ellipsis says
// whether the call spreads a slice (f(a, xs...)).
func paramType(sig *types.Signature, i int, ellipsis bool) types.Type {
	params := sig.Params()
	n := params.Len()
	switch {
	case n == 0:
		return nil
	case sig.Variadic() && i >= n-1:
		t := params.At(n - 1).Type()
		if s, ok := t.Underlying().(*types.Slice); ok && !ellipsis {
			return s.Elem()
		}
		return t
	case i < n:
		return params.At(i).Type()
	}
	return nil
}

// eachAssignment calls fn for every value assigned to a variable declared
// in the package: v := x, v = x, var v = x, v, err := f() (rhs f(), whose
// first result v is), and, with rhs nil, every other way of changing v (the
// other results of a tuple assignment, v += x, v++, &v, a range variable). Struct fields assigned through x.f = y are reported too, with
// v the field.
func eachAssignment(info *types.Info, f *ast.File, fn func(v *types.Var, rhs ast.Expr)) {
	lhsVar := func(e ast.Expr) *types.Var {
		switch e := ast.Unparen(e).(type) {
		case *ast.Ident:
			if v, ok := info.Defs[e].(*types.Var); ok {
				return v
			}
			v, _ := info.Uses[e].(*types.Var)
			return v
		case *ast.SelectorExpr:
			if s := info.Selections[e]; s != nil && s.Kind() == types.FieldVal {
				return s.Obj().(*types.Var)
			}
			v, _ := info.Uses[e.Sel].(*types.Var) // a qualified package variable
			return v
		}
		return nil
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for i, l := range n.Lhs {
				v := lhsVar(l)
				if v == nil {
					continue
				}
				switch {
				case n.Tok != token.ASSIGN && n.Tok != token.DEFINE:
					fn(v, nil) // x += y
				case len(n.Lhs) == len(n.Rhs):
					fn(v, n.Rhs[i])
				case i == 0:
					fn(v, n.Rhs[0]) // v, err := f(): v is f's first result
				default:
					fn(v, nil)
				}
			}
		case *ast.ValueSpec:
			for i, name := range n.Names {
				v, _ := info.Defs[name].(*types.Var)
				if v == nil {
					continue
				}
				switch {
				case len(n.Values) == len(n.Names):
					fn(v, n.Values[i])
				case len(n.Values) == 0:
					// The zero value: not an assignment of anything.
				case i == 0:
					fn(v, n.Values[0]) // var v, err = f()
				default:
					fn(v, nil)
				}
			}
		case *ast.IncDecStmt:
			if v := lhsVar(n.X); v != nil {
				fn(v, nil)
			}
		case *ast.UnaryExpr:
			if n.Op == token.AND {
				if v := lhsVar(n.X); v != nil {
					fn(v, nil)
				}
			}
		case *ast.RangeStmt:
			for _, e := range []ast.Expr{n.Key, n.Value} {
				if e != nil {
					if v := lhsVar(e); v != nil {
						fn(v, nil)
					}
				}
			}
		case *ast.CompositeLit:
			// T{f: x} assigns x to the field f.
			st, ok := typeOf(info, n).Underlying().(*types.Struct)
			if !ok {
				return true
			}
			for i, el := range n.Elts {
				if kv, ok := el.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok {
						if v, ok := info.Uses[k].(*types.Var); ok && v.IsField() {
							fn(v, kv.Value)
						}
					}
				} else if i < st.NumFields() {
					fn(st.Field(i), el)
				}
			}
		}
		return true
	})
}

// typeOf returns the type of e, or an invalid type when unknown.
func typeOf(info *types.Info, e ast.Expr) types.Type {
	if t := info.TypeOf(e); t != nil {
		return t
	}
	return types.Typ[types.Invalid]
}
