package coherence

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Tickets makes explicit writes win over the read path's own writes.
//
// The read path writes to the tiers on someone else's behalf: it copies a
// shared-tier hit into the local tier, and it writes a loaded value back.
// Both copy data read some time ago. If Set or Delete ran for that key in
// between, the copy is older than what the caller explicitly wrote, and
// writing it would resurrect a deleted or replaced value until its TTL.
//
// So every read-path writer takes a ticket (Begin) before it reads its
// source, and may write only if no explicit write of the same key finished
// since (Ticket.Current). Explicit writes hold the key's lock for their
// whole tier update and advance the key's generation before releasing it;
// read-path writes check the generation and write under the same lock.
// Whatever the interleaving, a tier ends up holding the explicit write's
// result or nothing, never the older copy.
//
// Panics: every release (entry lock, reference count) is deferred, so a
// write that panics (a store's Cost function, a codec, a store's Set)
// leaves the key as usable as before; the panic goes on to the caller.
//
// Memory: an entry exists only while some operation on its key is between
// Begin and End, so the registry is bounded by the number of loads, shared
// reads and explicit writes in progress, not by the key space. What must
// outlive an operation (the newest read time seen per key) is in Fences.
type Tickets struct {
	shards [ticketShards]ticketShard
	// bulk orders bulk invalidations (InvalidatePrefix, Clear, one from
	// another instance, the resynchronisation after the Bus was down)
	// against read-path writes, which may be of any key: a read-path write
	// holds bulk shared while it decides and writes the local tier, a bulk
	// invalidation holds it exclusively while it advances epoch. So a
	// read-path write either finished before the bulk invalidation (which
	// then finds and removes what it wrote) or sees the new epoch and, if
	// its key is under the invalidation's prefix, writes nothing.
	bulk sync.RWMutex
	// epoch counts bulk invalidations. Written under bulk, read without it
	// by Begin, hence atomic.
	epoch atomic.Uint64
	// recent holds the prefixes of the last bulkLog bulk invalidations:
	// epoch e's at recent[e%bulkLog]; guarded by bulk. A ticket more than
	// bulkLog epochs old is outdated for every key.
	recent [bulkLog]string
}

// bulkLog is how many bulk invalidations a ticket can be checked against
// one by one; more since it was taken, and it is outdated whatever its key.
const bulkLog = 64

const ticketShards = 64

var ticketSeed = maphash.MakeSeed()

type ticketShard struct {
	mu sync.Mutex
	m  map[string]*keyEntry // guarded by mu; entries with refs > 0 only
	_  [40]byte             // keep neighbouring shards' mutexes apart
}

// keyEntry is the state of one key with operations in progress.
type keyEntry struct {
	// mu is held by an explicit write for its whole tier update, and by a
	// read-path write for its check-then-write.
	mu sync.Mutex
	// gen counts finished explicit writes. Written under mu, read without
	// it by Begin, hence atomic.
	gen atomic.Uint64
	// refs counts operations between Begin and End; guarded by the
	// shard's mu.
	refs int
}

// Ticket is a read-path writer's claim: the generation of its key and the
// bulk epoch it saw before it read its source.
type Ticket struct {
	w     *Tickets
	sh    *ticketShard // key's shard, where End finds e again
	e     *keyEntry
	gen   uint64
	epoch uint64
}

// Begin registers an operation on key and returns its ticket. It must be
// taken before the operation reads the data it may write later, and given
// back with End.
func (w *Tickets) Begin(key string) Ticket {
	sh := &w.shards[maphash.String(ticketSeed, key)&(ticketShards-1)]
	sh.mu.Lock()
	e := sh.m[key]
	if e == nil {
		if sh.m == nil {
			sh.m = make(map[string]*keyEntry)
		}
		e = new(keyEntry)
		sh.m[key] = e
	}
	e.refs++
	sh.mu.Unlock()
	return Ticket{w: w, sh: sh, e: e, gen: e.gen.Load(), epoch: w.epoch.Load()}
}

// End releases t, the ticket of key, dropping the key's entry when nothing
// else uses it. Callers defer it.
func (w *Tickets) End(key string, t Ticket) {
	sh := t.sh
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t.e.refs--; t.e.refs == 0 {
		delete(sh.m, key)
	}
}

// current reports whether no explicit write of key (t's key) and no bulk
// invalidation covering it finished since t was taken. The caller holds
// t.e.mu and t.w.bulk (shared).
func (t Ticket) current(key string) bool {
	if t.e.gen.Load() != t.gen {
		return false
	}
	now := t.w.epoch.Load()
	if now-t.epoch > bulkLog {
		return false
	}
	for e := t.epoch + 1; e <= now; e++ {
		if strings.HasPrefix(key, t.w.recent[e%bulkLog]) {
			return false
		}
	}
	return true
}

// Fill runs a read-path write of key under t: decide, with the key's lock
// and the bulk lock (shared) held and current telling whether t is still
// current, makes the local write and says whether the write goes on; then
// then (the shared-tier write: network I/O; nil for none) runs with the
// key's lock only, so that a bulk invalidation waiting for the bulk lock
// never holds up the other fills behind a slow Redis.
func (w *Tickets) Fill(t Ticket, key string, decide func(current bool) bool, then func()) {
	t.e.mu.Lock()
	defer t.e.mu.Unlock()
	ok := func() bool {
		w.bulk.RLock()
		defer w.bulk.RUnlock()
		return decide(t.current(key))
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
func (w *Tickets) FillAll(keys []string, ts []Ticket, decide func(current []bool), then func()) {
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
		w.bulk.RLock()
		defer w.bulk.RUnlock()
		current := make([]bool, len(ts))
		for n, t := range ts {
			current[n] = t.current(keys[n])
		}
		decide(current)
	}()
	then()
}

// Explicit runs an explicit write (Set, Delete, an invalidation applied)
// of key: it excludes read-path writes of key while it runs, and outdates
// every ticket taken before it finished. A write that panics counts as
// finished: it may have changed a tier already.
func (w *Tickets) Explicit(key string, write func() error) error {
	t := w.Begin(key)
	defer w.End(key, t)
	t.e.mu.Lock()
	defer t.e.mu.Unlock()
	defer t.e.gen.Add(1)
	return write()
}

// Bulk outdates every ticket of a key under prefix ("" for every key)
// taken before it returns; see Tickets.bulk.
func (w *Tickets) Bulk(prefix string) {
	w.bulk.Lock()
	defer w.bulk.Unlock()
	e := w.epoch.Load() + 1
	w.recent[e%bulkLog] = prefix
	w.epoch.Store(e)
}
