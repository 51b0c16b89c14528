package flightcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"time"

	"github.com/flightcache/flightcache/driver"
	"github.com/flightcache/flightcache/internal/coherence"
	"github.com/flightcache/flightcache/internal/flightgroup"
	"github.com/flightcache/flightcache/singleflight"
)

// BatchLoadFunc loads many values from the origin in one call. It receives
// only the keys that must be loaded (never a key served from a tier or
// loaded by another caller at the moment), at most Options.MaxBatchSize of
// them, and returns what it found: a key absent from the map does not exist
// and is cached negatively, like a LoadFunc's ErrNotFound. A key in the map
// that was not asked for is ignored (and reported as EventUnrequestedKey).
// A *BatchError with Keys fails those keys alone, each with its error; any
// other error fails every key of the call, and the map is then ignored.
//
// Its ctx is like a LoadFunc's: it carries the values of the batch's
// caller, not its cancellation, and it ends at the loader timeout or on
// Close. SetTTL and NoStore on ctx apply to every key of the call. It must
// not read its own keys through the same Cache: their flights are its own,
// and such a read waits until the loader timeout.
type BatchLoadFunc[V any] func(ctx context.Context, keys []string) (map[string]V, error)

// KeyResult is one key's answer in FetchMany.
type KeyResult[V any] struct {
	Result[V]
	// Err is the key's error, as Fetch would return it for the key alone:
	// ErrNotFound for a key that does not exist, the loader's error, a
	// *KeyError, the caller's context error...
	Err error
}

// BatchError is GetMany's error when some keys failed for another reason
// than not existing. The values of the other keys are returned with it.
//
// A BatchLoadFunc returns one with Keys to fail single keys without
// failing the others: each key of Keys gets its error (ErrNotFound
// included), and the other keys are answered from the map as usual.
type BatchError struct {
	// Failed counts the failed keys.
	Failed int
	// Err is the first failure, in the order of the keys.
	Err error
	// Keys maps each failed key to its error. GetMany and
	// Batcher.LoadMany fill it; a BatchLoadFunc sets it to fail those keys
	// alone (Failed and Err may then stay zero).
	Keys map[string]error
}

// Error counts the failed keys and gives the first failure.
func (e *BatchError) Error() string {
	if e.Err == nil && len(e.Keys) > 0 { // a loader's, with Keys only
		return fmt.Sprintf("flightcache: %d keys of a batch failed", len(e.Keys))
	}
	return fmt.Sprintf("flightcache: %d keys of a batch failed, the first with: %v", e.Failed, e.Err)
}

// Unwrap returns the first failure.
func (e *BatchError) Unwrap() error { return e.Err }

// batchConfig is what the batch read path takes from Options beyond what
// the single-key path keeps. Read-only after New.
type batchConfig struct {
	maxSize int
	shared  driver.BatchSharedStore // nil when the shared tier has no batch operations
}

func newBatchConfig[V any](o Options[V]) batchConfig {
	b := batchConfig{maxSize: o.MaxBatchSize}
	b.shared, _ = o.Shared.(driver.BatchSharedStore)
	return b
}

// GetMany returns the values of keys, loading the missing ones with load in
// as few calls as Options.MaxBatchSize allows. A key that does not exist is
// absent from the map. When some keys failed, err is a *BatchError and the
// map still holds every other key's value. See FetchMany for the read path.
func (c *Cache[V]) GetMany(ctx context.Context, keys []string, load BatchLoadFunc[V]) (map[string]V, error) {
	rs := c.FetchMany(ctx, keys, load)
	m := make(map[string]V, len(keys))
	var be *BatchError
	for i := range rs {
		switch err := rs[i].Err; {
		case err == nil:
			m[keys[i]] = rs[i].Value
		case errors.Is(err, ErrNotFound):
		default:
			if be == nil {
				be = &BatchError{Err: err, Keys: make(map[string]error)}
			}
			be.Failed++
			be.Keys[keys[i]] = err
		}
	}
	if be != nil {
		return m, be
	}
	return m, nil
}

