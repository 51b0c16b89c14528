package chaos

import (
	"strings"
	"testing"
	"time"
)

var testBounds = Bounds{
	Delivery: 100 * time.Millisecond, BusDown: 500 * time.Millisecond, Recovery: 500 * time.Millisecond,
	Read: time.Second, Write: time.Second, Fencing: true,
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func write(instance int, key string, version int64, start, end int) Op {
	return Op{Instance: instance, Key: key, Kind: Write, Write: WriteSet, Version: version, Start: ms(start), End: ms(end)}
}

func read(instance int, key string, version int64, start, end int) Op {
	return Op{Instance: instance, Key: key, Kind: Read, Version: version, Found: true, BodyKey: key, Start: ms(start), End: ms(end)}
}

func raw(key string, version int64, start int) Op {
	return Op{Instance: -1, Key: key, Kind: RawRead, Version: version, Found: true, BodyKey: key, Start: ms(start), End: ms(start + 1)}
}

// Each invariant has a history that breaks it and a close one that does
// not: Check must tell them apart, and count the violation in the right
// row.
func TestCheckFindsEachInvariantsViolationAndOnlyThat(t *testing.T) {
	pause := []Fault{{Name: "pause", Start: ms(1000), End: ms(4000), BusDown: true}}
	slow := []Fault{{Name: "slow", Start: ms(1000), End: ms(4000)}}
	scripts := []Fault{{Name: "scripts", Start: ms(1000), End: ms(4000), BulkDown: true}}
	bulk := func(how string, version int64, start, end int) Op {
		w := write(0, "k", version, start, end)
		w.Write = how
		return w
	}
	cases := []struct {
		name   string
		ops    []Op
		faults []Fault
		fenced bool // Bounds.Fencing
		want   map[Invariant]int
		row    string // where the violations are counted
	}{
		{name: "the writer reads its own write", ops: []Op{write(0, "k", 2, 0, 10), read(0, "k", 2, 11, 12)}},
		{name: "the writer reads an older version after its ack", ops: []Op{write(0, "k", 2, 0, 10), read(0, "k", 1, 11, 12)},
			want: map[Invariant]int{ReadYourWrites: 1}, row: noFault},
		{name: "another instance within the delivery bound", ops: []Op{write(0, "k", 2, 0, 10), read(1, "k", 1, 100, 101)}},
		{name: "another instance past the delivery bound", ops: []Op{write(0, "k", 2, 0, 10), read(1, "k", 1, 111, 112)},
			want: map[Invariant]int{BoundedStaleness: 1}, row: noFault},
		{name: "a read that started before the ack", ops: []Op{write(0, "k", 2, 0, 10), read(1, "k", 1, 9, 500)}},
		{name: "a write during a fault is allowed the bus-down bound", faults: pause,
			ops: []Op{write(0, "k", 2, 1100, 1200), read(1, "k", 1, 1700, 1701)}},
		{name: "but not the whole fault", faults: pause,
			ops:  []Op{write(0, "k", 2, 1100, 1200), read(1, "k", 1, 2000, 2001)},
			want: map[Invariant]int{BoundedStaleness: 1}, row: "pause"},
		{name: "nor beyond the recovery after it", faults: pause,
			ops:  []Op{write(0, "k", 2, 1100, 1200), read(1, "k", 1, 4400, 4401), read(1, "k", 1, 4600, 4601)},
			want: map[Invariant]int{BoundedStaleness: 1}, row: "pause"},
		{name: "a fault that leaves the buses up allows nothing more", faults: slow,
			ops:  []Op{write(0, "k", 2, 1100, 1200), read(1, "k", 1, 1700, 1701)},
			want: map[Invariant]int{BoundedStaleness: 1}, row: "slow"},
		{name: "a prefix invalidation during a fault that keeps bulk ones unannounced is allowed the bus-down bound", faults: scripts,
			ops: []Op{bulk(WritePrefix, 2, 1100, 1200), read(1, "k", 1, 1700, 1701)}},
		{name: "so is a productd PUT, and the recovery after the fault", faults: scripts,
			ops: []Op{bulk(WritePut, 2, 3700, 3800), read(1, "k", 1, 4400, 4401)}},
		{name: "but a key's write is announced: that fault allows it nothing more", faults: scripts,
			ops:  []Op{bulk(WriteSet, 2, 1100, 1200), read(1, "k", 1, 1700, 1701)},
			want: map[Invariant]int{BoundedStaleness: 1}, row: "scripts"},
		{name: "a write just before a fault is allowed the bus-down bound", faults: pause,
			ops: []Op{write(0, "k", 2, 900, 950), read(1, "k", 1, 1400, 1401)}},
		{name: "a write long before a fault is not", faults: pause,
			ops:  []Op{write(0, "k", 2, 100, 200), read(1, "k", 1, 1100, 1101)},
			want: map[Invariant]int{BoundedStaleness: 1}, row: "pause"},
		{name: "reads that do not overlap go forward", ops: []Op{read(0, "k", 2, 0, 10), read(0, "k", 3, 20, 30)}},
		{name: "a read goes back after another ended", ops: []Op{read(0, "k", 2, 0, 10), read(0, "k", 1, 20, 30)},
			want: map[Invariant]int{MonotonicReads: 1}, row: noFault},
		{name: "overlapping reads may disagree", ops: []Op{read(0, "k", 2, 0, 25), read(0, "k", 1, 20, 30)}},
		{name: "reads on two instances may disagree", ops: []Op{read(0, "k", 2, 0, 10), read(1, "k", 1, 20, 30)}},
		{name: "Redis holds the newest write", fenced: true, ops: []Op{write(0, "k", 2, 0, 10), raw("k", 2, 200)}},
		{name: "an old write landed in Redis", fenced: true, ops: []Op{write(0, "k", 2, 0, 10), raw("k", 1, 200)},
			want: map[Invariant]int{NoOldWriteLands: 1}, row: noFault},
		{name: "Redis cannot delete by prefix", fenced: true,
			ops: []Op{{Instance: 0, Key: "k", Kind: Write, Write: WritePrefix, Version: 2, End: ms(10)}, raw("k", 1, 200)}},
		{name: "a PUT deletes its row's entry: an older one must not land after it", fenced: true,
			ops:  []Op{bulk(WritePut, 2, 0, 10), raw("k", 1, 200)},
			want: map[Invariant]int{NoOldWriteLands: 1}, row: noFault},
		{name: "fencing is not checked without a Coordinator", ops: []Op{write(0, "k", 2, 0, 10), raw("k", 1, 200)}},
		{name: "a body of another key", ops: []Op{{Instance: 0, Key: "t1:p1", Kind: Read, Found: true, Version: 1, BodyKey: "t2:p1", End: ms(1)}},
			want: map[Invariant]int{NoCrossTenantBody: 1}, row: noFault},
		{name: "a read beyond its time bound", ops: []Op{read(0, "k", 1, 0, 1001)},
			want: map[Invariant]int{WithinTimeBound: 1}, row: noFault},
		{name: "a write beyond its time bound", ops: []Op{write(0, "k", 1, 0, 1001)},
			want: map[Invariant]int{WithinTimeBound: 1}, row: noFault},
		{name: "a write that panicked promised nothing",
			ops: []Op{{Instance: 0, Key: "k", Kind: Write, Write: WriteSet, Version: 2, End: ms(10), Unacked: true, Err: "panic"}, read(0, "k", 1, 20, 21)}},
		{name: "a read older than an acknowledged tag invalidation, past its delivery, is a tags violation",
			ops:  []Op{bulk(WriteTag, 2, 0, 10), read(1, "k", 1, 400, 401)},
			want: map[Invariant]int{TagInvalidated: 1}, row: noFault},
		{name: "so is one older than a productd reprice",
			ops:  []Op{bulk(WriteReprice, 2, 0, 10), read(1, "k", 1, 400, 401)},
			want: map[Invariant]int{TagInvalidated: 1}, row: noFault},
		{name: "within the delivery a tag invalidation allows the older version", ops: []Op{bulk(WriteTag, 2, 0, 10), read(1, "k", 1, 60, 61)}},
		{name: "a tag invalidation during a fault that keeps bulk ones unannounced is allowed the bus-down bound", faults: scripts,
			ops: []Op{bulk(WriteReprice, 2, 1100, 1200), read(1, "k", 1, 1700, 1701)}},
		{name: "Redis cannot delete by tag", fenced: true, ops: []Op{bulk(WriteTag, 2, 0, 10), raw("k", 1, 200)}},
		{name: "nor a PUT answered with an error",
			ops: []Op{{Instance: 0, Key: "k", Kind: Write, Write: WritePut, End: ms(10), Unacked: true, Err: "500"}, read(0, "k", 1, 20, 21)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := testBounds
			b.Fencing = tc.fenced
			rep := Check("test", tc.ops, tc.faults, b)
			for i := range numInvariants {
				if got := rep.Total.Violations[i]; got != tc.want[i] {
					t.Errorf("%s violations = %d, want %d", i, got, tc.want[i])
				}
			}
			if len(tc.want) == 0 {
				return
			}
			for _, row := range rep.Rows {
				if row.Total() > 0 && row.Fault != tc.row {
					t.Errorf("violations counted in row %q, want %q", row.Fault, tc.row)
				}
				if row.Total() > 0 && len(row.Examples) == 0 {
					t.Errorf("row %q has violations but no example", row.Fault)
				}
			}
		})
	}
}

func TestCheckReportsTheWorstStalenessPerFault(t *testing.T) {
	faults := []Fault{{Name: "pause", Start: ms(1000), End: ms(2000), BusDown: true}}
	ops := []Op{
		write(0, "k", 2, 0, 10), read(1, "k", 1, 60, 61), // 50 ms stale, allowed
		write(0, "k", 3, 1100, 1200), read(1, "k", 2, 1500, 1501), // 300 ms stale, allowed
	}
	rep := Check("test", ops, faults, testBounds)
	if n := rep.Violations(); n != 0 {
		t.Fatalf("%d violations, want none", n)
	}
	want := map[string]time.Duration{noFault: ms(50), "pause": ms(300)}
	for _, row := range rep.Rows {
		if row.WorstStaleness != want[row.Fault] || row.Stale != 1 {
			t.Errorf("row %s: %d stale reads, worst %v; want 1, %v", row.Fault, row.Stale, row.WorstStaleness, want[row.Fault])
		}
	}
	var out strings.Builder
	if err := WriteText(&out, []Report{rep}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"pause", "300ms", "no violations"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, out.String())
		}
	}
}
