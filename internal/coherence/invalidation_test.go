package coherence

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// memLocal is a local tier and a flight table as the invalidation side
// sees them: versions per key, and what was forgotten.
type memLocal struct {
	mu        sync.Mutex
	items     map[string]time.Time
	forgotten []string // "k:" + key, "p:" + prefix
}

func newLocal(items map[string]time.Time) *memLocal {
	return &memLocal{items: items}
}

func (l *memLocal) Held(key string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.items[key]
	return v, ok
}

func (l *memLocal) Drop(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.items, key)
}

func (l *memLocal) Each(fn func(string, time.Time) bool) (n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, v := range l.items {
		if fn(k, v) {
			delete(l.items, k)
			n++
		}
	}
	return n
}

func (l *memLocal) Forget(target string, prefix bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if prefix {
		l.forgotten = append(l.forgotten, "p:"+target)
	} else {
		l.forgotten = append(l.forgotten, "k:"+target)
	}
}

func (l *memLocal) has(key string) bool { _, ok := l.Held(key); return ok }

// A key invalidation received drops only the copy read before it (plus
// skew), fences the key, outdates the key's loads in progress and forgets
// its flight; a repeat or an older one drops nothing newer and counts as
// ignored.
func TestReceivedKeyInvalidationDropsOlderCopiesAndOutdatesLoads(t *testing.T) {
	m := newModel(time.Minute)
	skew := 10 * time.Millisecond
	l := newLocal(map[string]time.Time{"old": at(1), "new": at(9)})
	load := m.Begin("old")
	defer m.End("old", load)
	r := m.Receive(InvKey, "old", at(5), at(100), base, skew, l)
	if !r.Applied || l.has("old") {
		t.Fatalf("%+v: the copy read before the invalidation was not dropped", r)
	}
	if !m.Covered("old", at(4), true, base, 0) {
		t.Fatal("the received invalidation does not fence the key's shared entries")
	}
	m.Fill(load, "old", func(c bool) bool {
		if c {
			t.Fatal("a load in progress of the key is still current")
		}
		return false
	}, nil)
	if r := m.Receive(InvKey, "new", at(5), at(100), base, skew, l); r.Applied || !l.has("new") {
		t.Fatalf("%+v: a copy read after the invalidation was dropped or it counted as applied", r)
	}
	if r := m.Receive(InvKey, "old", at(3), at(100), base, skew, l); r.Applied {
		t.Fatalf("%+v: an older repeat counted as applied", r)
	}
	if !strings.Contains(strings.Join(l.forgotten, ","), "k:old") {
		t.Fatalf("forgotten %v: the key's flight was not forgotten", l.forgotten)
	}
}

// A version ahead of this host's clock is taken as now: it does not fence
// the future.
func TestReceivedInvalidationFromTheFutureIsTakenAsNow(t *testing.T) {
	m := newModel(time.Minute)
	l := newLocal(map[string]time.Time{})
	r := m.Receive(InvKey, "k", at(3600), at(0), base, 10*time.Millisecond, l)
	if !r.Clamped {
		t.Fatal("a version an hour ahead was not clamped")
	}
	if m.Covered("k", at(1), true, base, 0) {
		t.Fatal("an invalidation from the future fences values read after now")
	}
}

// A bulk invalidation received walks the local tier under its prefix
// only while the Bus is up; while it is down (a replay before BusUp) it
// only fences and outdates the loads in progress at once, leaving the
// walk to the resynchronisation.
func TestReceivedBulkInvalidationWalksOnlyWhileTheBusIsUp(t *testing.T) {
	m := newModel(time.Minute)
	l := newLocal(map[string]time.Time{"p|a": at(1), "p|b": at(9), "q|a": at(1)})
	load := m.Begin("p|x")
	defer m.End("p|x", load)
	r := m.Receive(InvBulk, "p|", at(5), at(100), base, 0, l)
	if !r.Applied || l.has("p|a") || !l.has("p|b") || !l.has("q|a") {
		t.Fatalf("%+v, left %v: want only p|a dropped", r, l.items)
	}
	m.Fill(load, "p|x", func(c bool) bool {
		if c {
			t.Fatal("a load in progress under the prefix is still current")
		}
		return false
	}, nil)

	m.SetDown(true)
	l2 := newLocal(map[string]time.Time{"r|a": at(1)})
	down := m.Begin("r|x")
	defer m.End("r|x", down)
	if r := m.Receive(InvBulk, "r|", at(5), at(100), base, 0, l2); !r.Applied || !l2.has("r|a") {
		t.Fatalf("%+v: while the Bus is down the local tier was walked, or the fresh fence not counted", r)
	}
	if !m.Covered("r|a", at(4), true, base, 0) {
		t.Fatal("a replayed bulk invalidation does not fence shared entries")
	}
	m.Fill(down, "r|x", func(c bool) bool {
		if c {
			t.Fatal("a replay while the Bus is down did not outdate a load in progress at once")
		}
		return false
	}, nil)
	// BusUp: the resynchronisation empties the local tier, outdates every
	// load in progress, and only then trusts the local tier again.
	l2.items["s|new"] = at(99)
	inflight := m.Begin("s|y")
	defer m.End("s|y", inflight)
	m.Resync(at(100).Add(24*time.Hour), base, l2)
	if len(l2.items) != 0 || m.Down() {
		t.Fatalf("after Resync: %v left, down %v", l2.items, m.Down())
	}
	m.Fill(inflight, "s|y", func(c bool) bool {
		if c {
			t.Fatal("a load in progress survived the resynchronisation")
		}
		return false
	}, nil)
}

