package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the repository's root, from this directory.
const repoRoot = "../.."

func TestCheckVersionAcceptsSemanticVersionsOnly(t *testing.T) {
	for _, v := range []string{"v0.1.0", "v1.2.3", "v0.10.11", "v1.0.0-rc.1", "v0.2.0-beta"} {
		if err := CheckVersion(v); err != nil {
			t.Errorf("CheckVersion(%q) = %v, want nil", v, err)
		}
	}
	for _, v := range []string{"", "0.1.0", "v2.0.0", "v1.2", "v1.2.3.4", "v01.2.3", "v1.2.3+build", "v1.2.3-", "V1.2.3", "v1.2.x"} {
		if err := CheckVersion(v); err == nil {
			t.Errorf("CheckVersion(%q) = nil, want an error", v)
		}
	}
}

func TestDeclaredReadsOnlyTheUnreleasedBreakingSubsection(t *testing.T) {
	changelog := "# Changelog\n\n## [Unreleased]\n\n### Added\n\n- `memstore.Added`.\n\n" +
		"### Breaking\n\n- `memstore.New` takes a context; `flightcache.Options.Local`\n  is gone (and `driver.SharedStore.Get`).\n\n" +
		"### Fixed\n\n- `flightcache.Fixed`.\n\n## [0.1.0] - 2026-12-02\n\n### Breaking\n\n- `flightcache.Old`.\n"
	got := Declared(changelog)
	want := []string{"driver.SharedStore.Get", "flightcache.Options.Local", "memstore.New"}
	var names []string
	for n := range got {
		names = append(names, n)
	}
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Fatalf("Declared = %v, want %v", names, want)
	}
	for _, c := range []struct {
		changelog, version string
		found, dated       bool
	}{
		{changelog, "v0.1.0", true, true},
		{changelog, "v0.1.1", false, false},
		{changelog, "v0.1", false, false},
		{"## [0.2.0] - unreleased\n", "v0.2.0", true, false},
		{"## [0.2.0]\n", "v0.2.0", true, false},
		{"## [0.2.0] - 2026-12-02 (yanked)\n", "v0.2.0", true, false},
	} {
		if found, dated := ReleaseSection(c.changelog, c.version); found != c.found || dated != c.dated {
			t.Errorf("ReleaseSection(%q, %s) = %v, %v; want %v, %v", c.changelog, c.version, found, dated, c.found, c.dated)
		}
	}
}

func TestDeclarationNameQualifiesApidiffsNames(t *testing.T) {
	core, mem, lease := Module{Dir: "."}, Module{Dir: "memstore"}, Module{Dir: "redislease"}
	for _, c := range []struct {
		m         Module
		msg, want string
	}{
		{core, "New: changed from func() to func(int)", "flightcache.New"},
		{core, "(*Cache).Get: removed", "flightcache.Cache.Get"},
		{core, "Options.Local: removed", "flightcache.Options.Local"},
		{core, "./driver.SharedStore.Get: changed from func() to func(int)", "driver.SharedStore.Get"},
		{core, "./driver.(*Bus).Close: removed", "driver.Bus.Close"},
		{core, "package github.com/flightcache/flightcache/clock: removed", "clock"},
		{mem, "New: removed", "memstore.New"},
		{mem, "(Store).Len: removed", "memstore.Store.Len"},
		{lease, "./x.Y: removed", "redislease/x.Y"},
		{lease, "Coordinator, method Claim: removed", "redislease.Coordinator"},
	} {
		if got := DeclarationName(c.m, c.msg); got != c.want {
			t.Errorf("DeclarationName(%s, %q) = %q, want %q", c.m.Dir, c.msg, got, c.want)
		}
	}
}

