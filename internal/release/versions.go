package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// VersionsFile is the file, at the repository's root, that names each
// module's version and the API release point.
const VersionsFile = "versions.txt"

// RepoModule is the core's module path; every other module's path is under it.
const RepoModule = "github.com/flightcache/flightcache"

// Module is a released module of versions.txt.
type Module struct {
	Dir     string // directory in the repository, "." for the core
	Version string // the version its next (or last) tag names
}

// Tag is the module's tag for version: vX.Y.Z for the core, <dir>/vX.Y.Z
// for a module in a subdirectory (the go command's rule).
func (m Module) Tag(version string) string {
	if m.Dir == "." {
		return version
	}
	return m.Dir + "/" + version
}

// Path is the module's path.
func (m Module) Path() string {
	if m.Dir == "." {
		return RepoModule
	}
	return RepoModule + "/" + m.Dir
}

// Versions is versions.txt.
type Versions struct {
	APIBase    string   // the commit of the last release point
	Modules    []Module // the released modules
	Unreleased []string // directories of the modules never released
}

// ErrVersionsFile is wrapped by every error about versions.txt's syntax.
var ErrVersionsFile = errors.New(VersionsFile)

// ReadVersions reads root's versions.txt. Its lines, besides blank lines
// and # comments, are "api-base <commit>", "module <dir> <version>" and
// "unreleased <dir>".
func ReadVersions(root string) (Versions, error) {
	data, err := os.ReadFile(filepath.Join(root, VersionsFile))
	if err != nil {
		return Versions{}, err
	}
	var v Versions
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 0 || strings.HasPrefix(f[0], "#"):
		case f[0] == "api-base" && len(f) == 2 && regexp.MustCompile(`^[0-9a-f]{7,40}$`).MatchString(f[1]):
			v.APIBase = f[1]
		case f[0] == "module" && len(f) == 3:
			if err := CheckVersion(f[2]); err != nil {
				return Versions{}, fmt.Errorf("%w:%d: %v", ErrVersionsFile, n, err)
			}
			v.Modules = append(v.Modules, Module{Dir: f[1], Version: f[2]})
		case f[0] == "unreleased" && len(f) == 2:
			v.Unreleased = append(v.Unreleased, f[1])
		default:
			return Versions{}, fmt.Errorf("%w:%d: want \"api-base <commit>\", \"module <dir> <version>\" or \"unreleased <dir>\", got %q", ErrVersionsFile, n, sc.Text())
		}
	}
	if v.APIBase == "" {
		return Versions{}, fmt.Errorf("%w: no api-base <commit> line", ErrVersionsFile)
	}
	return v, nil
}

// SetVersions rewrites root's versions.txt with every module at version and
// the API release point at base (unchanged when empty), keeping its
// comments and order.
func SetVersions(root, version, base string) error {
	path := filepath.Join(root, VersionsFile)
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	lines := strings.SplitAfter(string(data), "\n")
	for i, l := range lines {
		f := strings.Fields(l)
		switch {
		case len(f) == 3 && f[0] == "module" && version != "":
			lines[i] = "module " + f[1] + " " + version + "\n"
		case len(f) == 2 && f[0] == "api-base" && base != "":
			lines[i] = "api-base " + base + "\n"
		}
	}
	return os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644)
}

// semver is a semantic version as Go's tags spell it.
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// CheckVersion reports whether v is a semantic version such as v1.2.3 or
// v1.2.3-rc.1 (no build metadata: the go command ignores it) with the major
// version the module paths allow, 0 or 1.
func CheckVersion(v string) error {
	m := semver.FindStringSubmatch(v)
	if m == nil {
		return fmt.Errorf("%q is not a semantic version vMAJOR.MINOR.PATCH (such as v0.1.0 or v1.2.0-rc.1)", v)
	}
	if m[1] != "0" && m[1] != "1" {
		return fmt.Errorf("%s: the module paths have no /v%s suffix, so a version must be v0 or v1 (a major version 2 or later changes every module path)", v, m[1])
	}
	return nil
}

// WorkspaceDirs is the directories go.work uses, cleaned, "." first.
func WorkspaceDirs(root string) ([]string, error) {
	abs, err := filepath.Abs(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	out, err := goCmd(root, []string{"GOWORK=" + abs}, "work", "edit", "-json")
	if err != nil {
		return nil, err
	}
	var work struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(out, &work); err != nil {
		return nil, err
	}
	var dirs []string
	for _, u := range work.Use {
		dirs = append(dirs, filepath.ToSlash(filepath.Clean(u.DiskPath)))
	}
	slices.Sort(dirs)
	return dirs, nil
}

// Requirement is a require line of a go.mod.
type Requirement struct {
	Path    string
	Version string
}

// SiblingRequirements is what the go.mod in dir requires of this
// repository's modules.
func SiblingRequirements(dir string) ([]Requirement, error) {
	out, err := goCmd(dir, nil, "mod", "edit", "-json")
	if err != nil {
		return nil, err
	}
	var mf struct{ Require []Requirement }
	if err := json.Unmarshal(out, &mf); err != nil {
		return nil, err
	}
	var ours []Requirement
	for _, r := range mf.Require {
		if r.Path == RepoModule || strings.HasPrefix(r.Path, RepoModule+"/") {
			ours = append(ours, r)
		}
	}
	return ours, nil
}

// goCmd runs the go command in dir outside the workspace, with env added,
// and returns its standard output.
func goCmd(dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "GOWORK=off"), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("go %s (in %s): %v: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// gitCmd runs git in dir and returns its standard output without the final
// newline.
func gitCmd(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimRight(string(out), "\n"), nil
}
