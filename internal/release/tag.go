package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Prepare sets version in root's versions.txt for every released module and
// in every go.mod of the workspace for each requirement on a sibling, so
// that a user outside the workspace resolves every module at that version.
// It commits nothing.
func Prepare(root, version string, out io.Writer) error {
	if err := CheckVersion(version); err != nil {
		return err
	}
	if _, err := ReadVersions(root); err != nil {
		return err
	}
	dirs, err := WorkspaceDirs(root)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		reqs, err := SiblingRequirements(filepath.Join(root, d))
		if err != nil {
			return err
		}
		var args []string
		for _, r := range reqs {
			args = append(args, "-require="+r.Path+"@"+version)
		}
		if len(args) > 0 {
			if _, err := goCmd(filepath.Join(root, d), nil, append([]string{"mod", "edit"}, args...)...); err != nil {
				return err
			}
		}
	}
	if err := SetVersions(root, version, ""); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s and the go.mod files name %s. Next: move the [Unreleased] entries of %s into \"## [%s] - YYYY-MM-DD\", commit, then make release VERSION=%s\n",
		VersionsFile, version, ChangelogFile, strings.TrimPrefix(version, "v"), version)
	return nil
}

// ErrNotReleasable is wrapped by the error of a Tag whose checks failed.
var ErrNotReleasable = errors.New("not releasable")

// Tag checks that root can be released as version and, unless dryRun, tags
// HEAD for every released module, records HEAD as the API release point in
// versions.txt (a commit of its own) and prints the push commands. It
// pushes nothing. Every failed check is listed in the error.
func Tag(root, version string, dryRun bool, out io.Writer) error {
	if err := CheckVersion(version); err != nil {
		return err
	}
	v, err := ReadVersions(root)
	if err != nil {
		return err
	}
	var problems []string
	// Every module of the workspace is in versions.txt, released or not,
	// so that a new module cannot be left out of a release unnoticed.
	dirs, err := WorkspaceDirs(root)
	if err != nil {
		return err
	}
	var listed []string
	for _, m := range v.Modules {
		listed = append(listed, m.Dir)
		if m.Version != version {
			problems = append(problems, fmt.Sprintf("%s names %s for module %s, not %s (make release-prepare VERSION=%s)", VersionsFile, m.Version, m.Dir, version, version))
		}
	}
	listed = append(listed, v.Unreleased...)
	slices.Sort(listed)
	if !slices.Equal(listed, dirs) {
		problems = append(problems, fmt.Sprintf("%s lists the modules %v, go.work uses %v: list each as module or unreleased", VersionsFile, listed, dirs))
	}
	// Every go.mod requires its siblings at the version: a user outside
	// the workspace then resolves every module of a release consistently.
	for _, d := range dirs {
		reqs, err := SiblingRequirements(filepath.Join(root, d))
		if err != nil {
			return err
		}
		for _, r := range reqs {
			if r.Version != version {
				problems = append(problems, fmt.Sprintf("%s/go.mod requires %s@%s, not %s (make release-prepare VERSION=%s)", d, r.Path, r.Version, version, version))
			}
		}
	}
	changelog, err := os.ReadFile(filepath.Join(root, ChangelogFile))
	if err != nil {
		return err
	}
	switch found, dated := ReleaseSection(string(changelog), version); {
	case !found:
		problems = append(problems, fmt.Sprintf("%s has no section \"## [%s] - YYYY-MM-DD\"", ChangelogFile, strings.TrimPrefix(version, "v")))
	case !dated:
		problems = append(problems, fmt.Sprintf("%s's section for %s has no release date: \"## [%s] - YYYY-MM-DD\"", ChangelogFile, version, strings.TrimPrefix(version, "v")))
	}
	status, err := gitCmd(root, "status", "--porcelain")
	if err != nil {
		return err
	}
	if status != "" {
		problems = append(problems, "the work tree is not clean (git status --porcelain):\n      "+strings.ReplaceAll(status, "\n", "\n      "))
	}
	var tags []string
	for _, m := range v.Modules {
		tag := m.Tag(version)
		tags = append(tags, tag)
		if _, err := gitCmd(root, "rev-parse", "-q", "--verify", "refs/tags/"+tag); err == nil {
			problems = append(problems, "tag "+tag+" exists already")
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w as %s:\n  %s", ErrNotReleasable, version, strings.Join(problems, "\n  "))
	}
	head, err := gitCmd(root, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	if dryRun {
		fmt.Fprintf(out, "release %s: every check passed; would tag %s: %s\n", version, head, strings.Join(tags, " "))
		return nil
	}
	for i, m := range v.Modules {
		if _, err := gitCmd(root, "tag", "-a", tags[i], "-m", m.Path()+" "+version); err != nil {
			return err
		}
	}
	if err := SetVersions(root, "", head); err != nil {
		return err
	}
	if _, err := gitCmd(root, "commit", "-q", "-m", VersionsFile+": the API release point is "+version, "--", VersionsFile); err != nil {
		return err
	}
	branch, err := gitCmd(root, "rev-parse", "--abbrev-ref", "HEAD")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Tagged %s as %s\nand committed %s's new API release point. Nothing was pushed; to publish:\n\n  git push origin %s\n  git push origin %s\n",
		head, strings.Join(tags, " "), VersionsFile, branch, strings.Join(tags, " "))
	return nil
}