// FetchMany is GetMany with every key's Result, in a slice aligned with
// keys (a key given twice gets the same answer twice).
//
// Per key, the read path is Fetch's, with the round trips shared: the
// local tier; then the Guard; then one BatchSharedStore.GetMany for every
// key the local tier missed (one Get per key when the shared tier has no
// batch operations); then the flight. A key already in flight, for a
// single Get or another batch, joins that load; the keys left are loaded
// together by load, in chunks of at most Options.MaxBatchSize keys, after
// a double-check of the tiers. Each key keeps every guarantee of Fetch: its
// own Outcome, the loader timeout, limits, negative caching, explicit writes
// that win over the load, early refresh, the stale fallback, and the
// caller's context (the loads go on for the other callers when it ends).
// In cluster mode, with a Coordinator that is a driver.BatchCoordinator,
// the keys left are claimed together and loaded once in the whole
// cluster: the keys this instance is granted are loaded together and
// written to the shared tier under fencing, and the keys another instance
// is loading are waited for (see Options.Coordinator).
// The Observer gets one EventGet per key; a Tracer gets one load span per
// loader call and no Get span.
func (c *Cache[V]) FetchMany(ctx context.Context, keys []string, load BatchLoadFunc[V]) []KeyResult[V] {
	if ctx == nil {
		ctx = context.Background()
	}
	var start time.Time
	if c.opts.Observer != nil {
		start = time.Now() // real time: a latency metric, whatever Options.Now says
	}
	b := batch[V]{c: c, ctx: ctx, load: load, keys: keys, res: make([]KeyResult[V], len(keys)), now: c.opts.Now()}
	b.run()
	if c.opts.Observer != nil {
		d := time.Since(start)
		for i := range b.res {
			c.observe(driver.Event{Kind: driver.EventGet, Ctx: ctx, Cache: c.opts.Name, Outcome: b.res[i].Outcome, Duration: d, Err: b.res[i].Err})
		}
	}
	return b.res
}

// batch is one FetchMany call.
type batch[V any] struct {
	c    *Cache[V]
	ctx  context.Context
	load BatchLoadFunc[V]
	keys []string
	res  []KeyResult[V] // aligned with keys
	now  time.Time
	// sharedDown is set when the batch's shared read timed out or the
	// breaker refused it: as for a Get, its flights then make no further
	// shared call (a batch pays at most one shared timeout).
	sharedDown sharedSkip
}

// batchKey is a key of a batch that the local tier could not serve.
type batchKey[V any] struct {
	key   string
	first int // index of the key's first occurrence in batch.keys
	stale *driver.Item[V]
	// f is the key's flight: led by this batch or joined; err is why
	// there is none (the engine refused the key).
	f   flightgroup.Flight[string, *flight[V]]
	err error
}

func (b *batch[V]) run() {
	c := b.c
	// The local tier, for every occurrence: a hit costs one store lookup,
	// as for Get, and no map is built unless something misses.
	var (
		miss []batchKey[V]
		seen map[string]int // key → index of its first occurrence
		dups [][2]int       // {i, first}: keys[i] repeats keys[first]
	)
	for i, k := range b.keys {
		var stale *driver.Item[V]
		if c.opts.Local != nil && len(k) > 0 && len(k) <= c.opts.MaxKeyLen && !c.coh.Closed.Load() {
			if it, ok := c.opts.Local.Get(k); ok {
				switch c.localState(it, b.now) {
				case coherence.Fresh:
					if it.NotFound || c.opts.Observer != nil || c.opts.Clone != nil || (c.opts.EarlyRefresh && b.load != nil) {
						b.serve(i, it, driver.TierLocal)
						continue
					}
					// serve's common case, inline, as in hitLocal.
					r := &b.res[i]
					r.Value, r.Outcome, r.Age = it.Value, OutcomeHitLocal, age(it.LoadedAt, b.now.UnixNano())
					continue
				case coherence.Stale:
					stale = it
				}
			}
		}
		if err := c.admit(b.ctx, k); err != nil {
			b.res[i] = KeyResult[V]{Result: failed[V](b.ctx, err), Err: err}
			continue
		}
		if seen == nil {
			seen = make(map[string]int, len(b.keys)-i)
			miss = make([]batchKey[V], 0, len(b.keys)-i)
		}
		if first, ok := seen[k]; ok {
			dups = append(dups, [2]int{i, first})
			continue
		}
		if c.opts.Local != nil && c.opts.Observer != nil {
			c.emit(b.ctx, driver.EventMiss, driver.TierLocal, nil)
		}
		seen[k] = i
		miss = append(miss, batchKey[V]{key: k, first: i, stale: stale})
	}
	if len(miss) == 0 {
		return
	}
	miss = b.filter(miss)
	miss = b.readShared(miss)
	if len(miss) > 0 {
		b.fly(miss)
	}
	for _, d := range dups {
		b.res[d[0]] = b.res[d[1]]
	}
}

