package key_test

import (
	"testing"

	"github.com/flightcache/flightcache/key"
)

var sink string

// BenchmarkBuild is the hot path: a per-request key derived from a
// package-level template. It should cost one allocation (the key).
func BenchmarkBuild(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		k, err := productKey.Tenant("acme").ID("1234567").Locale("de-DE").Currency("EUR").Build()
		if err != nil {
			b.Fatal(err)
		}
		sink = k
	}
}

// BenchmarkBuildEscaped measures the slow path through the escaper.
func BenchmarkBuildEscaped(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		k, err := productKey.Tenant("a|c=m%e").ID("12|34").Locale("de-DE").Currency("EUR").Build()
		if err != nil {
			b.Fatal(err)
		}
		sink = k
	}
}

// BenchmarkBuildExtras: each Dim copies the extras slice (copy-on-write),
// so this costs one allocation per Dim plus the key.
func BenchmarkBuildExtras(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		k, err := productKey.Tenant("acme").ID("1234567").Locale("de-DE").Currency("EUR").
			Dim("channel", "web").Dim("segment", "b2b").Build()
		if err != nil {
			b.Fatal(err)
		}
		sink = k
	}
}

func BenchmarkParse(b *testing.B) {
	k := productKey.Tenant("acme").ID("1234567").Locale("de-DE").Currency("EUR").MustBuild()
	b.ReportAllocs()
	for b.Loop() {
		p, err := key.Parse(k)
		if err != nil {
			b.Fatal(err)
		}
		sink = p.Tenant
	}
}