// copyRepo makes a git repository in a temporary directory of the work
// tree's files (tracked and untracked, not ignored), committed once, with
// a bare repository as its remote origin. It returns both directories.
func copyRepo(t *testing.T) (dir, origin string) {
	t.Helper()
	dir, origin = t.TempDir(), t.TempDir()
	out, err := exec.Command("git", "-C", repoRoot, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		data, err := os.ReadFile(filepath.Join(repoRoot, name))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(t, origin, "init", "-q", "--bare")
	git(t, dir, "init", "-q", "-b", "main")
	git(t, dir, "config", "user.name", "release test")
	git(t, dir, "config", "user.email", "release-test@example.com")
	git(t, dir, "remote", "add", "origin", origin)
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "the work tree")
	git(t, dir, "push", "-q", "origin", "main")
	return dir, origin
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := gitCmd(dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// make release in a copy of the repository: each check refuses what it
// must, then every released module is tagged at the release commit, the
// release point is recorded, and nothing reaches the remote.
func TestReleaseChecksAndTagsEveryModuleInACopy(t *testing.T) {
	dir, origin := copyRepo(t)
	v, err := ReadVersions(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	const version = "v0.98.7"
	changelog := filepath.Join(dir, ChangelogFile)
	for _, c := range []struct {
		name, version, want string
	}{
		{"bad syntax", "0.98.7", "not a semantic version"},
		{"major version 2", "v2.0.0", "v0 or v1"},
		{"versions.txt and go.mod not prepared", version, "make release-prepare VERSION=v0.98.7"},
	} {
		if err := Tag(dir, c.version, false, &out); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Tag = %v, want an error saying %q", c.name, err, c.want)
		}
	}
	if err := Prepare(dir, version, &out); err != nil {
		t.Fatal(err)
	}
	err = Tag(dir, version, false, &out)
	for _, want := range []string{"CHANGELOG.md has no section \"## [0.98.7]", "not clean"} {
		if !errors.Is(err, ErrNotReleasable) || !strings.Contains(err.Error(), want) {
			t.Errorf("prepared but neither committed nor in the changelog: Tag = %v, want an error saying %q", err, want)
		}
	}
	data, err := os.ReadFile(changelog)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, changelog, strings.Replace(string(data), "## [Unreleased]\n", "## [Unreleased]\n\n## [0.98.7] - unreleased\n", 1))
	git(t, dir, "commit", "-q", "-a", "-m", "prepare v0.98.7")
	if err := Tag(dir, version, false, &out); err == nil || !strings.Contains(err.Error(), "has no release date") {
		t.Errorf("an undated section: Tag = %v, want an error", err)
	}
	writeFile(t, changelog, strings.Replace(string(data), "## [Unreleased]\n", "## [Unreleased]\n\n## [0.98.7] - 2026-12-02\n", 1))
	// One go.mod that requires a sibling at another version.
	memMod := filepath.Join(dir, "memstore", "go.mod")
	mod, err := os.ReadFile(memMod)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, memMod, strings.Replace(string(mod), "github.com/flightcache/flightcache "+version, "github.com/flightcache/flightcache v0.98.6", 1))
	git(t, dir, "commit", "-q", "-a", "-m", "release v0.98.7")
	if err := Tag(dir, version, false, &out); err == nil || !strings.Contains(err.Error(), "memstore/go.mod requires github.com/flightcache/flightcache@v0.98.6") {
		t.Errorf("a stale requirement: Tag = %v, want an error naming it", err)
	}
	writeFile(t, memMod, string(mod))
	git(t, dir, "commit", "-q", "-a", "-m", "release v0.98.7, memstore too")
	release := git(t, dir, "rev-parse", "HEAD")

	out.Reset()
	if err := Tag(dir, version, true, &out); err != nil || !strings.Contains(out.String(), "would tag "+release) {
		t.Fatalf("dry run: Tag = %v, %q", err, out.String())
	}
	if tags := git(t, dir, "tag"); tags != "" {
		t.Fatalf("the dry run created tags %q", tags)
	}
	out.Reset()
	if err := Tag(dir, version, false, &out); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range v.Modules {
		want = append(want, m.Tag(version))
		if got := git(t, dir, "rev-parse", m.Tag(version)+"^{commit}"); got != release {
			t.Errorf("tag %s is on %s, want the release commit %s", m.Tag(version), got, release)
		}
	}
	got := strings.Fields(git(t, dir, "tag"))
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) || !slices.Contains(got, "v0.98.7") || !slices.Contains(got, "memstore/v0.98.7") {
		t.Fatalf("tags %v, want %v", got, want)
	}
	after, err := ReadVersions(dir)
	if err != nil {
		t.Fatal(err)
	}
	if after.APIBase != release || git(t, dir, "status", "--porcelain") != "" {
		t.Fatalf("versions.txt's release point is %s, want the release commit %s, committed", after.APIBase, release)
	}
	if !strings.Contains(out.String(), "git push origin main") || !strings.Contains(out.String(), "git push origin "+strings.Join(tagsOf(v, version), " ")) {
		t.Fatalf("the push commands are not printed:\n%s", out.String())
	}
	if remote := git(t, dir, "ls-remote", "--tags", "origin"); remote != "" {
		t.Fatalf("the remote got tags: %s", remote)
	}
	if err := Tag(dir, version, false, &out); err == nil || !strings.Contains(err.Error(), "tag v0.98.7 exists already") {
		t.Fatalf("tagging again: Tag = %v, want an error", err)
	}
	if head := git(t, origin, "rev-parse", "main"); head == release {
		t.Fatal("the release commit reached the remote")
	}
}