// serve answers key i with a fresh item found in tier, starting an early
// refresh when XFetch says so: serveFresh's work, with the refresh's
// loader built only when one is due.
func (b *batch[V]) serve(i int, it *driver.Item[V], tier driver.Tier) {
	c := b.c
	o, due := c.freshHit(b.ctx, it, b.now, tier)
	if due && b.load != nil && c.startRefresh(b.ctx, b.keys[i], singleLoad(b.keys[i], b.load), it.FreshUntil) {
		o = OutcomeRefreshed
	}
	r := &b.res[i]
	r.Result, r.Err = c.answer(it, o, b.now, nil)
}

// singleLoad adapts a batch loader to one key, for the early refresh of a
// key a batch served: refreshes run one key at a time, like Get's.
func singleLoad[V any](key string, load BatchLoadFunc[V]) LoadFunc[V] {
	return func(ctx context.Context) (V, error) {
		m, err := load(ctx, []string{key})
		v, ok := m[key]
		switch {
		case err != nil:
			return v, err
		case !ok:
			return v, ErrNotFound
		}
		return v, nil
	}
}

// filter answers the keys the Guard turns away and returns the others.
func (b *batch[V]) filter(miss []batchKey[V]) []batchKey[V] {
	c := b.c
	if c.opts.Guard == nil {
		return miss
	}
	return slices.DeleteFunc(miss, func(bk batchKey[V]) bool {
		if !c.filtered(b.ctx, bk.key) {
			return false
		}
		b.res[bk.first] = KeyResult[V]{Result: Result[V]{Outcome: OutcomeFiltered}, Err: ErrNotFound}
		return true
	})
}

// readShared reads the keys the local tier missed from the shared tier in
// one round trip, answers the fresh ones (copying them into the local tier
// under a ticket, as Get does), remembers stale ones as the
// fallback, and returns the keys left.
func (b *batch[V]) readShared(miss []batchKey[V]) []batchKey[V] {
	c := b.c
	if c.opts.Shared == nil {
		return miss
	}
	keys := make([]string, len(miss))
	tickets := make([]coherence.Ticket, len(miss))
	for j := range miss {
		keys[j] = miss[j].key
		tickets[j] = c.coh.Begin(keys[j]) // before the read, as in readShared
	}
	items, err := c.readSharedMany(b.ctx, keys, tickets, b.now)
	b.sharedDown = unavailable(b.ctx, err)
	for j := range miss {
		c.coh.End(keys[j], tickets[j])
	}
	for j := range miss {
		if it := items[j]; it != nil && !it.NotFound && b.now.Before(it.StaleUntil) && !b.now.Before(it.FreshUntil) &&
			(miss[j].stale == nil || it.FreshUntil.After(miss[j].stale.FreshUntil)) {
			miss[j].stale = it
		}
	}
	return slices.DeleteFunc(miss, func(bk batchKey[V]) bool {
		it := items[0]
		items = items[1:]
		if it != nil && b.now.Before(it.FreshUntil) {
			b.serve(bk.first, it, driver.TierShared)
			return true
		}
		if c.opts.Observer != nil {
			c.emit(b.ctx, driver.EventMiss, driver.TierShared, nil)
		}
		return false
	})
}

