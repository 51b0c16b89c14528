package coherence

import (
	"strings"
	"testing"
	"time"
)

// Every way a shared entry or a local item can be refused is told by
// AcceptShared or LocalState, with the fence that refused it: an
// unexpected miss is explained from this package alone, without a Cache.
func TestAnUnexpectedMissIsExplainedWithoutACache(t *testing.T) {
	var m Model
	m.SetWindow(time.Hour)
	m.Tags.Window, m.DownTTL = time.Hour, time.Minute
	m.NoteKey("set", at(5), base, FromWrite)
	m.NoteKey("heard", at(5), base, FromInvalidation)
	m.NoteServed("served", at(5), base)
	m.NoteBulk("t=1|", at(5), base)
	m.Tags.Note("product:1", at(5), at(5), false, base)
	m.Tags.Note("product:2", at(5), at(5), true, base)

	entry := func(read int) Copy {
		c := Copy{FreshUntil: base.Add(time.Minute), StaleUntil: base.Add(time.Hour)}
		if read != 0 {
			c.Version = at(read)
		}
		return c
	}
	tagged := func(read int, tag string) Copy { c := entry(read); c.Tags = []string{tag}; return c }
	expired := func(notFound bool) Copy {
		c := entry(6)
		c.FreshUntil, c.NotFound = base.Add(-time.Second), notFound
		if notFound {
			c.StaleUntil = c.FreshUntil
		}
		return c
	}
	for _, c := range []struct {
		name  string
		key   string
		entry Copy
		state State
		why   Why
		src   Source
	}{
		{"nothing covers it", "other", entry(1), Fresh, WhyNone, FromFill},
		{"older than this instance's Set", "set", entry(4), Unusable, WhyOlderThanKey, FromWrite},
		{"the Set's own entry", "set", entry(5), Fresh, WhyNone, FromFill},
		{"older than an invalidation heard of", "heard", entry(4), Unusable, WhyOlderThanKey, FromInvalidation},
		{"older than a value a load served", "served", entry(4), Unusable, WhyOlderThanKey, FromFill},
		{"unknown version, key fenced", "set", entry(0), Fresh, WhyNone, FromFill},
		{"under a bulk invalidation", "t=1|a", entry(4), Unusable, WhyBulk, FromFill},
		{"unknown version under a bulk invalidation", "t=1|a", entry(0), Unusable, WhyBulk, FromFill},
		{"newer than the bulk invalidation", "t=1|a", entry(6), Fresh, WhyNone, FromFill},
		{"a tag invalidated", "p", tagged(4, "product:1"), Unusable, WhyTagInvalidated, FromFill},
		{"a tag expired", "p", tagged(4, "product:2"), Stale, WhyTagExpired, FromFill},
		{"read after the tag's fence", "p", tagged(6, "product:1"), Fresh, WhyNone, FromFill},
		{"past FreshUntil", "other", expired(false), Stale, WhyExpired, FromFill},
		{"a tombstone past FreshUntil", "other", expired(true), Unusable, WhyExpired, FromFill},
	} {
		j := m.AcceptShared(c.key, c.entry, base, 0)
		if j.State != c.state || j.Why != c.why || j.Source != c.src {
			t.Errorf("%s: %v, want state %d, %v from %v", c.name, j, c.state, c.why, c.src)
		}
		if !strings.Contains(j.String(), c.why.String()) {
			t.Errorf("%s: %q does not say why", c.name, j)
		}
		if c.why == WhyOlderThanKey && !j.Fence.Equal(at(5)) || c.why == WhyBulk && (j.Prefix != "t=1|" || !j.Fence.Equal(at(5))) {
			t.Errorf("%s: the fence is not named: %+v", c.name, j)
		}
	}

	// A local item: trusted while the Bus is up; once it is down, only
	// within DownTTL of its fill.
	it := entry(6)
	it.FilledAt = base.Add(-2 * time.Minute)
	if j := m.LocalState(it, base); j.State != Fresh {
		t.Fatalf("a local item while the Bus is up: %v", j)
	}
	m.SetDown(true)
	if j := m.LocalState(it, base); j.State != Unusable || j.Why != WhyUntrusted {
		t.Fatalf("a local item filled before DownTTL while the Bus is down: %v, want untrusted", j)
	}
	it.FilledAt = base.Add(-time.Second)
	if j := m.LocalState(it, base); j.State != Fresh {
		t.Fatalf("a local item filled within DownTTL while the Bus is down: %v", j)
	}
}
