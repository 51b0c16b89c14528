package main

import (
	"regexp"
	"strings"
)

// ChangelogFile is the changelog, at the repository's root, in the Keep a
// Changelog form: "## [Unreleased]" on top, then "## [X.Y.Z] - date" per
// release, each with "### Added", "### Changed", ... subsections.
const ChangelogFile = "CHANGELOG.md"

// BreakingHeading is the subsection of "## [Unreleased]" that declares the
// incompatible API changes since the last release point.
const BreakingHeading = "### Breaking"

// ReleaseSection reports whether changelog has a section for version
// (vX.Y.Z), headed "## [X.Y.Z]" as Keep a Changelog spells it, and whether
// the heading carries a release date: "## [X.Y.Z] - YYYY-MM-DD".
func ReleaseSection(changelog, version string) (found, dated bool) {
	want := "## [" + strings.TrimPrefix(version, "v") + "]"
	for _, l := range strings.Split(changelog, "\n") {
		if l == want || strings.HasPrefix(l, want+" ") {
			return true, dateSuffix.MatchString(strings.TrimPrefix(l, want))
		}
	}
	return false, false
}

// dateSuffix is the rest of a release's heading: " - YYYY-MM-DD".
var dateSuffix = regexp.MustCompile(`^ - [0-9]{4}-[0-9]{2}-[0-9]{2}$`)

// backquoted is a name in backquotes.
var backquoted = regexp.MustCompile("`([^`]+)`")

// Declared is the set of names in backquotes in the "### Breaking"
// subsection of changelog's "## [Unreleased]" section: the incompatible
// changes it declares.
func Declared(changelog string) map[string]bool {
	names := map[string]bool{}
	var unreleased, breaking bool
	for _, l := range strings.Split(changelog, "\n") {
		switch {
		case strings.HasPrefix(l, "## "):
			unreleased = strings.HasPrefix(l, "## [Unreleased]")
			breaking = false
		case strings.HasPrefix(l, "### "):
			breaking = unreleased && strings.TrimSpace(l) == BreakingHeading
		case breaking:
			for _, m := range backquoted.FindAllStringSubmatch(l, -1) {
				names[m[1]] = true
			}
		}
	}
	return names
}