// fly is the flight for the keys no tier could serve. Every key gets a
// flight of the engine, as for Get, so that singles and other batches find
// it and join it. The interleaving story:
//
//  1. StartMany registers the batch as the leader of each key's flight, or
//     joins the flight in progress, and says which at once (with one
//     loader-timeout timer for all the flights it registers). A joined key's
//     answer comes from its leader, whoever that is; this batch never waits
//     for it before loading its own keys. (Waiting could deadlock: two
//     batches that each lead a key the other joined would wait for each
//     other.)
//  2. The led keys are split into chunks of at most MaxBatchSize, and each
//     chunk is loaded by its own goroutine (loadChunk), detached from the
//     caller's context like a single load. It takes the
//     tickets, double-checks the tiers, calls the loader once for the keys
//     still missing, writes them back, and completes every key's flight
//     exactly once (deferred, so a panicking or exiting loader completes
//     them too). The loader timeout and Close complete a flight without
//     it, as for a single load; its late result is then dropped.
//  3. The caller waits for each key's flight in turn, led or joined, on its
//     own context: its leaving ends only its own wait.
//
// So a key is loaded by exactly one flight at a time whoever asks, no
// batch waits on another before loading its own keys, and every wait ends:
// on the result, the flight's timeout or Close, or the caller's context.
func (b *batch[V]) fly(miss []batchKey[V]) {
	c := b.c
	if b.load == nil {
		for _, bk := range miss {
			b.res[bk.first] = KeyResult[V]{Result: Result[V]{Outcome: OutcomeLoadFailed},
				Err: fmt.Errorf("flightcache: nil BatchLoadFunc on a miss: %w", singleflight.ErrNilFunc)}
		}
		return
	}
	var led []*batchKey[V]
	// The flights keep the caller's values, not its cancellation: shield
	// the context once for all of them (each Wait below uses b.ctx).
	keys := make([]string, len(miss))
	flights := make([]flightgroup.Flight[string, *flight[V]], len(miss))
	errs := make([]error, len(miss))
	for j := range miss {
		keys[j] = miss[j].key
	}
	c.group.StartMany(context.WithoutCancel(b.ctx), keys, flights, errs)
	for j := range miss {
		bk := &miss[j]
		bk.f, bk.err = flights[j], errs[j]
		if bk.f.Led() {
			led = append(led, bk)
		}
	}
	for chunk := range slices.Chunk(led, c.batch.maxSize) {
		go c.loadChunk(b.ctx, chunk, b.load, b.sharedDown)
	}

	// With a soft timeout, keys that have a stale value wait at most that
	// long (from now, for all of them); the loads go on and refresh the
	// entries.
	softCtx := b.ctx
	if c.opts.SoftTimeout > 0 && slices.ContainsFunc(miss, func(bk batchKey[V]) bool { return bk.stale != nil }) {
		var cancel context.CancelFunc
		softCtx, cancel = context.WithTimeout(b.ctx, c.opts.SoftTimeout)
		defer cancel()
	}
	for j := range miss {
		bk := &miss[j]
		r := &b.res[bk.first]
		if bk.err != nil {
			r.Result, r.Err = c.settle(b.ctx, nil, bk.err, false, bk.stale, b.now)
			continue
		}
		wctx := b.ctx
		if bk.stale != nil {
			wctx = softCtx
		}
		fl, _, err := bk.f.Wait(wctx)
		if err != nil && wctx != b.ctx && wctx.Err() != nil && b.ctx.Err() == nil {
			b.serveStale(bk, ErrSoftTimeout)
			continue
		}
		r.Result, r.Err = c.settle(b.ctx, fl, err, bk.f.Led(), bk.stale, b.now)
	}
}

// serveStale answers a key with its stale value; why is the reason the
// fresh value did not arrive.
func (b *batch[V]) serveStale(bk *batchKey[V], why error) {
	b.res[bk.first] = KeyResult[V]{Result: b.c.serveStale(b.ctx, bk.stale, b.now, why)}
}

// batchAnswer is a chunk's result for one key.
type batchAnswer[V any] struct {
	fl  *flight[V]
	err error
}

// errBatchAborted is every key's result until its chunk has a better one:
// what the keys get when the loader calls runtime.Goexit.
var errBatchAborted = errors.New("flightcache: batch loader exited without returning")

