package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The root package is for people who use a Cache; its API must fit on one
// screen (docs/ARCHITECTURE.md, "The API, on one screen"). These are the
// goals, not the current figures: the test fails when a change grows the API
// past one of them.
const (
	maxDocShortLines   = 35      // lines of `go doc -short .`
	maxRootExported    = 140     // exported identifiers of the root package
	maxCacheFields     = 30      // fields of Cache
	maxColdGetFuncs    = 30      // functions one cold single-key Get enters
	rootDir            = "../.." // the root package, from this directory
	cacheTypeName      = "Cache"
	exportedIdentsHelp = "types, functions, methods, constants, variables, struct fields and interface methods"
)

func TestAPIFitsOnOneScreen(t *testing.T) {
	idents, cacheFields := rootAPI(t)
	if len(idents) > maxRootExported {
		t.Errorf("the root package exports %d identifiers (%s), want at most %d; contracts for implementers belong in package driver:\n%s",
			len(idents), exportedIdentsHelp, maxRootExported, strings.Join(idents, "\n"))
	}
	if cacheFields > maxCacheFields {
		t.Errorf("Cache has %d fields, want at most %d: keep configuration in its Options", cacheFields, maxCacheFields)
	}
	out, err := exec.Command("go", "doc", "-short", module).CombinedOutput()
	if err != nil {
		t.Fatalf("go doc -short %s: %v\n%s", module, err, out)
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > maxDocShortLines {
		t.Errorf("go doc -short prints %d lines, want at most %d:\n%s", len(lines), maxDocShortLines, out)
	}
	t.Logf("root package: %d exported identifiers, Cache %d fields, go doc -short %d lines", len(idents), cacheFields, len(lines))
}

// rootAPI lists the root package's exported identifiers, counted the way
// docs/ARCHITECTURE.md counts them, and the number of fields of Cache.
func rootAPI(t *testing.T) (idents []string, cacheFields int) {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(rootDir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name.Name != "flightcache" {
			t.Fatalf("%s: package %s, want flightcache", name, f.Name.Name)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					idents = append(idents, "func "+d.Name.Name)
				} else if recv := receiverName(d.Recv.List[0].Type); ast.IsExported(recv) {
					idents = append(idents, "method "+recv+"."+d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if s.Name.Name == cacheTypeName {
							if st, ok := s.Type.(*ast.StructType); ok {
								for _, fl := range st.Fields.List {
									cacheFields += max(len(fl.Names), 1)
								}
							}
						}
						if !s.Name.IsExported() {
							continue
						}
						idents = append(idents, "type "+s.Name.Name)
						idents = append(idents, members(s)...)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								idents = append(idents, d.Tok.String()+" "+n.Name)
							}
						}
					}
				}
			}
		}
	}
	return idents, cacheFields
}

// members lists a type's exported struct fields (embedded ones included)
// and interface methods.
func members(s *ast.TypeSpec) []string {
	var out []string
	switch t := s.Type.(type) {
	case *ast.StructType:
		for _, fl := range t.Fields.List {
			if len(fl.Names) == 0 {
				if name := receiverName(fl.Type); ast.IsExported(name) {
					out = append(out, "field "+s.Name.Name+"."+name)
				}
			}
			for _, n := range fl.Names {
				if n.IsExported() {
					out = append(out, "field "+s.Name.Name+"."+n.Name)
				}
			}
		}
	case *ast.InterfaceType:
		for _, m := range t.Methods.List {
			for _, n := range m.Names {
				if n.IsExported() {
					out = append(out, "method "+s.Name.Name+"."+n.Name)
				}
			}
		}
	}
	return out
}

// receiverName is the name of the type in a receiver or embedded field:
// T, *T, T[P], pkg.T.
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.SelectorExpr:
			return x.Sel.Name
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// TestColdGetIsShallow keeps the depth of the read path a reader has to
// follow: one cold single-key Get (bench/coldget: memstore, default
// Options) enters at most maxColdGetFuncs functions of the repository's
// packages. coldget is built with coverage, clears the counters after a
// warm-up and writes them after its one cold Get; `go tool covdata func`
// then lists the functions whose counters moved (a function literal counts
// toward the function it is written in). make api-report prints the list.
func TestColdGetIsShallow(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "coldget")
	build := exec.Command("go", "build", "-cover", "-covermode=atomic", "-coverpkg="+module+"/...", "-o", bin, "./bench/coldget")
	build.Dir = rootDir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build coldget: %v\n%s", err, out)
	}
	counters := filepath.Join(dir, "counters")
	if err := os.Mkdir(counters, 0o755); err != nil {
		t.Fatal(err)
	}
	run := exec.Command(bin)
	run.Env = append(os.Environ(), "COLDGET_COUNTERS="+counters)
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("coldget: %v\n%s", err, out)
	}
	out, err := exec.Command("go", "tool", "covdata", "func", "-i="+counters).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool covdata func: %v\n%s", err, out)
	}
	var entered []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] == "total" || f[len(f)-1] == "0.0%" || strings.Contains(f[0], "coldget/main.go") {
			continue
		}
		entered = append(entered, f[0]+" "+f[1])
	}
	if len(entered) == 0 {
		t.Fatalf("go tool covdata func listed no function a cold Get entered:\n%s", out)
	}
	if len(entered) > maxColdGetFuncs {
		t.Errorf("a cold Get enters %d functions, want at most %d (docs/ARCHITECTURE.md, \"How deep a cold Get goes\"):\n%s",
			len(entered), maxColdGetFuncs, strings.Join(entered, "\n"))
	}
	t.Logf("a cold Get enters %d functions", len(entered))
}
