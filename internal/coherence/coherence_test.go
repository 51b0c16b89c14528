package coherence

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightcache/flightcache/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

var (
	base = time.Unix(1000, 0) // the Cache's clock, for expiry
	wall = time.Unix(2000, 0) // versions
)

func at(s int) time.Time { return wall.Add(time.Duration(s) * time.Second) }

func newModel(window time.Duration) *Model {
	m := new(Model)
	m.SetWindow(window)
	return m
}

func TestExplicitWriteOutdatesEveryTicketTakenBeforeItFinished(t *testing.T) {
	w := newModel(time.Minute)
	before := w.Begin("k")
	defer w.End("k", before)
	other := w.Begin("j")
	defer w.End("j", other)
	_ = w.Explicit("k", base, func() error { return nil })
	after := w.Begin("k")
	defer w.End("k", after)
	current := func(tk Ticket, key string) (ok bool) {
		w.Fill(tk, key, func(c bool) bool { ok = c; return false }, nil)
		return ok
	}
	if current(before, "k") {
		t.Fatal("a ticket taken before an explicit write is still current")
	}
	if !current(after, "k") || !current(other, "j") {
		t.Fatal("a ticket taken after the write, or of another key, is outdated")
	}
}

// The explicit write's record is the key's one record in the ledger: it
// carries the write's version (NoteKey) and its sequence number
// (Explicit), and a fill noted after it keeps both.
func TestExplicitWriteLeavesItsVersionAndNumberInTheKeysOneRecord(t *testing.T) {
	w := newModel(time.Minute)
	before := w.Begin("k")
	defer w.End("k", before)
	w.NoteKey("k", at(5), base, FromWrite)
	_ = w.Explicit("k", base, func() error { return nil })
	w.NoteKey("k", at(6), base, FromFill)
	if n := w.Ledger.Len(); n != 1 {
		t.Fatalf("the ledger holds %d records of one key", n)
	}
	if v, src, ok := w.Newest("k", base); !ok || !v.Equal(at(6)) || src != FromFill {
		t.Fatalf("Newest = %v %v %v, want the fill's version", v, src, ok)
	}
	w.Fill(before, "k", func(c bool) bool {
		if c {
			t.Fatal("a fill noted after the write cleared its number")
		}
		return false
	}, nil)
	// A record made by Explicit alone covers no entry.
	_ = w.Explicit("j", base, func() error { return nil })
	if w.Covered("j", at(0), true, base, 0) {
		t.Fatal("an explicit write's number alone covers an entry")
	}
}

func TestExplicitWriteThatPanicsStillOutdatesTicketsAndReleasesTheKey(t *testing.T) {
	w := newModel(time.Minute)
	tk := w.Begin("k")
	defer w.End("k", tk)
	func() {
		defer func() { _ = recover() }()
		_ = w.Explicit("k", base, func() error { panic("store bug") })
	}()
	var current bool
	w.Fill(tk, "k", func(c bool) bool { current = c; return false }, nil) // would deadlock if the lock leaked
	if current {
		t.Fatal("a panicking explicit write did not outdate the ticket")
	}
}

func TestBulkInvalidationOutdatesTicketsOfItsKeysOnly(t *testing.T) {
	w := newModel(time.Minute)
	in, out := w.Begin("t=1|id=4|loc=en"), w.Begin("t=1|id=42|loc=en")
	defer w.End("t=1|id=4|loc=en", in)
	defer w.End("t=1|id=42|loc=en", out)
	w.Bulk("t=1|id=4|", base)
	w.FillAll([]string{"t=1|id=4|loc=en", "t=1|id=42|loc=en"}, []Ticket{in, out}, func(current []bool) {
		if current[0] || !current[1] {
			t.Fatalf("current = %v, want [false true]", current)
		}
	}, func() {})
	// Many bulk invalidations of other prefixes, each noted again and
	// again, keep one record per prefix and outdate no other key.
	old := w.Begin("x")
	defer w.End("x", old)
	for i := range 200 {
		w.Bulk("unrelated"+strconv.Itoa(i%3)+"|", base)
	}
	if n := w.Fences.Len(); n != 4 {
		t.Fatalf("%d bulk records for 4 prefixes", n)
	}
	w.Fill(old, "x", func(c bool) bool {
		if !c {
			t.Fatal("bulk invalidations of other prefixes outdated a ticket")
		}
		return false
	}, nil)
	// A bulk invalidation's number alone covers no shared entry.
	if w.Covered("t=1|id=4|loc=en", time.Time{}, false, base, 0) {
		t.Fatal("a bulk invalidation's number alone covers an entry")
	}
}