// loadChunk is one call of the batch loader for keys, all led by one batch
// (see fly): the batch form of miss.run. ctx is the batch caller's; the load
// keeps its values only. sharedDown is the batch's shared read's verdict.
func (c *Cache[V]) loadChunk(ctx context.Context, keys []*batchKey[V], load BatchLoadFunc[V], sharedDown sharedSkip) {
	answers := make([]batchAnswer[V], len(keys))
	for j := range answers {
		answers[j].err = errBatchAborted
	}
	// owned[j]: key j was handed to a goroutine of its own (in cluster
	// mode, a key another instance is loading, see loadLeased), which
	// completes its flight and ends its ticket; this one must not.
	owned := make([]bool, len(keys))
	// Every flight is completed exactly once, whatever happens below, and
	// only after the write-back, as a single load returns after its own.
	defer func() {
		for j, bk := range keys {
			if !owned[j] {
				bk.f.Complete(answers[j].fl, answers[j].err)
			}
		}
	}()
	// A panic in a store, the codec or a Cost function would end the
	// process from this goroutine: it becomes the error of every key not
	// answered yet instead (the loader's own panics are caught closer, in
	// callBatchLoader). The panic value may hold a key, so it stays out.
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("flightcache: batch load panicked (%T)", p)
			for j := range answers {
				if answers[j].err == errBatchAborted {
					answers[j].err = err
				}
			}
		}
	}()
	names := make([]string, len(keys))
	tickets := make([]coherence.Ticket, len(keys))
	for j, bk := range keys {
		names[j] = bk.key
		// Before anything is read, as in a single flight: a Set or Delete
		// that finishes after this point wins over this chunk's writes.
		tickets[j] = c.coh.Begin(bk.key)
	}
	defer func() {
		for j := range keys {
			if !owned[j] {
				c.coh.End(names[j], tickets[j])
			}
		}
	}()

	// The flight context of the chunk's first key: the caller's values
	// without its cancellation, ended by the engine at the flight timeout
	// or on Close. The chunk's flights were registered together and end
	// together for those reasons.
	fctx := keys[0].f.Context()

	// The double-check: another instance may have filled the shared tier,
	// or a flight that just ended the local one.
	now := c.opts.Now()
	todo := make([]int, 0, len(keys))
	for j := range keys {
		if c.opts.Local != nil {
			if it, ok := c.opts.Local.Get(names[j]); ok && c.localState(it, now) == coherence.Fresh {
				answers[j] = batchAnswer[V]{fl: &flight[V]{item: *it, found: true}}
				continue
			}
		}
		todo = append(todo, j)
	}
	if bc, ok := c.opts.Coordinator.(driver.BatchCoordinator); ok && len(todo) > 0 {
		// Cluster mode: the shared half of the double-check is read in
		// the step that claims the keys (see loadLeased).
		c.loadLeased(fctx, bc, keys, names, tickets, todo, load, sharedDown, answers, owned, now)
		return
	}
	if c.opts.Shared != nil && sharedDown == sharedUsable && len(todo) > 0 {
		ks, ts := make([]string, len(todo)), make([]coherence.Ticket, len(todo))
		for n, j := range todo {
			ks[n], ts[n] = names[j], tickets[j]
		}
		items, err := c.readSharedMany(fctx, ks, ts, now)
		sharedDown = unavailable(fctx, err)
		todo = slices.DeleteFunc(todo, func(j int) bool {
			it := items[0]
			items = items[1:]
			if it != nil && now.Before(it.FreshUntil) {
				answers[j] = batchAnswer[V]{fl: &flight[V]{item: *it, found: true}}
				return true
			}
			return false
		})
	}
	if c.throttle != nil {
		todo = slices.DeleteFunc(todo, func(j int) bool {
			err := c.throttle.check(names[j], now)
			if err == nil {
				return false
			}
			if c.opts.Observer != nil {
				c.emit(fctx, driver.EventThrottled, driver.TierNone, err)
			}
			answers[j].err = err
			return true
		})
	}
	if len(todo) == 0 {
		return
	}

	todo, flights, pol := c.originChunk(fctx, keys, owned, names, todo, load, answers)
	if pol == nil {
		return
	}
	if !pol.noStore.Load() {
		ask, ts := make([]string, len(todo)), make([]coherence.Ticket, len(todo))
		for n, j := range todo {
			ask[n], ts[n] = names[j], tickets[j]
		}
		// On the flight's context, outside the loader timeout, each shared
		// call under SharedTimeout (as miss.writeBack).
		c.writeBackMany(fctx, ask, ts, flights, sharedDown)
	}
	for n, j := range todo {
		answers[j] = batchAnswer[V]{fl: flights[n]}
	}
}

