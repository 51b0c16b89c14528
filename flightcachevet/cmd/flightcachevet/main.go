// Command flightcachevet reports the mistakes that defeat single-flight
// loading with flightcache: loaders that use the caller's context, a Cache
// or Group created per request, writes through shared cached values and,
// with -handkey, cache keys assembled by hand. See package
// github.com/flightcache/flightcache/flightcachevet for each check.
//
// Run it on its own or as a vet tool:
//
//	flightcachevet ./...
//	go vet -vettool=$(which flightcachevet) ./...
//
// Every check but handkey runs by default. -handkey adds handkey to them;
// -NAME runs only the checks named, and -NAME=false runs all but those.
package main

import (
	"os"
	"strings"

	"github.com/flightcache/flightcache/flightcachevet"
	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/multichecker"
)

func main() {
	os.Args = append(os.Args[:1:1], withDefaults(os.Args[1:], flightcachevet.Analyzers, flightcachevet.HandKey.Name)...)
	multichecker.Main(append(flightcachevet.Analyzers[:len(flightcachevet.Analyzers):len(flightcachevet.Analyzers)], flightcachevet.HandKey)...)
}

// withDefaults rewrites args so that the analyzer named off is off unless
// asked for, and, when it is asked for, runs in addition to the defaults.
//
// multichecker's own rule is that -NAME runs only the analyzers named and
// -NAME=false all but those. So without -off, withDefaults adds -off=false;
// with -off alone, it adds -NAME for every default analyzer the arguments
// do not mention. An explicit -NAME=true among the defaults keeps
// multichecker's meaning: only the analyzers named run.
func withDefaults(args []string, defaults []*analysis.Analyzer, off string) []string {
	set := make(map[string]bool) // analyzer name → value, for those given
	for _, a := range args {
		if a == "--" {
			break // flags end here
		}
		if !strings.HasPrefix(a, "-") {
			continue // a package, or the value of a flag such as -c
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		on := !hasVal || val == "true" || val == "1" || val == "t" || val == "T" || val == "TRUE" || val == "True"
		if name == off {
			set[name] = on
		}
		for _, d := range defaults {
			if d.Name == name {
				set[name] = on
			}
		}
	}
	if on, given := set[off]; !given || !on {
		if !given {
			return append([]string{"-" + off + "=false"}, args...)
		}
		return args
	}
	for _, d := range defaults {
		if set[d.Name] {
			return args // only the analyzers named
		}
	}
	var extra []string
	for _, d := range defaults {
		if _, given := set[d.Name]; !given {
			extra = append(extra, "-"+d.Name)
		}
	}
	return append(extra, args...)
}
