// Package key is a stub of github.com/flightcache/flightcache/key for the
// analyzer tests (TestStubsMatchRealPackages checks its signatures).
package key

type Builder struct{ parts []string }

func New(namespace string) Builder { return Builder{parts: []string{namespace}} }

func (b Builder) Tenant(t string) Builder { return b }

func (b Builder) ID(id string) Builder { return b }

func (b Builder) Locale(l string) Builder { return b }

func (b Builder) Build() (string, error) { return "", nil }
