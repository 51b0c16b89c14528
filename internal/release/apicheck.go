package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// ErrIncompatible is wrapped by the error of an APICheck that found
// incompatible changes the changelog does not declare.
var ErrIncompatible = errors.New("undeclared incompatible API changes")

// Change is one incompatible change apidiff reported.
type Change struct {
	Module  string // the module's directory
	Message string // apidiff's line, such as "New: removed"
	Name    string // the name a declaration must use, such as memstore.New
}

// APICheck compares the API of each released module of root (only those
// in dirs, when given) with the same module at versions.txt's release
// point, and fails on an incompatible change that the changelog's
// "## [Unreleased]" section does not declare under "### Breaking".
// apidiff is the apidiff command, as path@version, that it go installs
// into a temporary directory.
func APICheck(root, apidiff string, dirs []string, out io.Writer) error {
	v, err := ReadVersions(root)
	if err != nil {
		return err
	}
	modules := v.Modules
	if len(dirs) > 0 {
		modules = nil
		for _, d := range dirs {
			i := slices.IndexFunc(v.Modules, func(m Module) bool { return m.Dir == filepath.ToSlash(filepath.Clean(d)) })
			if i < 0 {
				return fmt.Errorf("%s is not a released module of %s", d, VersionsFile)
			}
			modules = append(modules, v.Modules[i])
		}
	}
	changelog, err := os.ReadFile(filepath.Join(root, ChangelogFile))
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "apicheck-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "bin")
	if _, err := goCmd(tmp, []string{"GOBIN=" + bin}, "install", apidiff); err != nil {
		return err
	}
	tool := filepath.Join(bin, "apidiff")
	old := filepath.Join(tmp, "old")
	if err := extractCommit(root, v.APIBase, old); err != nil {
		return err
	}
	var changes []Change
	for _, m := range modules {
		if _, err := os.Stat(filepath.Join(old, m.Dir, "go.mod")); err != nil {
			fmt.Fprintf(out, "apicheck %s: new since the release point %s, nothing to compare\n", m.Dir, v.APIBase)
			continue
		}
		api := filepath.Join(tmp, strings.ReplaceAll(m.Dir, "/", "_")+".api")
		if _, err := apidiffCmd(filepath.Join(old, m.Dir), tool, "-m", "-w", api, m.Path()); err != nil {
			return fmt.Errorf("the API of %s at %s: %w", m.Dir, v.APIBase, err)
		}
		report, err := apidiffCmd(filepath.Join(root, m.Dir), tool, "-m", "-incompatible", api, m.Path())
		if err != nil {
			return fmt.Errorf("the API of %s: %w", m.Dir, err)
		}
		n := 0
		for _, l := range strings.Split(report, "\n") {
			if msg, ok := strings.CutPrefix(l, "- "); ok {
				changes = append(changes, Change{Module: m.Dir, Message: msg, Name: DeclarationName(m, msg)})
				n++
			}
		}
		fmt.Fprintf(out, "apicheck %s: %d incompatible changes since %s\n", m.Dir, n, v.APIBase)
	}
	declared := Declared(string(changelog))
	var undeclared []string
	for _, c := range changes {
		if !declared[c.Name] {
			undeclared = append(undeclared, fmt.Sprintf("%s: %s   (declare `%s`)", c.Module, c.Message, c.Name))
		}
	}
	if len(undeclared) > 0 {
		return fmt.Errorf("%w since the release point %s (%s):\n  %s\n"+
			"Keep the old API, or declare each change: a line under %q in the \"## [Unreleased]\" section of %s that names it in backquotes and says what users must change.",
			ErrIncompatible, v.APIBase, VersionsFile, strings.Join(undeclared, "\n  "), BreakingHeading, ChangelogFile)
	}
	return nil
}

// DeclarationName is the name under which the changelog declares the
// change apidiff reported as msg in module m: the package's path inside
// the repository ("flightcache" for the core's root package), a dot and
// the identifier, a method as Type.Method; a removed package by its path.
func DeclarationName(m Module, msg string) string {
	name, _, _ := strings.Cut(msg, ": ")
	pkg := strings.TrimPrefix(m.Path(), RepoModule+"/")
	if m.Dir == "." {
		pkg = "flightcache"
	}
	if p, ok := strings.CutPrefix(name, "package "); ok {
		if p == RepoModule {
			return "flightcache"
		}
		return strings.TrimPrefix(p, RepoModule+"/")
	}
	name, _, _ = strings.Cut(name, ", ") // a part of an object: its object
	if rel, ok := strings.CutPrefix(name, "./"); ok {
		// An object of a package under the module's root, ./sub.Name (the
		// repository's package paths have no dots).
		sub, rest, _ := strings.Cut(rel, ".")
		if m.Dir == "." {
			pkg = sub
		} else {
			pkg += "/" + sub
		}
		name = rest
	}
	// A method: (*T).M or (T).M becomes T.M.
	if strings.HasPrefix(name, "(") {
		if i := strings.Index(name, ")"); i > 0 {
			name = strings.TrimPrefix(name[1:i], "*") + name[i+1:]
		}
	}
	return pkg + "." + name
}

// extractCommit writes the tree of commit in root's repository to dir.
func extractCommit(root, commit, dir string) error {
	cmd := exec.Command("git", "archive", "--format=tar", commit)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	extractErr := untar(pipe, dir)
	io.Copy(io.Discard, pipe)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %v: %s (is the release point of %s in this clone's history? a shallow clone needs git fetch --unshallow)",
			commit, err, strings.TrimSpace(stderr.String()), VersionsFile)
	}
	return extractErr
}

// untar writes the regular files and directories of the tar stream r to dir.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("git archive: entry %q outside the tree", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// apidiffCmd runs the apidiff binary tool in dir, outside the workspace,
// and returns its output.
func apidiffCmd(dir, tool string, args ...string) (string, error) {
	cmd := exec.Command(tool, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("apidiff %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
