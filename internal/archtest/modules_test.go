package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The repository is a set of modules (docs/ARCHITECTURE.md, "Layout"): the
// core at the root, which requires no module at all, and one module per
// adapter with heavy dependencies, plus the programs (cmd), the dashboard
// (deploy), the analyzers (flightcachevet) and the benchmarks against the
// peers (bench). These tests keep the promise a user relies on: importing
// the core brings no other module, importing an adapter brings what its
// packages build and nothing else, and every go.mod says exactly what its
// packages import.

// repoRoot is the repository's root, from this directory.
const repoRoot = "../.."

// releaseVersion is the version every module requires its siblings at:
// the core's line "module . vX.Y.Z" of versions.txt, the version of the
// modules' next (or last) release (make release-prepare sets both); the
// replace directives point the siblings at the checkout.
func releaseVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "versions.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "module" && f[1] == "." {
			return f[2]
		}
	}
	t.Fatal(`versions.txt has no line "module . vX.Y.Z"`)
	return ""
}

// goOutside runs the go command in dir as a user outside this repository's
// workspace would: GOWORK=off, and -mod=mod so that a scratch module's
// go.mod may be completed. It returns stdout and fails the test on error.
func goOutside(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go %s (in %s): %v\n%s%s", strings.Join(args, " "), dir, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.String()
}

// moduleDirs returns the directories, relative to the root, that hold a
// go.mod, the root first.
func moduleDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" {
			rel, err := filepath.Rel(repoRoot, filepath.Dir(path))
			if err != nil {
				return err
			}
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs) // "." sorts first
	return dirs
}

// modFile is the part of go mod edit -json's output these tests read.
type modFile struct {
	Module  struct{ Path string }
	Go      string
	Require []struct {
		Path     string
		Version  string
		Indirect bool
	}
	Replace []struct {
		Old struct{ Path string }
		New struct{ Path string }
	}
}

func readModFile(t *testing.T, dir string) modFile {
	t.Helper()
	var mf modFile
	if err := json.Unmarshal([]byte(goOutside(t, dir, "mod", "edit", "-json")), &mf); err != nil {
		t.Fatalf("go mod edit -json in %s: %v", dir, err)
	}
	return mf
}

func isOurs(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }

// The workspace holds every module of the repository, so that make test,
// which tests the workspace, tests them all.
func TestWorkspaceUsesEveryModule(t *testing.T) {
	var work struct{ Use []struct{ DiskPath string } }
	cmd := exec.Command("go", "work", "edit", "-json")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go work edit -json: %v", err)
	}
	if err := json.Unmarshal(out, &work); err != nil {
		t.Fatal(err)
	}
	var used []string
	for _, u := range work.Use {
		used = append(used, filepath.ToSlash(filepath.Clean(u.DiskPath)))
	}
	slices.Sort(used)
	if dirs := moduleDirs(t); !slices.Equal(used, dirs) {
		t.Fatalf("go.work uses %v; the modules are %v", used, dirs)
	}
}

// The core module requires nothing: no third-party module, and none of the
// adapters, not even for its tests (Go has no test-only requirements: a
// module a test imports is in the go.mod, and so in every importer's module
// graph). Every package the core's packages and tests import, outside the
// standard library, is the core's own.
func TestCoreModuleRequiresNoModule(t *testing.T) {
	mf := readModFile(t, repoRoot)
	if mf.Module.Path != module || len(mf.Require) != 0 || len(mf.Replace) != 0 {
		t.Fatalf("the core's go.mod (module %s) has requirements %v and replacements %v; it must have none", mf.Module.Path, mf.Require, mf.Replace)
	}
	// The module first: a test variant's import path has a space in it.
	out := goOutside(t, repoRoot, "list", "-deps", "-test", "-f", "{{if not .Standard}}{{with .Module}}{{.Path}}{{end}} {{.ImportPath}}{{end}}", "./...")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		mod, pkg, _ := strings.Cut(line, " ")
		if mod != module {
			t.Errorf("the core module's packages or tests use %s, of module %q", pkg, mod)
		}
	}
}

// Every go.mod requires only what its module's packages and tests import:
// go mod tidy, outside the workspace, leaves each unchanged. A non-root
// module requires its siblings at versions.txt's version and replaces every
// sibling in its graph with the checkout, so that it builds outside the
// workspace too (make test builds and vets each so).
func TestEveryModuleIsTidy(t *testing.T) {
	version := releaseVersion(t)
	for _, dir := range moduleDirs(t) {
		t.Run(dir, func(t *testing.T) {
			abs := filepath.Join(repoRoot, dir)
			cmd := exec.Command("go", "mod", "tidy", "-diff")
			cmd.Dir = abs
			cmd.Env = append(os.Environ(), "GOWORK=off")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go mod tidy -diff in %s: %v; run go mod tidy there (GOWORK=off):\n%s", dir, err, out)
			}
			mf := readModFile(t, abs)
			replaced := map[string]bool{}
			for _, r := range mf.Replace {
				replaced[r.Old.Path] = true
			}
			for _, r := range mf.Require {
				if isOurs(r.Path) && r.Version != version {
					t.Errorf("%s requires %s@%s, want %s as versions.txt says (make release-prepare; see the versioning note in docs/ARCHITECTURE.md)", dir, r.Path, r.Version, version)
				}
				if isOurs(r.Path) && !replaced[r.Path] {
					t.Errorf("%s requires %s without a replace directive to the checkout", dir, r.Path)
				}
			}
		})
	}
}