// A record that leaves the ledger or the fences before a ticket is
// checked leaves its number behind: the ticket is outdated whatever its
// key, never taken for current.
func TestTicketsOlderThanAForgottenRecordAreOutdated(t *testing.T) {
	w := newModel(time.Minute)
	tk := w.Begin("k")
	defer w.End("k", tk)
	_ = w.Explicit("k", base, func() error { return nil })
	later := base.Add(time.Minute)
	w.NoteKey("other", at(0), later, FromWrite) // expires k's record
	if _, _, ok := w.Newest("k", later); ok {
		t.Fatal("the record did not expire")
	}
	w.Fill(tk, "k", func(c bool) bool {
		if c {
			t.Fatal("a ticket older than an expired explicit record is current")
		}
		return false
	}, nil)
	after := w.Begin("k")
	defer w.End("k", after)
	w.Fill(after, "k", func(c bool) bool {
		if !c {
			t.Fatal("a ticket taken after the record expired is outdated")
		}
		return false
	}, nil)

	b := newModel(time.Minute)
	bt := b.Begin("p|k")
	defer b.End("p|k", bt)
	b.Bulk("p|", base)
	long := string(make([]byte, 4096))   // fill MaxBulkBytes sooner
	for i := range MaxBulkBytes / 4096 { // drop p|'s record
		b.NoteBulk("q"+strconv.Itoa(i)+long, at(0), base)
	}
	if b.Fences.forgot.Load() == 0 {
		t.Fatal("p|'s record was not dropped")
	}
	b.Fill(bt, "p|k", func(c bool) bool {
		if c {
			t.Fatal("a ticket older than a dropped bulk record is current")
		}
		return false
	}, nil)
}

func TestLockRegistryHoldsOnlyKeysInProgress(t *testing.T) {
	w := newModel(time.Minute)
	for i := range 1000 {
		k := strconv.Itoa(i)
		w.End(k, w.Begin(k))
	}
	for i := range w.locks.shards {
		if n := len(w.locks.shards[i].m); n != 0 {
			t.Fatalf("shard %d holds %d entries after every operation ended", i, n)
		}
	}
}

func TestKeyFenceKeepsTheNewestVersionAndExpires(t *testing.T) {
	f := new(Model)
	f.SetWindow(time.Minute)
	if _, fresh, _ := f.NoteKey("k", at(5), base, FromWrite); !fresh {
		t.Fatal("the first fence of a key is not fresh")
	}
	for _, old := range []int{5, 4} {
		if prev, fresh, _ := f.NoteKey("k", at(old), base, FromWrite); fresh || !prev.Equal(at(5)) {
			t.Fatalf("version %d after 5: fresh %v, prev %v", old, fresh, prev)
		}
	}
	if !f.Covered("k", at(4), true, base, 0) || f.Covered("k", at(5), true, base, 0) {
		t.Fatal("a key fence covers what it must not, or not what it must")
	}
	if f.Covered("kk", at(0), true, base, 0) {
		t.Fatal("a key fence covers another key")
	}
	if f.Covered("k", at(0), false, base, 0) {
		t.Fatal("a key fence covers an entry of unknown age")
	}
	later := base.Add(time.Minute)
	if f.Covered("k", at(0), true, later, 0) {
		t.Fatal("an expired fence still covers")
	}
	if _, fresh, _ := f.NoteKey("k", at(1), later, FromWrite); !fresh {
		t.Fatal("an expired key still deduplicates")
	}
}

