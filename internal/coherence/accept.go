package coherence

import (
	"fmt"
	"time"
)

// Copy is what a serving decision needs of an item or entry: its times and
// tags (driver.Meta's, the Cache's clock but Version, which is on the wall
// clock) and, for a local item, when it entered the local tier.
type Copy struct {
	// Version is driver.Meta.Version, zero when unknown.
	Version time.Time
	// FreshUntil and StaleUntil are on the Cache's clock.
	FreshUntil, StaleUntil time.Time
	// FilledAt is when the copy entered the local tier (zero for a shared
	// entry, or when unknown), LoadedAt when it was loaded or Set: the
	// Cache's clock (see Trust.Trusted).
	FilledAt, LoadedAt time.Time
	NotFound           bool
	Tags               []string
}

// State is how a copy may be served.
type State uint8

// The states of a copy.
const (
	// Unusable: absent, for the reason Judgement.Why gives.
	Unusable State = iota
	// Fresh: served as is.
	Fresh
	// Stale: only the fail-safe fallback (a value, never a tombstone).
	Stale
)

// Why says what decided a Judgement.
type Why uint8

// The reasons of a Judgement.
const (
	// WhyNone: nothing this instance knows covers the copy.
	WhyNone Why = iota
	// WhyOlderThanKey: read before the newest version this instance
	// served, wrote or was told of for its key (Judgement.Fence, from
	// Judgement.Source).
	WhyOlderThanKey
	// WhyBulk: read before a bulk invalidation of Judgement.Prefix ("" for
	// every key) at Judgement.Fence, plus skew.
	WhyBulk
	// WhyTagInvalidated: a tag of the copy was invalidated after its data
	// was read.
	WhyTagInvalidated
	// WhyTagExpired: a tag of the copy was expired after its data was
	// read: stale at most.
	WhyTagExpired
	// WhyUntrusted: the Bus is down and the copy entered the local tier
	// more than DownTTL ago.
	WhyUntrusted
	// WhyExpired: past its StaleUntil (or, for a tombstone or a fresh
	// read, its FreshUntil).
	WhyExpired
)

var whyText = [...]string{
	WhyNone:           "nothing covers it",
	WhyOlderThanKey:   "read before the key's newest version",
	WhyBulk:           "read before a bulk invalidation",
	WhyTagInvalidated: "a tag was invalidated after it was read",
	WhyTagExpired:     "a tag was expired after it was read",
	WhyUntrusted:      "the Bus is down and the copy is older than DownTTL",
	WhyExpired:        "expired",
}

// String describes w in a few words.
func (w Why) String() string {
	if int(w) < len(whyText) {
		return whyText[w]
	}
	return "unknown"
}

// Judgement is a serving decision and its reason: what an unexpected miss
// is explained by.
type Judgement struct {
	State State
	Why   Why
	// Fence is the version that covers the copy (WhyOlderThanKey,
	// WhyBulk), Source where a key's came from, Prefix a bulk
	// invalidation's target.
	Fence  time.Time
	Source Source
	Prefix string
}

// String tells the decision in one line, for logs and tests.
func (j Judgement) String() string {
	state := [...]string{Unusable: "absent", Fresh: "fresh", Stale: "stale"}[j.State]
	switch j.Why {
	case WhyOlderThanKey:
		return fmt.Sprintf("%s: %s (%s at %s)", state, j.Why, j.Source, j.Fence.Format(time.RFC3339Nano))
	case WhyBulk:
		return fmt.Sprintf("%s: %s (prefix of %d bytes at %s)", state, j.Why, len(j.Prefix), j.Fence.Format(time.RFC3339Nano))
	}
	return state + ": " + j.Why.String()
}

// AcceptShared is the one rule for what a read serves of a shared-tier
// entry, for Get, the flight's double-check, a refused leader's read back
// and batches alike, before the entry is copied into the local tier
// (DecideFill, which may still find it older than a copy filled since):
//
//   - an entry read before the newest version of its key that this
//     instance served, wrote or was told of, or before a bulk
//     invalidation of a prefix of its key plus skew, is absent (the next
//     load overwrites it);
//   - an entry of unknown version (zero) is absent under a bulk
//     invalidation only;
//   - a tag invalidated after the entry was read makes it absent, a tag
//     expired makes it stale at most;
//   - past its StaleUntil it is absent; past its FreshUntil, stale (a
//     tombstone is never stale: absent).
//
// now is the Cache's clock, e.FreshUntil and e.StaleUntil too (the caller
// converted them from the wall clock); e.Version is on the wall clock.
func (m *Model) AcceptShared(key string, e Copy, now time.Time, skew time.Duration) Judgement {
	if j := m.covering(key, e.Version, !e.Version.IsZero(), now, skew); j.Why != WhyNone {
		return j
	}
	return m.serve(e, now, skew, true)
}

// Covered reports whether a shared entry of key whose data was read at
// read (wall clock; known false when not known) is covered: read before
// its key's newest version in the ledger (no skew: a Set's own entry is
// read exactly at its version), or before a bulk fence of a prefix of its
// key plus skew. An entry of unknown version is covered by bulk fences
// only. now is the Cache's clock.
func (m *Model) Covered(key string, read time.Time, known bool, now time.Time, skew time.Duration) bool {
	return m.covering(key, read, known, now, skew).Why != WhyNone
}

// covering is Covered, with the fence that covers.
func (m *Model) covering(key string, read time.Time, known bool, now time.Time, skew time.Duration) Judgement {
	if known {
		if v, src, ok := m.Newest(key, now); ok && read.Truncate(time.Microsecond).Before(v) {
			return Judgement{Why: WhyOlderThanKey, Fence: v, Source: src}
		}
	}
	return m.Fences.covering(key, read, known, now, skew)
}

// SetWindow sets how long the ledger's records and the bulk fences live.
// Call it once, before use.
func (m *Model) SetWindow(d time.Duration) { m.Ledger.Window, m.Fences.Window = d, d }

// LocalState is the one rule for serving a local item, fresh or as the
// stale fallback: an untrusted item (the Bus is down, see Trust) is
// neither, nor is one a tag invalidation covers; one a tag expiry covers
// is stale at most. The Cache's local hit inlines its fresh case.
func (m *Model) LocalState(it Copy, now time.Time) Judgement {
	if m.Down() && !m.Trusted(it.FilledAt, it.LoadedAt, now) {
		return Judgement{Why: WhyUntrusted}
	}
	return m.serve(it, now, 0, false)
}

// serve applies the tag fences and the copy's own times.
func (m *Model) serve(e Copy, now time.Time, skew time.Duration, shared bool) Judgement {
	tags := TagsClear
	if len(e.Tags) != 0 && m.Tags.Live() {
		if shared {
			tags = m.Tags.Shared(e.Tags, e.Version, !e.Version.IsZero(), now, skew)
		} else {
			tags = m.Tags.Local(e.Tags, e.Version, now)
		}
	}
	switch {
	case tags == TagsInvalidated:
		return Judgement{Why: WhyTagInvalidated}
	case now.Before(e.FreshUntil) && tags == TagsClear:
		return Judgement{State: Fresh}
	case !e.NotFound && now.Before(e.StaleUntil):
		j := Judgement{State: Stale, Why: WhyExpired}
		if tags == TagsExpired {
			j.Why = WhyTagExpired
		}
		return j
	case tags == TagsExpired:
		return Judgement{Why: WhyTagExpired}
	}
	return Judgement{Why: WhyExpired}
}
