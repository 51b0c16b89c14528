package flightcache_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/flightcache/flightcache"
	"github.com/flightcache/flightcache/driver"
)

// BenchmarkHitLocalTags measures a fresh local hit by tags and live tag
// fences: an untagged hit with no fence (today's hit), an untagged hit
// while fences live (one length check more), a hit of a value with 4
// tags with no fence, with 1,000 fences of other tags live (4 lock-free
// map lookups), and while one of its own tags has a fence older than it.
// The local tier is the core's map-backed test store; bench/'s
// BenchmarkHitLocal measures the same hit on memstore against otter.
//
//	go test -run '^$' -bench HitLocalTags -benchmem -count 5 .
func BenchmarkHitLocalTags(b *testing.B) {
	tags4 := []string{"tenant:7", "product:42", "category:tea", "brand:9"}
	for _, bc := range []struct {
		name   string
		tags   []string
		fences int  // fences of other tags
		own    bool // a fence of one of its tags, older than the value
	}{
		{"untagged", nil, 0, false},
		{"untagged-fences=1000", nil, 1000, false},
		{"tags=4", tags4, 0, false},
		{"tags=4-fences=1000", tags4, 1000, false},
		{"tags=4-own-fence", tags4, 0, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := newCache(b, flightcache.Options[*product]{TTL: time.Hour, ClockSkew: flightcache.DisableClockSkew})
			ctx := context.Background()
			for i := range bc.fences {
				if err := c.InvalidateTag(ctx, "other:"+strconv.Itoa(i)); err != nil {
					b.Fatal(err)
				}
			}
			if bc.own {
				if err := c.InvalidateTag(ctx, "brand:9"); err != nil {
					b.Fatal(err)
				}
			}
			load := func(ctx context.Context) (*product, error) {
				flightcache.SetTags(ctx, bc.tags...)
				return &product{ID: "42"}, nil
			}
			if bc.tags == nil {
				load = (&origin{}).load("42")
			}
			if _, err := c.Get(ctx, "product:42", load); err != nil {
				b.Fatal(err)
			}
			if r, err := c.Fetch(ctx, "product:42", load); err != nil || r.Outcome != flightcache.OutcomeHitLocal {
				b.Fatalf("not a local hit: %v, %v", r.Outcome, err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := c.Get(ctx, "product:42", load); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkInvalidateTagWithAMillionLocalEntries measures InvalidateTag
// on a local tier of 1,000,000 values, each tagged with one of 1,000
// tags (put in the store directly: the fill is not what is measured).
// The call writes one fence and walks nothing, whatever the tier holds;
// then a hit of a covered value loads again.
//
//	go test -run '^$' -bench InvalidateTagWithAMillion -benchmem -count 3 .
func BenchmarkInvalidateTagWithAMillionLocalEntries(b *testing.B) {
	const entries, tags = 1_000_000, 1000
	local := newLocal[int](b, nil)
	c := newCache(b, flightcache.Options[int]{TTL: time.Hour, Local: local})
	ctx := context.Background()
	now := time.Now()
	tagLists := make([][]string, tags)
	for i := range tagLists {
		tagLists[i] = []string{"t:" + strconv.Itoa(i)}
	}
	for i := range entries {
		local.Set("k:"+strconv.Itoa(i), driver.Item[int]{Value: i, Meta: driver.Meta{
			FreshUntil: now.Add(time.Hour), StaleUntil: now.Add(time.Hour), LoadedAt: now, Tags: tagLists[i%tags]}})
	}
	if r, err := c.Fetch(ctx, "k:1", nil); err != nil || r.Outcome != flightcache.OutcomeHitLocal {
		b.Fatalf("not a local hit: %v, %v", r.Outcome, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if err := c.InvalidateTag(ctx, "t:"+strconv.Itoa(i%tags)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.StopTimer()
	if r, err := c.Fetch(ctx, "k:1", func(context.Context) (int, error) { return -1, nil }); err != nil || r.Value != -1 {
		b.Fatalf("a covered value after InvalidateTag: %v, %v, %v; want a new load", r.Value, r.Outcome, err)
	}
}