func tagsOf(v Versions, version string) []string {
	var tags []string
	for _, m := range v.Modules {
		tags = append(tags, m.Tag(version))
	}
	return tags
}

// make apicheck in a copy of the repository whose release point is its
// own commit: removing an exported function fails the check, naming it,
// until the changelog declares the removal.
func TestAPICheckFailsOnAnUndeclaredIncompatibleChange(t *testing.T) {
	dir, _ := copyRepo(t)
	if err := SetVersions(dir, "", git(t, dir, "rev-parse", "HEAD")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := APICheck(dir, DefaultAPIDiff, []string{"breaker"}, &out); err != nil {
		t.Fatalf("no change: %v\n%s", err, out.String())
	}
	src := filepath.Join(dir, "breaker", "breaker.go")
	code, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	const decl = "func New(o Options) (*Breaker, error)"
	if !strings.Contains(string(code), decl) {
		t.Fatalf("breaker.go no longer has %q; pick another exported function to remove", decl)
	}
	writeFile(t, src, strings.Replace(string(code), decl, "func newBreaker(o Options) (*Breaker, error)", 1))
	err = APICheck(dir, DefaultAPIDiff, []string{"breaker"}, &out)
	if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "breaker: New: removed") || !strings.Contains(err.Error(), "`breaker.New`") {
		t.Fatalf("an exported function removed: APICheck = %v, want an ErrIncompatible naming breaker.New", err)
	}
	changelog := filepath.Join(dir, ChangelogFile)
	data, err := os.ReadFile(changelog)
	if err != nil {
		t.Fatal(err)
	}
	// Declared elsewhere than in the Unreleased section's Breaking list: still undeclared.
	writeFile(t, changelog, strings.Replace(string(data), "## [Unreleased]\n", "## [Unreleased]\n\n### Removed\n\n- `breaker.New`.\n", 1))
	if err := APICheck(dir, DefaultAPIDiff, []string{"breaker"}, &out); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("declared under Removed only: APICheck = %v, want ErrIncompatible", err)
	}
	writeFile(t, changelog, strings.Replace(string(data), "## [Unreleased]\n", "## [Unreleased]\n\n### Breaking\n\n- `breaker.New` is gone: build the breaker with breaker.Make.\n", 1))
	if err := APICheck(dir, DefaultAPIDiff, []string{"breaker"}, &out); err != nil {
		t.Fatalf("declared: APICheck = %v, want nil", err)
	}
}
