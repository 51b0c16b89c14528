package bloomguard_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/flightcache/flightcache/bloomguard"
)

// BenchmarkMayContain: a "no" (absent ID) and a "maybe" (present ID) on a
// filter of 1M IDs at 1 %.
func BenchmarkMayContain(b *testing.B) {
	const n = 1_000_000
	f, err := bloomguard.New(bloomguard.Config{ExpectedItems: n})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(1, 1))
	ps := randomPairs(r, n, 100)
	if err := f.Rebuild(context.Background(), sliceSource(ps)); err != nil {
		b.Fatal(err)
	}
	f.Add("t1", "recent") // the exact set of recent additions is not empty
	b.Run("no", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			f.MayContain("t1", "absent-"+strconv.Itoa(i&1023))
			i++
		}
	})
	b.Run("maybe", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			p := ps[i&1023]
			f.MayContain(p.tenant, p.id)
			i++
		}
	})
}