// scratch is a user's module outside the repository that imports pkgs of
// the flightcache modules mods (module paths), with replace directives to
// this checkout. It returns the module's directory after go mod tidy.
func scratch(t *testing.T, mods []string, pkgs []string) string {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	version := releaseVersion(t)
	var gomod, gosum strings.Builder
	gomod.WriteString("module example.com/scratch\n\ngo 1.26.0\n\nrequire (\n")
	for _, m := range mods {
		gomod.WriteString("\t" + m + " " + version + "\n")
	}
	gomod.WriteString(")\n\nreplace (\n")
	seen := map[string]bool{}
	for _, m := range mods {
		modDir := filepath.Join(root, strings.TrimPrefix(strings.TrimPrefix(m, module), "/"))
		gomod.WriteString("\t" + m + " => " + modDir + "\n")
		// The checksums the module's own go.sum vouches for, so that the
		// scratch module needs no checksum database.
		sum, err := os.ReadFile(filepath.Join(modDir, "go.sum"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, line := range strings.SplitAfter(string(sum), "\n") {
			if line != "" && !seen[line] {
				seen[line] = true
				gosum.WriteString(line)
			}
		}
	}
	gomod.WriteString(")\n")
	var src strings.Builder
	src.WriteString("// Command scratch imports what a user of flightcache imports.\npackage main\n\nimport (\n")
	for _, p := range pkgs {
		src.WriteString("\t_ \"" + p + "\"\n")
	}
	src.WriteString(")\n\nfunc main() {}\n")
	for name, text := range map[string]string{"go.mod": gomod.String(), "go.sum": gosum.String(), "main.go": src.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	goOutside(t, dir, "mod", "tidy")
	goOutside(t, dir, "build", "-o", os.DevNull, ".")
	return dir
}

// listAll returns the module paths go list -m all prints in dir, logging the
// output (and go.mod and go mod graph) for the reader of go test -v.
func listAll(t *testing.T, dir string) []string {
	t.Helper()
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	all := goOutside(t, dir, "list", "-m", "all")
	t.Logf("go.mod after go mod tidy:\n%s\ngo list -m all:\n%s\ngo mod graph:\n%s", gomod, all, goOutside(t, dir, "mod", "graph"))
	var paths []string
	sc := bufio.NewScanner(strings.NewReader(all))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			paths = append(paths, f[0])
		}
	}
	return paths
}

// A module that imports every package of the core has, in its whole module
// graph, itself and the core: nothing else.
func TestScratchModuleOfTheCoreHoldsOnlyTheCore(t *testing.T) {
	dir := scratch(t, []string{module}, []string{
		module, module + "/singleflight", module + "/key", module + "/clock", module + "/driver", module + "/flightstats", module + "/cachestatus",
	})
	if got, want := listAll(t, dir), []string{"example.com/scratch", module}; !slices.Equal(got, want) {
		t.Fatalf("go list -m all = %v, want %v", got, want)
	}
}

// A module that imports the HTTP layer has, in its whole module graph,
// itself, the core and httpflight: the layer needs nothing else (Redis is
// the Cache's business, through the adapters a user adds).
func TestScratchModuleOfHTTPFlightHoldsOnlyTheCoreAndItself(t *testing.T) {
	dir := scratch(t, []string{module, module + "/httpflight"}, []string{module + "/httpflight"})
	if got, want := listAll(t, dir), []string{"example.com/scratch", module, module + "/httpflight"}; !slices.Equal(got, want) {
		t.Fatalf("go list -m all = %v, want %v", got, want)
	}
}

// A module that imports the Redis adapters, or the gRPC interceptors, has
// in its graph the flightcache modules it imports, the modules that provide
// a package of its build (go-redis, the modules go-redis imports, otter for
// memstore; grpc, protobuf and what grpc imports for grpcflight) and what
// those third-party modules' own go.mod files require (their business, and
// pruned one level down). Nothing comes from a flightcache module's tests:
// no goleak, no Prometheus, no OpenTelemetry, no peer of the benchmarks.
func TestScratchModuleOfAnAdapterHoldsOnlyWhatItBuilds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mods  []string
		needs []string // third-party modules the build must take packages from
	}{
		{"redisstore", []string{module, module + "/redisstore"}, []string{"github.com/redis/go-redis/v9"}},
		{"memstore+redisstore+redislease", []string{module, module + "/memstore", module + "/redisstore", module + "/redislease"}, []string{"github.com/redis/go-redis/v9"}},
		{"grpcflight", []string{module, module + "/grpcflight"}, []string{"google.golang.org/grpc", "google.golang.org/protobuf"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := scratch(t, tc.mods, tc.mods)
			all := listAll(t, dir)

			// The modules that provide a package the scratch module builds.
			built := map[string]bool{}
			for _, m := range strings.Fields(goOutside(t, dir, "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", ".")) {
				built[m] = true
			}
			allowed := map[string]bool{"example.com/scratch": true}
			for m := range built {
				allowed[m] = true
			}
			for _, line := range strings.Split(strings.TrimSpace(goOutside(t, dir, "mod", "graph")), "\n") {
				from, to, _ := strings.Cut(line, " ")
				from, _, _ = strings.Cut(from, "@")
				to, _, _ = strings.Cut(to, "@")
				if built[from] && !isOurs(from) && from != "example.com/scratch" {
					allowed[to] = true
				}
			}
			var ours []string
			for _, m := range all {
				if isOurs(m) {
					ours = append(ours, m)
				}
				if !allowed[m] {
					t.Errorf("%s is in the module graph, but no package of the build comes from it and no third-party module the build uses requires it", m)
				}
			}
			if want := slices.Sorted(slices.Values(tc.mods)); !slices.Equal(ours, want) {
				t.Errorf("flightcache modules in the graph: %v, want %v", ours, want)
			}
			for _, m := range tc.needs {
				if !built[m] {
					t.Errorf("%s provides no package of the build: %v", m, built)
				}
			}
		})
	}
}