func TestKeyFencesCompareAtMicrosecondPrecision(t *testing.T) {
	f := new(Model)
	f.SetWindow(time.Hour)
	set := time.Unix(2000, 123456789)    // a Set's entry, read at this instant
	f.NoteKey("k", set, base, FromWrite) // its fence, as another instance gets it
	if f.Covered("k", set, true, base, 0) {
		t.Fatal("a Set's own entry is covered by its own fence")
	}
	if !f.Covered("k", set.Add(-time.Microsecond), true, base, 0) {
		t.Fatal("an entry read a microsecond before the Set is not covered")
	}
}

func TestBulkFencesMatchPrefixesAndEntriesOfUnknownAge(t *testing.T) {
	f := new(Model)
	f.SetWindow(time.Minute)
	f.NoteBulk("t=1|id=4|", wall, base)
	f.NoteBulk("t=2|", wall, base)
	for key, want := range map[string]bool{
		"t=1|id=4|loc=en": true, "t=1|id=4|": true, "t=1|id=42|loc=en": false,
		"t=2|id=9": true, "t=3|id=4|": false, "t=1|": false,
	} {
		if got := f.Covered(key, wall.Add(-time.Nanosecond*1000), true, base, 0); got != want {
			t.Errorf("Covered(%q) = %v, want %v", key, got, want)
		}
	}
	if f.Covered("t=2|x", wall, true, base, 0) {
		t.Error("a bulk fence covers an entry read at its version, without skew")
	}
	if !f.Covered("t=2|x", wall.Add(5*time.Millisecond), true, base, 10*time.Millisecond) {
		t.Error("a bulk fence does not cover an entry read within the skew after it")
	}
	if !f.Covered("t=2|x", time.Time{}, false, base, 0) {
		t.Error("a bulk fence does not cover an entry of unknown age")
	}
	f.NoteBulk("", wall, base)
	if !f.Covered("anything", wall.Add(-time.Second), true, base, 0) {
		t.Error("the all-keys fence does not cover every key")
	}
}

func TestFencesAreBoundedPerKindAndKeyFencesNeverPushOutBulkOnes(t *testing.T) {
	f := new(Model)
	f.SetWindow(time.Hour)
	f.NoteBulk("", wall, base) // a Clear
	var dropped int64
	for i := range MaxKeyFences + 10*ledgerShards {
		_, _, d := f.NoteKey(strconv.Itoa(i), wall, base, FromWrite)
		dropped = max(dropped, d)
	}
	keys, bulk := f.Ledger.Len(), f.Fences.Len()
	if keys > MaxKeyFences || dropped == 0 {
		t.Fatalf("%d key fences (dropped %d), want at most %d", keys, dropped, MaxKeyFences)
	}
	if bulk != 1 || !f.Covered("any", wall.Add(-time.Second), true, base, 0) {
		t.Fatal("key fences pushed the Clear's fence out")
	}
	// Fills do not count as explicit drops: they need no warning.
	g := new(Model)
	g.SetWindow(time.Hour)
	for i := range MaxKeyFences + 10*ledgerShards {
		if _, _, d := g.NoteKey(strconv.Itoa(i), wall, base, FromFill); d != 0 {
			t.Fatalf("a fill's fence dropped early counted as an explicit drop (%d)", d)
		}
	}
	// Bytes bound the bulk fences too: long prefixes fill MaxBulkBytes
	// before MaxBulkFences.
	long := string(make([]byte, 4096))
	for i := range MaxBulkBytes/4096 + 10 {
		f.NoteBulk(strconv.Itoa(i)+long, wall, base)
	}
	if f.Fences.bytes > MaxBulkBytes {
		t.Fatalf("bulk fences hold %d bytes, above the bound %d", f.Fences.bytes, MaxBulkBytes)
	}
	if bulk := f.Fences.Len(); bulk != len(f.Fences.m) {
		t.Fatalf("bulk count %d, want %d", bulk, len(f.Fences.m))
	}
	// The bound counts prefixes, not notes: one prefix invalidated more
	// often than MaxBulkFences keeps one record, and drops no other.
	g2 := newModel(time.Hour)
	g2.NoteBulk("a|", at(0), base)
	for i := range MaxBulkFences + 10 {
		g2.NoteBulk("b|", wall.Add(time.Duration(i+1)*time.Microsecond), base)
	}
	if n := g2.Fences.Len(); n != 2 || !g2.Covered("a|k", at(-1), true, base, 0) {
		t.Fatalf("%d bulk records after notes of two prefixes; a|'s must stay", n)
	}
}

