package coherence

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Explicit writes win over the read path's own writes.
//
// The read path writes to the tiers on someone else's behalf: it copies a
// shared-tier hit into the local tier, and it writes a loaded value back.
// Both copy data read some time ago. If Set or Delete ran for that key in
// between, the copy is older than what the caller explicitly wrote, and
// writing it would resurrect a deleted or replaced value until its TTL.
//
// So every read-path writer takes a ticket (Begin) before it reads its
// source: the sequence number of the last explicit write or bulk
// invalidation. Each explicit write (Explicit) and bulk invalidation
// (Bulk) takes the next number and leaves it in the record of its key in
// the Ledger, or of its prefix in the Fences: there is no other record of
// what outdates a ticket. A read-path write may go on only if no record of
// its key or of a prefix of its key carries a number after its ticket's
// (Ticket.current). Explicit writes hold the key's lock for their whole
// tier update and leave their number before releasing it; read-path writes
// check and write under the same lock. Whatever the interleaving, a tier
// ends up holding the explicit write's result or nothing, never the older
// copy. A record that leaves the Ledger or the Fences (expired, or dropped
// to stay within a bound) leaves its number behind as the forgotten floor
// of its table: every ticket older than it is outdated, whatever its key.
//
// Panics: every release (entry lock, reference count) is deferred, so a
// write that panics (a store's Cost function, a codec, a store's Set)
// leaves the key as usable as before; the panic goes on to the caller.
//
// Memory: a key's lock exists only while some operation on its key is
// between Begin and End, so the lock registry is bounded by the number of
// loads, shared reads and explicit writes in progress, not by the key
// space. What outlives an operation is in the Ledger and the Fences.
type keyLocks struct {
	shards [lockShards]lockShard
}

const lockShards = 64

var lockSeed = maphash.MakeSeed()

type lockShard struct {
	mu sync.Mutex
	m  map[string]*keyLock // guarded by mu; entries with refs > 0 only
	_  [40]byte            // keep neighbouring shards' mutexes apart
}

// keyLock is the lock of one key with operations in progress.
type keyLock struct {
	// mu is held by an explicit write for its whole tier update, and by a
	// read-path write for its check-then-write.
	mu sync.Mutex
	// refs counts operations between Begin and End; guarded by the
	// shard's mu.
	refs int
}

// writeOrder orders the explicit writes and bulk invalidations against
// read-path writes: the sequence numbers, and the bulk lock.
type writeOrder struct {
	// seq is the number of the last explicit write or bulk invalidation
	// (see keyLocks). Taken under the key's lock (explicit) or bulk held
	// exclusively, read without either by Begin.
	seq atomic.Uint64
	// bulk orders bulk invalidations (InvalidatePrefix, Clear, one from
	// another instance, the resynchronisation after the Bus was down)
	// against read-path writes, which may be of any key: a read-path write
	// holds bulk shared while it decides and writes the local tier, a bulk
	// invalidation holds it exclusively while it leaves its number in its
	// prefix's fence. So a read-path write either finished before the bulk
	// invalidation (which then finds and removes what it wrote) or sees
	// the number and, if its key is under the invalidation's prefix,
	// writes nothing.
	bulk sync.RWMutex
}

// Ticket is a read-path writer's claim: its key's lock and the sequence
// number of the last explicit write or bulk invalidation before it read
// its source.
type Ticket struct {
	sh  *lockShard // key's shard, where End finds e again
	e   *keyLock
	seq uint64
}

// Begin registers an operation on key and returns its ticket. It must be
// taken before the operation reads the data it may write later, and given
// back with End.
func (m *Model) Begin(key string) Ticket {
	sh := &m.locks.shards[maphash.String(lockSeed, key)&(lockShards-1)]
	sh.mu.Lock()
	e := sh.m[key]
	if e == nil {
		if sh.m == nil {
			sh.m = make(map[string]*keyLock)
		}
		e = new(keyLock)
		sh.m[key] = e
	}
	e.refs++
	sh.mu.Unlock()
	return Ticket{sh: sh, e: e, seq: m.order.seq.Load()}
}