// originChunk is a chunk's origin call: the loader, once, for the keys
// names[j], j in todo, under LoaderTimeout as a single load's
// (miss.loadOrigin). Keys that failed get their answers here; it returns
// the keys loaded (found or not found) and their flights, aligned, and
// the policy the loader set (nil when the whole call failed).
func (c *Cache[V]) originChunk(fctx context.Context, keys []*batchKey[V], owned []bool, names []string, todo []int, load BatchLoadFunc[V], answers []batchAnswer[V]) ([]int, []*flight[V], *storePolicy) {
	// The load, under LoaderTimeout as a single load's (miss.loadOrigin):
	// the origin's own deadline, inside the flight's.
	ask := make([]string, len(todo))
	for n, j := range todo {
		ask[n] = names[j]
	}
	pol := new(storePolicy)
	lctx, cancel := flightgroup.LoadContext(fctx, c.opts.LoaderTimeout)
	defer cancel()
	lctx = context.WithValue(lctx, policyKey{}, pol)
	var endSpan func(error)
	if c.opts.Tracer != nil {
		lctx, endSpan = c.opts.Tracer.StartLoad(lctx, c.opts.Name)
	}
	var start, wallStart time.Time // as in loadOrigin
	if c.preciseLoadTime {
		start = time.Now()
		wallStart = start
	} else {
		start, wallStart = c.opts.Now(), time.Now()
	}
	found, err := callBatchLoader(lctx, load, ask)
	var keyErrs map[string]error
	if be := (*BatchError)(nil); errors.As(err, &be) && be.Keys != nil {
		keyErrs, err = be.Keys, nil
	}
	end := c.opts.Now()
	took, version := end.Sub(start), wallStart.Round(0)
	if c.preciseLoadTime {
		took = time.Since(start)
	}
	if endSpan != nil {
		endSpan(err)
	}
	if c.opts.Observer != nil {
		c.observe(driver.Event{Kind: driver.EventOriginCall, Ctx: fctx, Cache: c.opts.Name, Duration: took, Err: err})
	}
	if err != nil {
		var fl *flight[V]
		if c.opts.Tracer != nil {
			fl = &flight[V]{loadCtx: lctx} // so that waiters link to the load's span
		}
		for _, j := range todo {
			if c.throttle != nil {
				c.throttle.fail(names[j], err, end)
			}
			answers[j] = batchAnswer[V]{fl: fl, err: err}
		}
		return nil, nil, nil
	}
	// Loaded in time: the flights' hard timeout must not cut the
	// write-back short and lose the values (as in miss.run). Every key of
	// the chunk waits for it, found in a tier or loaded.
	for j, bk := range keys {
		if !owned[j] { // an owned key's flight is its own goroutine's
			flightgroup.StopTimeout(bk.f.Context())
		}
	}
	c.reportUnrequested(fctx, found, ask)
	// Keys the loader failed one by one (a *BatchError with Keys) get their
	// errors; the others are answered from the map.
	if len(keyErrs) > 0 {
		todo = slices.DeleteFunc(todo, func(j int) bool {
			kerr, ok := keyErrs[names[j]]
			if !ok || kerr == nil || errors.Is(kerr, ErrNotFound) {
				return false // ErrNotFound: absent from the map, a tombstone
			}
			if c.throttle != nil {
				c.throttle.fail(names[j], kerr, end)
			}
			answers[j] = batchAnswer[V]{err: kerr}
			return true
		})
		ask = ask[:0]
		for _, j := range todo {
			ask = append(ask, names[j])
		}
	}

	ttl := min(time.Duration(pol.ttl.Load()), c.opts.MaxTTL) // SetTTL's, capped; 0: none
	flights := make([]*flight[V], len(todo))
	for n, j := range todo {
		v, ok := found[names[j]]
		if ok && keyErrs[names[j]] != nil { // ErrNotFound in Keys: the key does not exist
			ok = false
		}
		fl := &flight[V]{item: driver.Item[V]{Value: v, Meta: driver.Meta{LoadDuration: took, LoadedAt: end, Version: version, NotFound: !ok}}}
		if !ok {
			fl.notFound = ErrNotFound
		}
		if c.opts.Tracer != nil {
			fl.loadCtx = lctx
		}
		d := ttl
		switch {
		case d > 0:
		case ok:
			d = c.jittered(c.opts.TTL)
		default:
			d = c.jittered(c.opts.NegativeTTL)
		}
		fl.item.FreshUntil = end.Add(d)
		fl.item.StaleUntil = fl.item.FreshUntil
		if ok {
			fl.item.StaleUntil = fl.item.StaleUntil.Add(c.opts.StaleFor)
		}
		if c.throttle != nil {
			c.throttle.succeed(names[j])
		}
		if pol.tagged.Load() {
			c.tagLoaded(pol, fl)
		}
		flights[n] = fl
	}
	return todo, flights, pol
}

