package archtest

import (
	"go/importer"
	"go/token"
	"go/types"
	"slices"
	"testing"
)

// singleflightAPI is package singleflight's exported API: other code depends
// on exactly this, so an addition needs as much thought as a removal. The
// engine behind it (internal/flightgroup) may grow; the façade may not
// without this list changing in the same commit. Types list their exported
// fields and the methods of their pointer's method set (the interface's own,
// for Observer).
var singleflightAPI = []string{
	"const EventAbandoned",
	"const EventInFlight",
	"const EventLateResult",
	"const EventLoaderFailed",
	"const EventLoaderPanicked",
	"const EventLoaderStarted",
	"const EventLoaderSucceeded",
	"const EventRejected",
	"const EventRequest",
	"const EventShared",
	"const EventTimeout",
	"const EventWaitDone",
	"func New",
	"func WithCancelWhenAbandoned",
	"func WithLoaderTimeout",
	"func WithMaxInFlight",
	"func WithMaxWaiters",
	"func WithObserver",
	"type Event",
	"type Event field Ctx",
	"type Event field Duration",
	"type Event field Err",
	"type Event field Flight",
	"type Event field InFlight",
	"type Event field InFlightDelta",
	"type Event field Kind",
	"type Event field Leader",
	"type Event field Shared",
	"type EventKind",
	"type EventKind method String",
	"type Group",
	"type Group method Close",
	"type Group method Do",
	"type Group method DoChan",
	"type Group method Forget",
	"type Group method InFlight",
	"type Observer",
	"type Observer method ObserveFlight",
	"type ObserverFunc",
	"type ObserverFunc method ObserveFlight",
	"type Option",
	"type PanicError",
	"type PanicError field Stack",
	"type PanicError field Value",
	"type PanicError method Error",
	"type PanicError method Unwrap",
	"type Result",
	"type Result field Err",
	"type Result field Shared",
	"type Result field Val",
	"var ErrAbandoned",
	"var ErrClosed",
	"var ErrNilFunc",
	"var ErrTooManyInFlight",
	"var ErrTooManyWaiters",
}

func TestSingleflightExportsExactlyItsDocumentedAPI(t *testing.T) {
	pkg, err := importer.ForCompiler(token.NewFileSet(), "source", nil).Import(module + "/singleflight")
	if err != nil {
		t.Fatalf("type-checking singleflight: %v", err)
	}
	got := exportedAPI(pkg)
	for _, s := range got {
		if !slices.Contains(singleflightAPI, s) {
			t.Errorf("singleflight exports %q, which is not in its fixed API", s)
		}
	}
	for _, s := range singleflightAPI {
		if !slices.Contains(got, s) {
			t.Errorf("singleflight no longer exports %q", s)
		}
	}
}

// exportedAPI lists pkg's exported identifiers in the form of
// singleflightAPI: every exported name, and for types their exported fields
// and methods. Aliases are followed, so a type declared elsewhere and
// aliased here contributes the fields and methods a user of pkg sees.
func exportedAPI(pkg *types.Package) []string {
	var api []string
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			api = append(api, "const "+name)
		case *types.Var:
			api = append(api, "var "+name)
		case *types.Func:
			api = append(api, "func "+name)
		case *types.TypeName:
			api = append(api, "type "+name)
			typ := types.Unalias(obj.Type())
			if st, ok := typ.Underlying().(*types.Struct); ok {
				for f := range st.Fields() {
					if f.Exported() {
						api = append(api, "type "+name+" field "+f.Name())
					}
				}
			}
			var mset *types.MethodSet
			if types.IsInterface(typ) {
				mset = types.NewMethodSet(typ)
			} else {
				mset = types.NewMethodSet(types.NewPointer(typ))
			}
			for sel := range mset.Methods() {
				if sel.Obj().Exported() {
					api = append(api, "type "+name+" method "+sel.Obj().Name())
				}
			}
		}
	}
	return api
}