// End releases t, the ticket of key, dropping the key's lock when nothing
// else uses it. Callers defer it.
func (m *Model) End(key string, t Ticket) {
	sh := t.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t.e.refs--; t.e.refs == 0 {
		delete(sh.m, key)
	}
}

// current reports whether no explicit write of key (t's key) and no bulk
// invalidation covering it finished since t was taken: no record of the
// Ledger or the Fences that covers key carries a later number. The caller
// holds t.e.mu and the bulk lock (shared), under which an explicit write
// of key and every bulk invalidation took their numbers: when none was
// taken since t, no record can carry a later one (nor can a forgotten
// one), and nothing is looked up.
func (m *Model) current(key string, t Ticket) bool {
	if m.order.seq.Load() == t.seq {
		return true
	}
	return !m.Ledger.outdates(key, t.seq) && !m.Fences.outdates(key, t.seq)
}

// Fill runs a read-path write of key under t: decide, with the key's lock
// and the bulk lock (shared) held and current telling whether t is still
// current, makes the local write and says whether the write goes on; then
// then (the shared-tier write: network I/O; nil for none) runs with the
// key's lock only, so that a bulk invalidation waiting for the bulk lock
// never holds up the other fills behind a slow Redis.
func (m *Model) Fill(t Ticket, key string, decide func(current bool) bool, then func()) {
	t.e.mu.Lock()
	defer t.e.mu.Unlock()
	ok := func() bool {
		m.order.bulk.RLock()
		defer m.order.bulk.RUnlock()
		return decide(m.current(key, t))
	}()
	if ok && then != nil {
		then()
	}
}

// FillAll is Fill for the distinct keys of a batch and their tickets ts:
// it takes every key's lock, in key order (so two batches never wait for
// each other; an explicit write holds one lock at a time), runs decide with
// the bulk lock shared too, current[n] telling whether ts[n] is still
// current, then then with the key locks only, and releases everything
// whatever they do.
func (m *Model) FillAll(keys []string, ts []Ticket, decide func(current []bool), then func()) {
	order := make([]int, len(keys))
	for n := range order {
		order[n] = n
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	for _, n := range order {
		ts[n].e.mu.Lock()
	}
	defer func() {
		for _, n := range order {
			ts[n].e.mu.Unlock()
		}
	}()
	func() {
		m.order.bulk.RLock()
		defer m.order.bulk.RUnlock()
		current := make([]bool, len(ts))
		for n, t := range ts {
			current[n] = m.current(keys[n], t)
		}
		decide(current)
	}()
	then()
}

// Explicit runs an explicit write (Set, Delete, an invalidation applied)
// of key: it excludes read-path writes of key while it runs, and outdates
// every ticket taken before it finished, by leaving the next sequence
// number in key's record in the Ledger. A write that panics counts as
// finished: it may have changed a tier already. now is the Cache's clock.
func (m *Model) Explicit(key string, now time.Time, write func() error) error {
	t := m.Begin(key)
	defer m.End(key, t)
	t.e.mu.Lock()
	defer t.e.mu.Unlock()
	defer func() { m.Ledger.noteSeq(key, m.order.seq.Add(1), now) }()
	return write()
}

// Bulk outdates every ticket of a key under prefix ("" for every key)
// taken before it returns, by leaving the next sequence number in
// prefix's record in the Fences (see writeOrder.bulk). now is the Cache's
// clock.
func (m *Model) Bulk(prefix string, now time.Time) {
	m.order.bulk.Lock()
	defer m.order.bulk.Unlock()
	m.Fences.noteSeq(prefix, m.order.seq.Add(1), now)
}

// raiseTo raises a to at least v.
func raiseTo(a *atomic.Uint64, v uint64) {
	for {
		cur := a.Load()
		if cur >= v || a.CompareAndSwap(cur, v) {
			return
		}
	}
}