// callBatchLoader calls load, turning a panic into a *singleflight.PanicError
// for the chunk's keys, as the engine does for a single loader.
func callBatchLoader[V any](ctx context.Context, load BatchLoadFunc[V], keys []string) (found map[string]V, err error) {
	returned := false
	defer func() {
		if !returned {
			if r := recover(); r != nil {
				found, err = nil, &singleflight.PanicError{Value: r, Stack: debug.Stack()}
			}
		}
	}()
	found, err = load(ctx, keys)
	returned = true
	return found, err
}

// reportUnrequested reports the keys the loader returned without being
// asked for them. They are never stored: a loader that returns more than
// it was asked (another tenant's rows, a neighbour's IDs) must not put
// values under keys no caller of this batch asked for.
func (c *Cache[V]) reportUnrequested(ctx context.Context, found map[string]V, asked []string) {
	known := 0
	for _, k := range asked { // asked holds distinct keys
		if _, ok := found[k]; ok {
			known++
		}
	}
	n := len(found) - known
	if n == 0 {
		return
	}
	if c.opts.Observer != nil {
		c.emit(ctx, driver.EventUnrequestedKey, driver.TierNone, nil)
	}
	if ok, suppressed := c.unrequestedLog.allow(); ok {
		c.opts.Logger.LogAttrs(ctx, slog.LevelWarn, "flightcache: batch loader returned keys it was not asked for; ignored",
			slog.String("cache", c.opts.Name), slog.Int("keys", n), slog.Int64("suppressed", suppressed))
	}
}

