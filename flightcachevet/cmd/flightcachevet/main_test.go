package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flightcache/flightcache/flightcachevet"
)

func TestWithDefaults(t *testing.T) {
	for _, tc := range []struct {
		args, want string
	}{
		// handkey is off unless asked for.
		{"./...", "-handkey=false ./..."},
		{"x.cfg", "-handkey=false x.cfg"},
		{"-V=full", "-handkey=false -V=full"},
		// -handkey adds it to the defaults.
		{"-handkey ./...", "-loaderctx -shortlived -mutatehit -directive -handkey ./..."},
		{"--handkey=true x.cfg", "-loaderctx -shortlived -mutatehit -directive --handkey=true x.cfg"},
		// ... except those turned off.
		{"-handkey -mutatehit=false ./...", "-loaderctx -shortlived -directive -handkey -mutatehit=false ./..."},
		// -NAME alone keeps multichecker's meaning: only those run.
		{"-loaderctx ./...", "-handkey=false -loaderctx ./..."},
		{"-loaderctx -handkey ./...", "-loaderctx -handkey ./..."},
		{"-handkey=false ./...", "-handkey=false ./..."},
		// Flags end at --.
		{"-c 2 -- -handkey", "-handkey=false -c 2 -- -handkey"},
	} {
		got := strings.Join(withDefaults(strings.Fields(tc.args), flightcachevet.Analyzers, "handkey"), " ")
		if got != tc.want {
			t.Errorf("withDefaults(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestVetTool builds the command and runs it under go vet -vettool over the
// example service of the analyzer tests, as a user would: every finding at
// its position, handkey only with -handkey, and exit status 1.
func TestVetTool(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command and runs go vet")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	bin := filepath.Join(t.TempDir(), "flightcachevet")
	if out, err := exec.Command(goBin, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	testdata, err := filepath.Abs("../../testdata")
	if err != nil {
		t.Fatal(err)
	}
	const file = "example/productsvc/productsvc.go:"
	defaults := []string{
		file + "51:23: loader passed to Cache.Get uses ctx from the enclosing function instead of its own context parameter: the first caller to leave would cancel the load shared by every waiter",
		file + "58:2: write through the value Get returned: without Options.Clone the Cache hands this same value to every caller of the key and may keep it in its local tier; copy it before changing it, or set Options.Clone",
		file + "66:7: singleflight.Group is created and used only within this call: every call gets its own registry, so no two callers ever share a load; create it once and share it (a field or a package variable)",
		file + "98:2: flightcachevet:ignore needs a reason (//flightcachevet:ignore <why this is safe>); without one it silences nothing",
	}
	handkey := []string{
		file + "49:32: cache key built by hand with +: build it with package key (key.New(namespace).Tenant(t).ID(id)...Build()), which names every dimension and cannot collide",
		file + "68:37: cache key built by hand with fmt.Sprintf: build it with package key (key.New(namespace).Tenant(t).ID(id)...Build()), which names every dimension and cannot collide",
		file + "99:37: cache key built by hand with +: build it with package key (key.New(namespace).Tenant(t).ID(id)...Build()), which names every dimension and cannot collide",
	}
	for _, tc := range []struct {
		flags []string
		want  []string
	}{
		{nil, defaults},
		{[]string{"-handkey"}, append(slices.Clone(defaults), handkey...)},
		{[]string{"-loaderctx"}, defaults[:1]},
	} {
		args := append(append([]string{"vet", "-vettool=" + bin}, tc.flags...), "example/...")
		cmd := exec.Command(goBin, args...)
		cmd.Dir = filepath.Join(testdata, "src")
		cmd.Env = append(os.Environ(), "GOPATH="+testdata, "GO111MODULE=off", "GOWORK=off", "GOFLAGS=")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("go %v: %v, want exit status 1\n%s", args, err, out)
		}
		var got []string
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, file) {
				got = append(got, line)
			}
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(tc.want))
		if !slices.Equal(got, want) {
			t.Errorf("go %v reported:\n%s\nwant:\n%s\n(full output:\n%s)", args, strings.Join(got, "\n"), strings.Join(want, "\n"), out)
		}
	}
}
