package chaos

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Invariant is a promise Check verifies over a History.
type Invariant uint8

const (
	// ReadYourWrites: a read on the instance that acknowledged a write,
	// started after the acknowledgement, returns its version or newer.
	ReadYourWrites Invariant = iota
	// MonotonicReads: a read on an instance returns a version no older
	// than any read of the same key on that instance that ended before it
	// started.
	MonotonicReads
	// BoundedStaleness: a read (on any instance) that starts after a
	// write's acknowledgement returns its version or newer, unless it
	// starts within the write's allowance (Bounds).
	BoundedStaleness
	// NoOldWriteLands: the entry Redis holds, read raw, is never older than
	// a Set or Delete acknowledged before the raw read started, outside the
	// write's allowance: no write with an old fencing token lands, and no
	// acknowledged write is left undone in Redis. Checked in cluster mode
	// only (without a Coordinator a late write-back may land, and the
	// instances' fences make it absent instead).
	NoOldWriteLands
	// NoCrossTenantBody: the body a read returns embeds the key it asked for.
	NoCrossTenantBody
	// WithinTimeBound: no call takes longer than Bounds allows for its kind.
	WithinTimeBound
	// TagInvalidated: a read (on any instance) that starts after a tag
	// invalidation's acknowledgement (WriteTag, WriteReprice) returns a
	// version no older than the one the invalidation's write committed,
	// unless it starts within the write's allowance: BoundedStaleness for
	// the values a tag covers, counted apart.
	TagInvalidated
	numInvariants
)

var invariantNames = [numInvariants]string{"read-your-writes", "monotonic", "staleness", "fencing", "tenant", "time", "tags"}

func (i Invariant) String() string {
	if i < numInvariants {
		return invariantNames[i]
	}
	return "unknown"
}

// Bounds are the promised limits Check holds a History to, derived from
// the options of the run (see BoundsFor).
type Bounds struct {
	// Delivery is how long after a write's acknowledgement other instances
	// may still serve the older value while the bus is up: one pub/sub
	// delivery, plus slack for a busy machine.
	Delivery time.Duration `json:"delivery"`
	// BusDown replaces Delivery for a write acknowledged while a fault
	// that may take a bus down (Fault.BusDown) is active (or just before
	// one began, or while the cluster recovers from one):
	// max(HeartbeatInterval + DownAfter, BusDownTTL) plus slack. The same
	// allowance starts again when such a fault begins.
	BusDown time.Duration `json:"bus_down"`
	// Recovery is how long after a fault ended older values may still be
	// served: the buses come back, the instances resynchronise, the writers
	// redo what they could not do.
	Recovery time.Duration `json:"recovery"`
	// Read and Write bound the duration of a Get and of a write call.
	Read  time.Duration `json:"read"`
	Write time.Duration `json:"write"`
	// Fencing says whether NoOldWriteLands applies (cluster mode).
	Fencing bool `json:"fencing"`
}

// Violation is one op that broke an invariant, with the op it contradicts.
type Violation struct {
	Invariant Invariant `json:"invariant"`
	Op        Op        `json:"op"`
	// Cause is the write (or earlier read) the op contradicts, if any.
	Cause *Op `json:"cause,omitempty"`
	// Late is how long after Cause's end the op started.
	Late time.Duration `json:"late,omitempty"`
}

func (v Violation) String() string {
	s := fmt.Sprintf("%s: %s %s on instance %d [%v, %v] version %d", v.Invariant, v.Op.Kind, v.Op.Key, v.Op.Instance,
		v.Op.Start.Round(time.Millisecond), v.Op.End.Round(time.Millisecond), v.Op.Version)
	if v.Op.BodyKey != "" && v.Op.BodyKey != v.Op.Key {
		s += " body of " + v.Op.BodyKey
	}
	if v.Op.Detail != "" {
		s += " (" + v.Op.Detail + ")"
	}
	if v.Op.Err != "" {
		s += " err " + v.Op.Err
	}
	if c := v.Cause; c != nil {
		s += fmt.Sprintf("; after %s %s on instance %d ended at %v with version %d (started %v later)",
			c.Kind, c.Write, c.Instance, c.End.Round(time.Millisecond), c.Version, v.Late.Round(time.Millisecond))
		if c.Err != "" {
			s += " which returned " + c.Err
		}
	}
	return s
}

// Row is the outcome for the ops that started after a fault's injections
// and before the next fault's (or before any fault, for "none").
type Row struct {
	Fault string `json:"fault"`
	// Ops counts the ops; Errors those that returned an error.
	Ops    int `json:"ops"`
	Errors int `json:"errors"`
	// Violations counts the violations per invariant (by Invariant).
	Violations [numInvariants]int `json:"violations"`
	// Stale counts the reads that returned a version older than one
	// acknowledged before they started, within the allowance or not;
	// WorstStaleness is the longest such read started after the first
	// acknowledgement it missed.
	Stale          int           `json:"stale"`
	WorstStaleness time.Duration `json:"worst_staleness"`
	// Examples keeps the first few violations of each invariant.
	Examples []Violation `json:"examples,omitempty"`
}

