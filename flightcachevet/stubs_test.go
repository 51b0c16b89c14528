package flightcachevet_test

import (
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/tools/go/packages"
)

// The analyzer tests run on stubs of the module's packages under
// testdata/src (GOPATH layout). TestStubsMatchRealPackages fails when a stub
// drifts from the package it stands for: every exported declaration of a
// stub must exist in the real package with the same type (functions,
// methods, struct fields and type parameters compared as printed by
// go/types, package paths included).
func TestStubsMatchRealPackages(t *testing.T) {
	paths := []string{
		"github.com/flightcache/flightcache",
		"github.com/flightcache/flightcache/singleflight",
		"github.com/flightcache/flightcache/internal/flightgroup",
		"github.com/flightcache/flightcache/key",
	}
	testdata, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	mode := packages.NeedName | packages.NeedTypes
	real := load(t, &packages.Config{Mode: mode, Dir: ".."}, paths)
	stub := load(t, &packages.Config{
		Mode: mode,
		Dir:  filepath.Join(testdata, "src"),
		Env:  append(os.Environ(), "GOPATH="+testdata, "GO111MODULE=off", "GOWORK=off", "GOFLAGS="),
	}, paths)
	for _, path := range paths {
		compareScopes(t, path, stub[path], real[path])
	}
}

func load(t *testing.T, cfg *packages.Config, paths []string) map[string]*types.Package {
	t.Helper()
	pkgs, err := packages.Load(cfg, paths...)
	if err != nil {
		t.Fatalf("loading %v: %v", paths, err)
	}
	out := make(map[string]*types.Package)
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			t.Fatalf("loading %s: %v", p.PkgPath, p.Errors)
		}
		out[p.PkgPath] = p.Types
	}
	return out
}

func compareScopes(t *testing.T, path string, stub, real *types.Package) {
	if stub == nil || real == nil {
		t.Errorf("%s: not loaded (stub %v, real %v)", path, stub != nil, real != nil)
		return
	}
	str := func(x types.Type) string { return types.TypeString(x, nil) }
	for _, name := range stub.Scope().Names() {
		if !token.IsExported(name) {
			continue
		}
		s, r := stub.Scope().Lookup(name), real.Scope().Lookup(name)
		where := path + "." + name
		if r == nil {
			t.Errorf("%s: in the stub, not in the real package", where)
			continue
		}
		switch s := s.(type) {
		case *types.Func, *types.Var, *types.Const:
			if str(s.Type()) != str(r.Type()) {
				t.Errorf("%s:\n stub %s\n real %s", where, str(s.Type()), str(r.Type()))
			}
		case *types.TypeName:
			rt, ok := r.(*types.TypeName)
			if !ok {
				t.Errorf("%s: a type in the stub, a %T in the real package", where, r)
				continue
			}
			compareTypes(t, where, s.Type(), rt.Type())
		}
	}
}

func compareTypes(t *testing.T, where string, stub, real types.Type) {
	str := func(x types.Type) string { return types.TypeString(x, nil) }
	if tp, rp := typeParams(stub), typeParams(real); tp != rp {
		t.Errorf("%s: type parameters: stub %s, real %s", where, tp, rp)
	}
	// Fields of a struct: the stub's exported ones must be the real ones.
	if ss, ok := types.Unalias(stub).Underlying().(*types.Struct); ok {
		rs, ok := types.Unalias(real).Underlying().(*types.Struct)
		if !ok {
			t.Errorf("%s: a struct in the stub, %s in the real package", where, str(real.Underlying()))
			return
		}
		for i := range ss.NumFields() {
			f := ss.Field(i)
			if !f.Exported() {
				continue
			}
			found := false
			for j := range rs.NumFields() {
				if g := rs.Field(j); g.Name() == f.Name() {
					found = true
					if str(f.Type()) != str(g.Type()) || f.Embedded() != g.Embedded() {
						t.Errorf("%s.%s:\n stub %s\n real %s", where, f.Name(), str(f.Type()), str(g.Type()))
					}
				}
			}
			if !found {
				t.Errorf("%s.%s: in the stub, not in the real package", where, f.Name())
			}
		}
	}
	// Methods, on the pointer so that both receiver kinds are seen.
	sm, rm := types.NewMethodSet(types.NewPointer(stub)), types.NewMethodSet(types.NewPointer(real))
	for i := range sm.Len() {
		m := sm.At(i).Obj()
		if !m.Exported() {
			continue
		}
		r := rm.Lookup(nil, m.Name()) // exported: the package does not matter
		if r == nil {
			t.Errorf("%s.%s: a method in the stub, not in the real package", where, m.Name())
			continue
		}
		if str(m.Type()) != str(r.Obj().Type()) {
			t.Errorf("%s.%s:\n stub %s\n real %s", where, m.Name(), str(m.Type()), str(r.Obj().Type()))
		}
	}
}

func typeParams(t types.Type) string {
	var tps *types.TypeParamList
	switch t := t.(type) {
	case *types.Named:
		tps = t.TypeParams()
	case *types.Alias:
		tps = t.TypeParams()
	}
	s := ""
	for i := range tps.Len() {
		p := tps.At(i)
		s += p.Obj().Name() + " " + types.TypeString(p.Constraint(), nil) + ";"
	}
	return s
}