// readSharedMany reads keys from the shared tier, in one round trip when
// it has batch operations, and returns the servable (fresh or stale) items
// aligned with keys, nil for a miss: readShared for many keys. Each item is
// copied into the local tier under its key's ticket; read and decode
// errors count as misses. err is the failure of the call itself (a
// failing, hung or skipped tier), as readShared's storeErr.
func (c *Cache[V]) readSharedMany(ctx context.Context, keys []string, tickets []coherence.Ticket, now time.Time) (items []*driver.Item[V], err error) {
	items = make([]*driver.Item[V], len(keys))
	var lookups []driver.Lookup
	err = c.sharedCall(ctx, true, func(ctx context.Context) error {
		if bs := c.batch.shared; bs != nil {
			var err error
			lookups, err = bs.GetMany(ctx, keys)
			if err == nil && len(lookups) != len(keys) {
				err = fmt.Errorf("flightcache: shared GetMany returned %d results for %d keys", len(lookups), len(keys))
			}
			return err
		}
		// One Get per key. The first failure of the tier ends the call:
		// the deadline is the whole call's. An error about one entry is
		// that key's miss, as in a GetMany.
		lookups = make([]driver.Lookup, len(keys))
		for j, k := range keys {
			e, ok, err := c.opts.Shared.Get(ctx, k)
			if err != nil && entryLevel(err) {
				lookups[j].Err = err
				continue
			}
			if err != nil {
				return err
			}
			lookups[j] = driver.Lookup{Entry: e, Found: ok}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() == nil { // the caller leaving is not a store failure
			c.readFailed(ctx, err)
		}
		return items, err
	}
	for j, l := range lookups {
		if l.Err != nil {
			c.readFailed(ctx, l.Err)
			continue
		}
		if !l.Found {
			continue
		}
		items[j] = c.acceptShared(ctx, keys[j], &l.Entry, now, tickets[j])
	}
	return items, nil
}

// writeBackMany stores loaded items in both tiers, best-effort, skipping
// each key whose ticket an explicit write has outdated, and everything once
// the Cache is closed: miss.writeBack for many keys, with one SetMany for
// the shared tier (none when sharedDown: the batch found the tier
// unavailable already). The check and the writes happen with every key's
// guard lock held (writeIfAll).
//
// In cluster mode the keys it writes hold no lease (a Coordinator that is
// not a driver.BatchCoordinator, or a degraded claim), so it writes the
// local tier only (see sharedWritable); leased keys are written by their
// leases' completion instead (loadLeased). The callers get their values
// all the same; other instances load those keys themselves, under a
// lease, when they miss them.
func (c *Cache[V]) writeBackMany(ctx context.Context, keys []string, tickets []coherence.Ticket, flights []*flight[V], sharedDown sharedSkip) {
	writeShared, skipErr := c.sharedWritable(sharedDown)
	var entries []driver.Entry
	if writeShared {
		entries = make([]driver.Entry, len(keys))
		for n, fl := range flights {
			e, err := c.encode(&fl.item)
			if err != nil {
				fl.writeErr = err
				c.writeFailed(ctx, driver.TierShared, err)
				continue
			}
			entries[n] = e
		}
	}
	var (
		wk   []string
		we   []driver.Entry
		wn   []int
		errs []error
		// tier is the tier a panic is reported for: the shared tier's
		// but while the local tier's Set (a Cost function) runs.
		tier = driver.TierShared
	)
	// A panic in a store or the codec is every key's write error, as in
	// miss.writeBack: the values were loaded and are returned. Its value
	// stays out of the error: it may hold a key.
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("flightcache: write-back panicked (%T)", p)
			for _, fl := range flights {
				fl.writeErr = err
			}
			c.writeFailed(ctx, tier, err)
		}
	}()
	c.coh.FillAll(keys, tickets, func(current []bool) {
		for n, fl := range flights {
			tier = driver.TierLocal
			ok, _, _ := c.fillLocked(current[n], keys[n], &fl.item, false)
			tier = driver.TierShared
			if !ok {
				fl.uncached = true // an explicit write or a newer read won, or the Cache closed
				continue
			}
			switch {
			case fl.writeErr != nil:
			case !writeShared:
				fl.writeErr = skipErr
			default:
				wk = append(wk, keys[n])
				we = append(we, entries[n])
				wn = append(wn, n)
			}
		}
	}, func() {
		if len(wk) > 0 {
			errs = c.setSharedMany(ctx, wk, we)
		}
	})
	for m, err := range errs {
		if err != nil {
			flights[wn[m]].writeErr = err
			c.writeFailed(ctx, driver.TierShared, err)
		}
	}
}

// setSharedMany writes entries to the shared tier, in one SetMany when it
// has batch operations; the result is as SetMany's.
func (c *Cache[V]) setSharedMany(ctx context.Context, keys []string, entries []driver.Entry) []error {
	var errs []error
	err := c.sharedCall(ctx, false, func(ctx context.Context) error {
		if bs := c.batch.shared; bs != nil {
			errs = bs.SetMany(ctx, keys, entries)
			return firstErr(errs)
		}
		for n, k := range keys {
			if err := c.opts.Shared.Set(ctx, k, entries[n]); err != nil {
				if errs == nil {
					errs = make([]error, len(keys))
				}
				errs[n] = err
			}
		}
		return firstErr(errs)
	})
	if err != nil && errs == nil { // refused by the breaker, or a failure of the whole call
		errs = make([]error, len(keys))
		for n := range errs {
			errs[n] = err
		}
	}
	return errs
}

// firstErr is the first error of errs that is the tier's, not one entry's
// (see entryLevel): what the breaker hears of a write of many keys.
func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil && !entryLevel(err) {
			return err
		}
	}
	return nil
}