// Total is the sum of the row's violations.
func (r *Row) Total() int {
	n := 0
	for _, v := range r.Violations {
		n += v
	}
	return n
}

// Report is Check's verdict on one History.
type Report struct {
	Mode   string `json:"mode"`
	Bounds Bounds `json:"bounds"`
	// Rows has "none" first, then each fault in order of first injection.
	Rows  []Row `json:"rows"`
	Total Row   `json:"total"`
}

// Violations is the number of violations of every invariant.
func (r *Report) Violations() int { return r.Total.Total() }

// examplesPerInvariant bounds Row.Examples per invariant.
const examplesPerInvariant = 3

// noFault names the row of ops started while no fault had effect.
const noFault = "none"

// span is a closed interval of the History's clock.
type span struct{ from, to time.Duration }

// Check verifies the invariants over ops and faults. It is a pure function
// of its arguments. An op (and its violations) is counted in the row of
// the latest fault injected before it started; row "none" holds what
// started before the first fault.
func Check(mode string, ops []Op, faults []Fault, b Bounds) Report {
	c := &checker{b: b, faults: slices.Clone(faults), rows: map[string]*Row{}}
	sort.SliceStable(c.faults, func(i, j int) bool { return c.faults[i].Start < c.faults[j].Start })
	rep := Report{Mode: mode, Bounds: b}
	c.row(noFault)
	for _, f := range c.faults {
		c.row(f.Name)
	}

	writes := map[string][]Op{} // acknowledged writes per key, by acknowledgement
	var reads []Op
	for _, op := range ops {
		r := c.row(c.faultAt(op.Start))
		r.Ops++
		if op.Err != "" {
			r.Errors++
		}
		switch {
		case op.Kind == Write:
			if op.End-op.Start > b.Write {
				c.violate(op.Start, Violation{Invariant: WithinTimeBound, Op: op})
			}
			if !op.Unacked {
				writes[op.Key] = append(writes[op.Key], op)
			}
		case op.Kind == Read:
			if op.End-op.Start > b.Read {
				c.violate(op.Start, Violation{Invariant: WithinTimeBound, Op: op})
			}
			if op.Found {
				reads = append(reads, op)
				if op.BodyKey != op.Key {
					c.violate(op.Start, Violation{Invariant: NoCrossTenantBody, Op: op})
				}
			}
		case op.Kind == RawRead && op.Found && b.Fencing:
			reads = append(reads, op)
		}
	}
	for _, ws := range writes {
		sort.SliceStable(ws, func(i, j int) bool { return ws[i].End < ws[j].End })
	}
	for _, r := range reads {
		c.checkAgainstWrites(r, writes[r.Key])
	}
	c.checkMonotonic(reads)

	for _, name := range c.order {
		row := *c.rows[name]
		rep.Rows = append(rep.Rows, row)
		rep.Total.Ops += row.Ops
		rep.Total.Errors += row.Errors
		rep.Total.Stale += row.Stale
		rep.Total.WorstStaleness = max(rep.Total.WorstStaleness, row.WorstStaleness)
		for i, n := range row.Violations {
			rep.Total.Violations[i] += n
		}
		rep.Total.Examples = append(rep.Total.Examples, row.Examples...)
	}
	rep.Total.Fault = "all"
	return rep
}

type checker struct {
	b      Bounds
	faults []Fault // by start
	rows   map[string]*Row
	order  []string // row names in order of creation
}

func (c *checker) row(name string) *Row {
	r, ok := c.rows[name]
	if !ok {
		r = &Row{Fault: name}
		c.rows[name] = r
		c.order = append(c.order, name)
	}
	return r
}

// faultAt names the latest fault injected at or before t: a fault's row
// holds what happened from its injection to the next one's, its
// after-effects included.
func (c *checker) faultAt(t time.Duration) string {
	name := noFault
	for _, f := range c.faults {
		if f.Start > t {
			break
		}
		name = f.Name
	}
	return name
}

func (c *checker) violate(at time.Duration, v Violation) {
	r := c.row(c.faultAt(at))
	r.Violations[v.Invariant]++
	n := 0
	for _, e := range r.Examples {
		if e.Invariant == v.Invariant {
			n++
		}
	}
	if n < examplesPerInvariant {
		r.Examples = append(r.Examples, v)
	}
}