// The monotonic-read bound is a number of keys: a key filled again and
// again keeps one fence, updated in place, and MaxFillFences distinct keys
// filled, each several times, are all still fenced.
func TestFillFencesAreBoundedByKeysNotByNotes(t *testing.T) {
	f := new(Model)
	f.SetWindow(time.Hour)
	for round := range 3 {
		for i := range MaxFillFences {
			if _, fresh, _ := f.NoteKey("key:"+strconv.Itoa(i), at(1+round), base, FromFill); !fresh {
				t.Fatalf("round %d, key %d: a newer fill did not raise the fence", round, i)
			}
		}
	}
	if keys := f.Ledger.Len(); keys != MaxFillFences {
		t.Fatalf("%d key fences after filling %d keys 3 times, want one per key", keys, MaxFillFences)
	}
	for i := range MaxFillFences {
		if !f.Covered("key:"+strconv.Itoa(i), at(2), true, base, 0) {
			t.Fatalf("key %d of the %d most recently filled lost its fence", i, MaxFillFences)
		}
	}
	// Past the bound the table stays within it, and the newest fill is
	// fenced.
	for i := range 1000 {
		f.NoteKey("more:"+strconv.Itoa(i), at(9), base, FromFill)
	}
	if keys := f.Ledger.Len(); keys != MaxFillFences {
		t.Fatalf("%d key fences, want the bound %d", keys, MaxFillFences)
	}
	if !f.Covered("more:999", at(8), true, base, 0) {
		t.Fatal("the newest fill lost its fence")
	}
	if f.Covered("key:1", at(0), true, base.Add(2*time.Hour), 0) {
		t.Fatal("a fence outlived its window")
	}
}

