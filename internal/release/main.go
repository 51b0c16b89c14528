// Command release versions, tags and API-checks the repository's modules
// (README, "Releases"; versions.txt; CHANGELOG.md).
//
//	go run ./internal/release prepare vX.Y.Z   # versions.txt and every go.mod's requirements on siblings name vX.Y.Z
//	go run ./internal/release tag [-n] vX.Y.Z  # checks, tags every released module, prints the push commands
//	go run ./internal/release apicheck [-apidiff tool@version] [module dir ...]
//
// tag checks that the version is a semantic version, the work tree is clean,
// CHANGELOG.md has a section for it, versions.txt lists every module of
// go.work (released or not) and names the version for every released one,
// every go.mod requires its siblings at that version, and no tag exists yet;
// then it tags HEAD vX.Y.Z (the core) and <dir>/vX.Y.Z for every other
// released module, records HEAD as the API release point in versions.txt
// (a commit of its own) and prints the git push commands. It pushes
// nothing. With -n it checks and prints the tags it would create.
//
// apicheck compares the API of every released module (or of the module
// directories named) with the same module at the release point of
// versions.txt, built from git archive of that commit in a temporary
// directory, with apidiff (golang.org/x/exp/cmd/apidiff). An incompatible
// change fails the check unless the "## [Unreleased]" section of
// CHANGELOG.md declares it under a "### Breaking" heading, naming it in
// backquotes as the package's path inside the repository, a dot and the
// identifier as apidiff names it, a method as Type.Method:
// `memstore.New`, `flightcache.Options.Local`, `driver.SharedStore.Get`
// (the core's root package is `flightcache`); a removed package is named
// by its path alone.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usage is printed for a command line run cannot parse.
const usage = `usage:
  release prepare vX.Y.Z
  release tag [-n] vX.Y.Z
  release apicheck [-apidiff tool@version] [module dir ...]
`

// DefaultAPIDiff is the apidiff apicheck runs unless -apidiff names another.
const DefaultAPIDiff = "golang.org/x/exp/cmd/apidiff@v0.0.0-20261113113407-e3970619a1a4"

// run is main without the exit: it runs the subcommand of args from the
// current directory, the repository's root, and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	fs := flag.NewFlagSet("release "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	dryRun := fs.Bool("n", false, "tag: check and print the tags, create nothing")
	apidiff := fs.String("apidiff", DefaultAPIDiff, "apicheck: the apidiff command to go install, as path@version")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	var err error
	switch args[0] {
	case "prepare":
		if fs.NArg() != 1 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		err = Prepare(".", fs.Arg(0), stdout)
	case "tag":
		if fs.NArg() != 1 {
			fmt.Fprint(stderr, usage)
			return 2
		}
		err = Tag(".", fs.Arg(0), *dryRun, stdout)
	case "apicheck":
		err = APICheck(".", *apidiff, fs.Args(), stdout)
	default:
		fmt.Fprint(stderr, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "release "+args[0]+": "+err.Error())
		return 1
	}
	return 0
}