// allowance is the set of times at which a read may start and still return
// a version older than w's: w's own window (Delivery, or BusDown when a
// fault that may take a bus down has effect around the acknowledgement),
// and, for every such fault that has effect from then on (chained: a fault
// that begins while an earlier one's allowance runs), BusDown from its
// start and Recovery from its end. Faults that leave the buses up allow
// nothing more than Delivery, except a fault that keeps bulk
// invalidations unannounced (Fault.BulkDown), for a bulk write.
func (c *checker) allowance(w Op) []span {
	own := c.b.Delivery
	for _, f := range c.faults {
		if down(f, w) && f.Start <= w.End+c.b.Delivery && w.End <= f.End+c.b.Recovery {
			own = max(own, c.b.BusDown)
		}
	}
	out := []span{{w.End, w.End + own}}
	horizon := w.End + own
	for _, f := range c.faults {
		if f.Start > horizon {
			break
		}
		if !down(f, w) || f.End+c.b.Recovery < w.End {
			continue
		}
		out = append(out, span{f.Start, f.Start + c.b.BusDown}, span{f.End, f.End + c.b.Recovery})
		horizon = max(horizon, f.End+c.b.Recovery)
	}
	return out
}

// down says whether fault f may keep write w from reaching the other
// instances until the buses or the redo recover: f.BusDown, or f.BulkDown
// for a bulk invalidation.
func down(f Fault, w Op) bool {
	return f.BusDown || (f.BulkDown && (w.Write == WritePrefix || w.Write == WritePut || tagWrite(w.Write)))
}

func within(t time.Duration, spans []span) bool {
	for _, s := range spans {
		if s.from <= t && t <= s.to {
			return true
		}
	}
	return false
}

// checkAgainstWrites holds read r to the writes of its key (ws, by
// acknowledgement, whose versions grow since the harness serialises the
// writes of a key): staleness, read-your-writes, and for a raw read the
// fencing of old writes.
func (c *checker) checkAgainstWrites(r Op, ws []Op) {
	// ws[lo:hi] are the acknowledged writes r missed: newer than what it
	// returned, acknowledged before it started.
	lo := sort.Search(len(ws), func(i int) bool { return ws[i].Version > r.Version })
	hi := sort.Search(len(ws), func(i int) bool { return ws[i].End >= r.Start })
	if lo >= hi {
		return
	}
	if r.Kind == Read {
		row := c.row(c.faultAt(r.Start))
		row.Stale++
		row.WorstStaleness = max(row.WorstStaleness, r.Start-ws[lo].End)
	}
	stale, ryw := -1, -1 // the newest write of each kind r contradicts
	for i := lo; i < hi; i++ {
		w := ws[i]
		if r.Kind == RawRead && (w.Write == WritePrefix || tagWrite(w.Write)) {
			continue // Redis cannot delete by prefix or tag; fences make such entries absent
		}
		if r.Kind == Read && w.Instance == r.Instance {
			ryw = i
		}
		if !within(r.Start, c.allowance(w)) {
			stale = i
		}
	}
	if stale >= 0 {
		w := ws[stale]
		inv := BoundedStaleness
		switch {
		case r.Kind == RawRead:
			inv = NoOldWriteLands
		case tagWrite(w.Write):
			inv = TagInvalidated
		}
		c.violate(r.Start, Violation{Invariant: inv, Op: r, Cause: &w, Late: r.Start - w.End})
	}
	if ryw >= 0 {
		w := ws[ryw]
		c.violate(r.Start, Violation{Invariant: ReadYourWrites, Op: r, Cause: &w, Late: r.Start - w.End})
	}
}

// checkMonotonic finds, per instance and key, a read that returned an older
// version than a read that ended before it started.
func (c *checker) checkMonotonic(reads []Op) {
	type ik struct {
		instance int
		key      string
	}
	groups := map[ik][]Op{}
	for _, r := range reads {
		if r.Kind == Read {
			k := ik{r.Instance, r.Key}
			groups[k] = append(groups[k], r)
		}
	}
	for _, g := range groups {
		byStart := slices.Clone(g)
		sort.SliceStable(byStart, func(i, j int) bool { return byStart[i].Start < byStart[j].Start })
		byEnd := g
		sort.SliceStable(byEnd, func(i, j int) bool { return byEnd[i].End < byEnd[j].End })
		var newest *Op // the newest version among reads ended so far
		j := 0
		for _, r := range byStart {
			for ; j < len(byEnd) && byEnd[j].End < r.Start; j++ {
				if newest == nil || byEnd[j].Version > newest.Version {
					newest = &byEnd[j]
				}
			}
			if newest != nil && r.Version < newest.Version {
				cause := *newest
				c.violate(r.Start, Violation{Invariant: MonotonicReads, Op: r, Cause: &cause, Late: r.Start - cause.End})
			}
		}
	}
}