func TestFillNeverGoesBackToOlderData(t *testing.T) {
	var m Model
	m.SetWindow(time.Hour)
	r := func(s int) Read { return Read{Version: at(s)} }
	tier := func(s int) Read { rd := r(s); rd.FromTier = true; return rd }
	held := func(s int, fresh bool) Held {
		return Held{Present: true, Fresh: fresh, Version: at(s)}
	}
	for _, c := range []struct {
		name    string
		current bool
		read    Read
		held    Held
		want    FillVerdict
	}{
		{"nothing held", true, r(5), Held{}, FillWrite},
		{"newer than held", true, r(6), held(5, true), FillWrite},
		{"fresh held copy is newer", true, r(4), held(6, true), FillServeHeld},
		{"load, outdated ticket, older held copy", false, r(7), held(6, true), FillSkip},
		{"load, outdated ticket, newer held copy", false, r(5), held(7, true), FillSkip},
		{"shared read, outdated ticket, older held copy", false, tier(7), held(6, true), FillDropHeld},
		{"shared read, outdated ticket, newer held copy", false, tier(5), held(7, true), FillSkip},
	} {
		if got := m.DecideFill("k-"+c.name, c.current, c.read, c.held, base); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// The fence outlives the held copy: once an item read at 6 was filled,
	// one read at 4 is older, whatever the local tier holds now.
	if got := m.DecideFill("k", true, r(6), Held{}, base); got != FillWrite {
		t.Fatalf("first fill: %v", got)
	}
	if got := m.DecideFill("k", true, r(4), Held{}, base); got != FillOlder {
		t.Fatalf("a fill older than one already made: %v, want FillOlder", got)
	}
	if !m.Covered("k", at(4), true, base, 0) || m.Covered("k", at(6), true, base, 0) {
		t.Fatal("a fill's read time does not fence older shared entries")
	}
	// A load under an outdated ticket (this instance's own explicit write
	// finished since it was taken) writes and notes nothing, whatever its
	// read time: on the writer's instance the write wins.
	m.NoteKey("k", at(7), base, FromWrite)
	if got := m.DecideFill("k", false, r(8), Held{}, base); got != FillSkip {
		t.Fatalf("a load's fill under an outdated ticket: %v, want FillSkip", got)
	}
	if m.Covered("k", at(7), true, base, 0) {
		t.Fatal("a load outdated by this instance's write raised the key's fence")
	}
	// A shared read under an outdated ticket serves what the tier held,
	// its newest state: later reads must not go back past it.
	if got := m.DecideFill("k", false, tier(8), Held{}, base); got != FillSkip {
		t.Fatalf("a shared read's fill under an outdated ticket: %v, want FillSkip", got)
	}
	if !m.Covered("k", at(7), true, base, 0) {
		t.Fatal("a shared read served under an outdated ticket did not raise the key's fence")
	}
	m.Close()
	if got := m.DecideFill("k", true, r(9), Held{}, base); got != FillSkip {
		t.Fatalf("a fill after Close: %v, want FillSkip", got)
	}
}

// A load that began before an invalidation from another instance, and
// served its callers a value read after the invalidated write, stores
// nothing but records the version it served: the invalidated write's older
// shared entry is then absent, so those callers' next read does not go back
// to it. (The interleaving of TestConcurrentWritesAndReadsNeverRegressPerReader
// that served 92, then the Set of 91.)
func TestALoadServedUnderAnOutdatedTicketRaisesTheVersionUnlessThisInstanceWrote(t *testing.T) {
	var m Model
	m.SetWindow(time.Hour)
	load := Read{Version: at(8)}
	m.NoteKey("k", at(7), base, FromInvalidation) // the Set of 91, heard of
	if got := m.DecideFill("k", false, load, Held{}, base); got != FillSkip {
		t.Fatalf("a load under an outdated ticket: %v, want FillSkip", got)
	}
	if !m.Covered("k", at(7), true, base, 0) {
		t.Fatal("after a load served a value read at 8, the invalidated write's entry read at 7 is still served")
	}
	if m.Covered("k", at(8), true, base, 0) {
		t.Fatal("the load's own version is covered")
	}
	// On the writer's own instance the write stays the newest version.
	m.NoteKey("w", at(7), base, FromWrite)
	m.DecideFill("w", false, load, Held{}, base)
	if m.Covered("w", at(7), true, base, 0) {
		t.Fatal("a load outdated by this instance's Set made the Set's own entry absent")
	}
	// An older load raises nothing.
	m.NoteKey("o", at(9), base, FromInvalidation)
	m.DecideFill("o", false, load, Held{}, base)
	if !m.Covered("o", at(8), true, base, 0) || m.Covered("o", at(9), true, base, 0) {
		t.Fatal("an older load moved the key's version")
	}
}

func TestOnlyAFencedWriteReachesTheSharedTierInClusterMode(t *testing.T) {
	var m Model
	for _, c := range []struct {
		route    WriteRoute
		tierDown bool
		want     bool
	}{
		{Direct, false, true}, {Direct, true, false},
		{Leased, false, true}, {Leased, true, false},
		{Unleased, false, false},
	} {
		if got := m.SharedWritable(c.route, c.tierDown); got != c.want {
			t.Errorf("SharedWritable(%v, down %v) = %v, want %v", c.route, c.tierDown, got, c.want)
		}
	}
	m.Close()
	if m.SharedWritable(Direct, false) || m.SharedWritable(Leased, false) {
		t.Fatal("a write after Close may reach the shared tier")
	}
}

func TestWhileTheBusIsDownLocalItemsAreTrustedForDownTTLFromTheirFill(t *testing.T) {
	tr := Trust{DownTTL: time.Second}
	old := base.Add(-time.Hour)
	if !tr.Trusted(old, old, base) {
		t.Fatal("an item is untrusted with the Bus up")
	}
	tr.SetDown(true)
	if tr.Trusted(base.Add(-2*time.Second), old, base) {
		t.Fatal("an item filled 2s ago is trusted with a 1s DownTTL")
	}
	if !tr.Trusted(base.Add(-500*time.Millisecond), old, base) {
		t.Fatal("an item filled 0.5s ago is untrusted: its fill time, not its read time, counts")
	}
	if tr.Trusted(time.Time{}, old, base) || !tr.Trusted(time.Time{}, base, base) {
		t.Fatal("without a fill time, the read time does not count")
	}
}

func TestVersionsFromTheFutureAreTakenAsNow(t *testing.T) {
	now := wall
	if v, clamped := Clamp(now.Add(time.Hour), now, 10*time.Millisecond); !clamped || !v.Equal(now) {
		t.Fatalf("Clamp(+1h) = %v, %v", v, clamped)
	}
	if v, clamped := Clamp(now.Add(5*time.Millisecond), now, 10*time.Millisecond); clamped || !v.Equal(now.Add(5*time.Millisecond)) {
		t.Fatalf("Clamp(+5ms) = %v, %v; within the skew it stays", v, clamped)
	}
}

func TestRedoRetriesWithBackoffUntilNothingIsPending(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	done := make(chan Pending, 4)
	var tries atomic.Int64
	r := &Redo{Min: time.Millisecond, Max: 4 * time.Millisecond, Do: func(p Pending) error {
		tries.Add(1)
		if fail.Load() {
			return errors.New("still down")
		}
		done <- p
		return nil
	}}
	defer r.Close()
	r.Add(Pending{Kind: 1, Target: "k", Version: at(1)})
	for tries.Load() < 3 {
		r.Kick() // no sleep: each kick cuts a backoff short
	}
	if r.Len() != 1 {
		t.Fatalf("%d pending while the redo fails, want 1", r.Len())
	}
	fail.Store(false)
	if p := <-done; p.Target != "k" {
		t.Fatalf("redone %+v", p)
	}
	for r.Len() != 0 {
		r.Kick()
	}
}

// A later write of a target replaces the pending one whole: when its own
// shared update succeeded, the entry it left is the newer value and must
// not be removed.
func TestRedoKeepsOneWritePerTargetAndIsBounded(t *testing.T) {
	block := make(chan struct{})
	var once sync.Once
	r := &Redo{Min: time.Hour, Max: time.Hour, Do: func(Pending) error {
		once.Do(func() { <-block })
		return errors.New("down")
	}}
	defer func() { close(block); r.Close() }()
	r.Add(Pending{Kind: 1, Target: "k", Version: at(1), DeleteShared: true})
	r.Add(Pending{Kind: 1, Target: "k", Version: at(2)})
	r.mu.Lock()
	p := r.pending[pendingID{1, "k"}]
	r.mu.Unlock()
	if r.Len() != 1 || !p.Version.Equal(at(2)) || p.DeleteShared {
		t.Fatalf("after two writes of k: %d pending, %+v; want one, the newer, which left its entry in the shared tier", r.Len(), p)
	}
	// An older write that reaches Add late (its Set returned after the
	// newer one's) must not replace the newer one: the redo would then
	// remove the newer entry from the shared tier, or announce the older
	// version only, and other instances would serve the older value.
	r.Add(Pending{Kind: 1, Target: "k", Version: at(1), DeleteShared: true})
	r.mu.Lock()
	p = r.pending[pendingID{1, "k"}]
	r.mu.Unlock()
	if r.Len() != 1 || !p.Version.Equal(at(2)) || p.DeleteShared {
		t.Fatalf("an older write added after a newer one: %d pending, %+v; want the newer kept", r.Len(), p)
	}
	r.Add(Pending{Kind: 2, Bulk: true, Target: "p|", Version: at(0)})
	dropped := false
	for i := range MaxPending {
		dropped = r.Add(Pending{Kind: 1, Target: strconv.Itoa(i), Version: at(3 + i)}) || dropped
	}
	if !dropped || r.Len() != MaxPending {
		t.Fatalf("dropped %v, %d pending; want the oldest dropped at %d", dropped, r.Len(), MaxPending)
	}
	r.mu.Lock()
	_, bulkKept := r.pending[pendingID{2, "p|"}]
	_, oldestKey := r.pending[pendingID{1, "k"}]
	r.mu.Unlock()
	if !bulkKept || oldestKey {
		t.Fatalf("bulk kept %v, oldest key kept %v: key writes must go before bulk ones", bulkKept, oldestKey)
	}
	r.Succeeded(Pending{Kind: 2, Target: "p|", Version: at(0)})
	if r.Len() != MaxPending-1 {
		t.Fatalf("a succeeded later write did not clear its pending one")
	}
}

// A shared read asks the bulk fences without a lock: it never waits for a
// bulk invalidation being noted (here, bulkMu held throughout), and sees
// every fence noted before, across the view's rebuilds.
func TestBulkFencesAreReadWithoutALock(t *testing.T) {
	f := new(Model)
	f.SetWindow(time.Hour)
	const n = 3*bulkDelta + 5
	for i := range n {
		f.NoteBulk("p"+strconv.Itoa(i)+":", at(i), base)
	}
	f.NoteBulk("p0:", at(n), base) // a newer fence of a prefix already in the base
	f.bulkMu.Lock()
	defer f.bulkMu.Unlock()
	for i := range n {
		key := "p" + strconv.Itoa(i) + ":k"
		if !f.Covered(key, at(i-1), true, base, 0) {
			t.Fatalf("fence %d does not cover an entry read before it", i)
		}
		if i > 0 && f.Covered(key, at(i+1), true, base, 0) {
			t.Fatalf("fence %d covers an entry read after it", i)
		}
	}
	if !f.Covered("p0:k", at(n-1), true, base, 0) {
		t.Fatal("a prefix's newer fence is not the one applied")
	}
	if f.Covered("p1:k", at(0), true, base.Add(2*time.Hour), 0) {
		t.Fatal("an expired bulk fence still covers")
	}
	if f.Covered("q:k", at(0), true, base, 0) {
		t.Fatal("a key under no fenced prefix is covered")
	}
}

// Fills of more keys than the bound, from several goroutines, leave the
// table at its bound, and the last key each one filled fenced.
func TestConcurrentFillsStayWithinTheBound(t *testing.T) {
	f := new(Model)
	f.SetWindow(time.Hour)
	const goroutines, perG = 4, MaxFillFences/4 + 1000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perG {
				f.NoteKey(strconv.Itoa(g)+":"+strconv.Itoa(i), at(1), base, FromFill)
			}
		}()
	}
	wg.Wait()
	// Two notes may trim at once: the table may end a few below its
	// bound, never above it.
	if keys := f.Ledger.Len(); keys > MaxFillFences || keys < MaxFillFences-goroutines {
		t.Fatalf("%d key fences, want the bound %d", keys, MaxFillFences)
	}
	for g := range goroutines {
		if !f.Covered(strconv.Itoa(g)+":"+strconv.Itoa(perG-1), at(0), true, base, 0) {
			t.Fatalf("goroutine %d's last fill lost its fence", g)
		}
	}
}

func TestAnInvalidationDropsOnlyCopiesReadBeforeItPlusSkew(t *testing.T) {
	skew := 10 * time.Millisecond
	for _, c := range []struct {
		read time.Duration // after the version
		want bool
	}{{-time.Second, true}, {0, true}, {9 * time.Millisecond, true}, {skew, false}, {time.Second, false}} {
		if got := Invalidates(wall, wall.Add(c.read), skew); got != c.want {
			t.Errorf("a copy read %v after the version: dropped %v, want %v", c.read, got, c.want)
		}
	}
}