// A tag invalidation received is compared with local items' versions
// plus skew, never moves the fence back (a replay), forgets every flight,
// and an ExpireTag leaves the values stale.
func TestReceivedTagInvalidationAddsTheSkewLocallyAndNeverMovesBack(t *testing.T) {
	m := newModel(time.Minute)
	m.Tags.Window = time.Minute
	skew := 10 * time.Millisecond
	l := newLocal(nil)
	if r := m.Receive(InvTag, "t", at(5), at(100), base, skew, l); !r.Applied {
		t.Fatal("a first tag invalidation counted as ignored")
	}
	tags := []string{"t"}
	if m.Tags.Local(tags, at(5).Add(5*time.Millisecond), base) != TagsInvalidated {
		t.Fatal("a local item read within the skew after a received fence is not covered")
	}
	if m.Tags.Local(tags, at(5).Add(20*time.Millisecond), base) != TagsClear {
		t.Fatal("a local item read after the fence plus skew is covered")
	}
	if r := m.Receive(InvTag, "t", at(4), at(100), base, skew, l); r.Applied {
		t.Fatal("an older replay moved the tag's fence")
	}
	if m.Receive(InvTagExpire, "u", at(5), at(100), base, skew, l); m.Tags.Local([]string{"u"}, at(4), base) != TagsExpired {
		t.Fatal("an expired tag does not leave its values stale")
	}
	if len(l.forgotten) == 0 || l.forgotten[0] != "p:" {
		t.Fatalf("forgotten %v: a tag fence did not forget every flight", l.forgotten)
	}
}

// This instance's own bulk invalidation fences the prefix before it walks
// the local tier.
func TestInvalidateBulkFencesThenDropsOlderItems(t *testing.T) {
	m := newModel(time.Minute)
	l := newLocal(map[string]time.Time{"p|a": at(1), "p|b": at(9)})
	m.InvalidateBulk("p|", at(5), base, 0, l)
	if l.has("p|a") || !l.has("p|b") || !m.Covered("p|z", at(4), true, base, 0) {
		t.Fatalf("left %v; the prefix must be fenced and only older items dropped", l.items)
	}
}

// An announced write is redone until the others heard of it, the newest
// per target; only a key write whose shared update failed removes the
// shared entry in its redo; a later successful write forgets the pending
// one.
func TestAnnouncedKeepsTheNewestPendingWritePerTarget(t *testing.T) {
	r := &Redo{Do: func(Pending) error { return errors.New("down") }, Min: time.Hour, Max: time.Hour}
	defer r.Close()
	r.Announced(Pending{Target: "k", Version: at(2), DeleteShared: true}, false, false)
	r.Announced(Pending{Target: "k", Version: at(1), DeleteShared: true}, false, true) // older, out of order
	r.mu.Lock()
	p := r.pending[pendingID{0, "k"}]
	r.mu.Unlock()
	if r.Len() != 1 || !p.Version.Equal(at(2)) || p.DeleteShared {
		t.Fatalf("pending %+v: want the newer write, whose shared update went through", p)
	}
	r.Announced(Pending{Target: "j", Version: at(1), DeleteShared: true}, true, true)
	r.Announced(Pending{Kind: 2, Bulk: true, Target: "p|", Version: at(1), DeleteShared: true}, false, true)
	r.mu.Lock()
	j, b := r.pending[pendingID{0, "j"}], r.pending[pendingID{2, "p|"}]
	r.mu.Unlock()
	if !j.DeleteShared || b.DeleteShared {
		t.Fatalf("j %+v, bulk %+v: only a key write whose shared update failed removes its entry", j, b)
	}
	r.Announced(Pending{Target: "k", Version: at(3)}, true, false)
	if r.Len() != 2 {
		t.Fatalf("%d pending: a later write that went through must forget k's", r.Len())
	}
}

// A received tag fence is compared as a bulk fence is: a shared entry
// read before the fence's version plus the skew is refused by both, one
// read after it by neither, and AcceptShared says which fence refused it.
func TestReceivedTagAndBulkFencesCoverTheSameSharedEntries(t *testing.T) {
	skew := 10 * time.Millisecond
	m := newModel(time.Minute)
	m.Tags.Window = time.Minute
	l := newLocal(nil)
	m.Receive(InvBulk, "b|", at(5), at(100), base, skew, l)
	m.Receive(InvTag, "t", at(5), at(100), base, skew, l)
	for _, d := range []time.Duration{-time.Millisecond, 0, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond} {
		read := at(5).Add(d)
		e := Copy{Version: read, FreshUntil: base.Add(time.Minute), StaleUntil: base.Add(time.Minute)}
		bulk := m.AcceptShared("b|k", e, base, skew)
		e.Tags = []string{"t"}
		tag := m.AcceptShared("t|k", e, base, skew)
		if (bulk.State == Unusable) != (tag.State == Unusable) {
			t.Fatalf("read %v after the fence: bulk %v, tag %v", d, bulk, tag)
		}
		if want := d < skew; (tag.State == Unusable) != want {
			t.Fatalf("read %v after the fence: %v, want refused %v", d, tag, want)
		}
		if tag.State == Unusable && (bulk.Why != WhyBulk || tag.Why != WhyTagInvalidated) {
			t.Fatalf("refused for %v and %v", bulk.Why, tag.Why)
		}
	}
}
