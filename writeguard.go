package flightcache

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// writeGuard makes explicit writes win over the read path's own writes.
//
// The read path writes to the tiers on someone else's behalf: it copies a
// shared-tier hit into the local tier, and it writes a loaded value back. Both
// copy data read some time ago. If Set or Delete ran for that key in
// between, the copy is older than what the caller explicitly wrote, and
// writing it would resurrect a deleted or replaced value until its TTL.
//
// So every read-path writer takes a ticket (begin) before it reads its
// source, and may write only if no explicit write of the same key finished
// since (ticket.current, in Cache.fill). Explicit writes hold the key's lock for their whole tier
// update and advance the generation before releasing it; read-path writes
// check the generation and write under the same lock. Whatever the
// interleaving, a tier ends up holding the explicit write's result or
// nothing, never the older copy.
//
// Panics: every release (entry lock, reference count) is deferred, so a
// write that panics (a store's Cost function, a codec, a store's Set) leaves
// the key as usable as before; the panic goes on to the caller.
//
// Memory: an entry exists only while some operation on its key is between
// begin and end, so the registry is bounded by the number of loads, shared
// reads and explicit writes in progress, not by the key space.
type writeGuard struct {
	shards [guardShards]guardShard
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
	// by begin, hence atomic.
	epoch atomic.Uint64
	// recent holds the prefixes of the last bulkLog bulk invalidations:
	// epoch e's at recent[e%bulkLog]; guarded by bulk. A ticket more than
	// bulkLog epochs old is outdated for every key.
	recent [bulkLog]string
}

// bulkLog is how many bulk invalidations a ticket can be checked against
// one by one; more since it was taken, and it is outdated whatever its key.
const bulkLog = 64

const guardShards = 64

var guardSeed = maphash.MakeSeed()

type guardShard struct {
	mu sync.Mutex
	m  map[string]*guardEntry // guarded by mu; entries with refs > 0 only
	_  [40]byte               // keep neighbouring shards' mutexes apart
}

// guardEntry is the state of one key with operations in progress.
type guardEntry struct {
	// mu is held by an explicit write for its whole tier update, and by a
	// read-path write for its check-then-write.
	mu sync.Mutex
	// gen counts finished explicit writes. Written under mu, read without
	// it by begin, hence atomic.
	gen atomic.Uint64
	// refs counts operations between begin and end; guarded by the shard's mu.
	refs int
	// newest is the latest read time (readAt) of an item a read-path
	// write of this key brought, written or refused, while the entry
	// lived; guarded by mu. A read-path write of an older item is skipped
	// (Cache.fillLocked): it would put back, under a ticket that is still
	// current, something older than what this instance already served.
	newest time.Time
}

// ticket is a read-path writer's claim: the generation it saw before it
// read its source.
type ticket struct {
	w     *writeGuard
	e     *guardEntry
	gen   uint64
	epoch uint64 // the writeGuard's epoch when the ticket was taken
}

func (w *writeGuard) shard(key string) *guardShard {
	return &w.shards[maphash.String(guardSeed, key)&(guardShards-1)]
}

// begin registers an operation on key and returns its ticket. It must be
// taken before the operation reads the data it may write later, and given
// back with end.
func (w *writeGuard) begin(key string) ticket {
	sh := w.shard(key)
	sh.mu.Lock()
	e := sh.m[key]
	if e == nil {
		if sh.m == nil {
			sh.m = make(map[string]*guardEntry)
		}
		e = new(guardEntry)
		sh.m[key] = e
	}
	e.refs++
	sh.mu.Unlock()
	return ticket{w: w, e: e, gen: e.gen.Load(), epoch: w.epoch.Load()}
}

// end releases t, dropping the key's entry when nothing else uses it.
// Callers defer it.
func (w *writeGuard) end(key string, t ticket) {
	sh := w.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if t.e.refs--; t.e.refs == 0 {
		delete(sh.m, key)
	}
}

// current reports whether no explicit write of key (t's key) and no bulk
// invalidation covering it finished since t was taken. The caller holds
// t.e.mu and t.w.bulk (shared).
func (t ticket) current(key string) bool {
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

// bulkInvalidate outdates every ticket of a key under prefix ("" for
// every key) taken before it returns; see writeGuard.bulk.
func (w *writeGuard) bulkInvalidate(prefix string) {
	w.bulk.Lock()
	defer w.bulk.Unlock()
	e := w.epoch.Load() + 1
	w.recent[e%bulkLog] = prefix
	w.epoch.Store(e)
}

// writeIfAll is the read path's write of a batch: for the distinct keys of
// a batch and their tickets ts (all of one writeGuard) it takes every key's
// lock, in key order (so two batches never wait for each other; an
// explicit write holds one lock at a time), runs decide with the bulk lock
// shared too, current[n] telling whether ts[n] is still current (see
// ticket.current), then then (the shared-tier write, network I/O) with the
// key locks only, and releases everything whatever they do.
func writeIfAll(keys []string, ts []ticket, decide func(current []bool), then func()) {
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
	if len(ts) == 0 {
		return
	}
	func() {
		ts[0].w.bulk.RLock()
		defer ts[0].w.bulk.RUnlock()
		current := make([]bool, len(ts))
		for n, t := range ts {
			current[n] = t.current(keys[n])
		}
		decide(current)
	}()
	then()
}

// explicit runs an explicit write (Set, Delete) of key: it excludes
// read-path writes of key while it runs, and invalidates every ticket taken
// before it finished. A write that panics counts as finished: it may have
// changed a tier already.
func (w *writeGuard) explicit(key string, write func() error) error {
	t := w.begin(key)
	defer w.end(key, t)
	t.e.mu.Lock()
	defer t.e.mu.Unlock()
	defer t.e.gen.Add(1)
	return write()
}
