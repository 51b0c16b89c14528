package chaos

import (
	"sync"
	"time"
)

// Kind tells what an Op did.
type Kind uint8

const (
	// Write is a change committed to the origin and then told to the
	// Cache (Set, Delete, InvalidatePrefix or InvalidateTag, see Op.Write).
	Write Kind = iota + 1
	// Read is a Cache Get.
	Read
	// RawRead is a read of the shared tier's entry straight from Redis,
	// past every Cache: what the fencing tokens let land there.
	RawRead
)

// MarshalText writes k by name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

func (k Kind) String() string {
	switch k {
	case Write:
		return "write"
	case Read:
		return "read"
	case RawRead:
		return "raw-read"
	}
	return "unknown"
}

// How a write told the Cache about its change.
const (
	WriteSet    = "set"    // Cache.Set of the new value
	WriteDelete = "delete" // Cache.Delete; the next read loads the new value
	WritePrefix = "prefix" // Cache.InvalidatePrefix of the key's tenant
	// WritePut is productd's PUT of the key's row (ModeProductd): the
	// origin's UPDATE, then the product's prefix invalidation and the
	// Delete of the row's superseded keys, its floor-0 key among them.
	// Check holds raw reads to it as to a Delete.
	WritePut = "put"
	// WriteTag is Cache.InvalidateTag of the key's category tag (every
	// key of the tenant's category was bumped): a tag invalidation,
	// which Redis cannot apply to the entries it holds (fences make them
	// absent), so raw reads are not held to it.
	WriteTag = "tag"
	// WriteReprice is productd's category reprice (ModeProductd): one
	// transaction that bumps every row of the tenant's category, then the
	// invalidation of the category's tag. Check holds reads to it as to
	// a WriteTag.
	WriteReprice = "reprice"
)

// tagWrite reports whether how is a tag invalidation (WriteTag,
// WriteReprice).
func tagWrite(how string) bool { return how == WriteTag || how == WriteReprice }

// Op is one recorded operation. Times are offsets on the History's single
// monotonic clock, so that ops of every instance compare.
type Op struct {
	// Instance is the index of the instance that ran the op; -1 for a
	// RawRead, which goes through none.
	Instance int    `json:"instance"`
	Key      string `json:"key"`
	Kind     Kind   `json:"kind"`
	// Write is WriteSet, WriteDelete, WritePrefix, WritePut, WriteTag or
	// WriteReprice for a Write.
	Write string `json:"write,omitempty"`
	// Start is when the call began; End when it returned. For a Write,
	// End is its acknowledgement.
	Start time.Duration `json:"start"`
	End   time.Duration `json:"end"`
	// Version is, for a Write, the version it committed to the origin; for
	// a read, the version it returned (meaningful only when Found).
	Version int64 `json:"version"`
	// Found says a read returned a value (not an error, not a miss).
	Found bool `json:"found,omitempty"`
	// BodyKey is the tenant and key embedded in the body a read returned,
	// which must be Key.
	BodyKey string `json:"body_key,omitempty"`
	// Detail says how a read was served (the Cache's outcome and scope),
	// for diagnosis only.
	Detail string `json:"detail,omitempty"`
	// Err is the call's error, if any. A write with an error was still
	// committed to the origin and is acknowledged (as a service answers
	// its PUT once the database committed) unless Unacked is set.
	Err string `json:"err,omitempty"`
	// Unacked marks a write whose call panicked (its caller would have
	// answered with an error), or a PUT answered with an error: nothing
	// was promised about it.
	Unacked bool `json:"unacked,omitempty"`
}

// Fault is a window during which a fault was injected.
type Fault struct {
	Name  string        `json:"name"`
	Start time.Duration `json:"start"`
	End   time.Duration `json:"end"`
	// BusDown says the fault may take an instance's bus down (Redis
	// paused or killed, pub/sub connections or PUBLISH refused) or keep its
	// writes from being announced until the redo (its shared tier refused,
	// its breaker open), which is when the promises allow more than one
	// delivery of staleness. A fault
	// that leaves every bus up (scripts refused, slow writes, a panicking
	// codec) allows nothing more.
	BusDown bool `json:"bus_down"`
	// BulkDown says the fault may keep bulk invalidations (WritePrefix,
	// WritePut, WriteTag, WriteReprice) from being announced until the redo, though it leaves
	// every bus up and the writes of one key announced: scripts refused
	// (redislease records a bulk invalidation for replay and publishes it
	// in one script). For those writes it counts as BusDown.
	BulkDown bool `json:"bulk_down,omitempty"`
}

// History records the ops and faults of one run. It is safe for concurrent
// use.
type History struct {
	start time.Time // the origin of every offset; read-only

	mu     sync.Mutex // guards ops and faults
	ops    []Op
	faults []Fault
}

// NewHistory starts a History whose clock reads zero now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the time since the History began, on the monotonic clock.
func (h *History) Now() time.Duration { return time.Since(h.start) }

// Record adds op.
func (h *History) Record(op Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// FaultBegan records that the fault name was injected now, and returns a
// function that records its end. busDown and bulkDown are Fault.BusDown
// and Fault.BulkDown.
func (h *History) FaultBegan(name string, busDown, bulkDown bool) (ended func()) {
	h.mu.Lock()
	i := len(h.faults)
	h.faults = append(h.faults, Fault{Name: name, Start: h.Now(), End: -1, BusDown: busDown, BulkDown: bulkDown})
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		h.faults[i].End = h.Now()
		h.mu.Unlock()
	}
}

// Ops returns a copy of the recorded ops.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// Faults returns a copy of the recorded faults; one that has not ended
// ends now.
func (h *History) Faults() []Fault {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := append([]Fault(nil), h.faults...)
	for i := range out {
		if out[i].End < 0 {
			out[i].End = h.Now()
		}
	}
	return out
}
