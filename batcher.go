package flightcache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flightcache/flightcache/driver"
)

// BatcherOptions configures a Batcher. The zero value is usable.
type BatcherOptions struct {
	// MaxKeys bounds the keys of one origin call; 0 means 100.
	MaxKeys int
	// MaxDelay, when positive, bounds how long a key waits for the calls
	// in progress to return, and the wait after a return for the returning
	// callers' keys: then the waiting keys go in a call of their own
	// (MaxInFlight permitting). 0: they wait for a return or for MaxKeys,
	// so a slow or hung call holds the keys behind it until it returns; set
	// MaxDelay to a few of the origin's round trips when its calls may be
	// slow.
	MaxDelay time.Duration
	// MaxInFlight bounds the origin calls in progress at once; 0 means 8.
	// Keys beyond it wait for a call to return, MaxDelay or not.
	MaxInFlight int
	// Partition, when set, names the partition of a key: keys of different
	// partitions never share a call (one tenant per call, one database per
	// call...). Each partition batches on its own; MaxInFlight is shared.
	Partition func(key string) string
}

// Batcher gathers the loads of independent keys into shared origin calls:
// the loads of every flight whose LoadFunc comes from Load, whatever
// started it (a miss, an early refresh, a stale revalidation, a flight of
// FetchMany through LoadMany).
//
// Latency comes first, as in a database's group commit: a load that finds
// no call of its partition at the origin goes at once, alone; the loads
// that arrive while calls are in progress wait, and go together when one
// returns, when MaxKeys of them wait, or after MaxDelay. A lone load never
// waits for a window. Right after a call of several keys returns, its
// callers are likely to come back with their next misses: the partition's
// next call waits for as many keys as that call carried (at most MaxKeys),
// for at most a quarter of that call's duration (at most 5 ms, and
// MaxDelay when set), so that they go together rather than the first
// alone and the others behind it. A call of one key leaves no such wait.
//
// A call belongs to no caller. Its ctx carries no caller's values or
// cancellation: it ends when the contexts of all the flights it serves
// have ended (a flight's ends at the Cache's loader timeout, or on Close),
// and driver.BatchMembers(ctx) gives those contexts, for tracing. A flight
// whose context ends leaves the call to the others.
//
// Identity: keys of different callers share a call, so everything that
// changes a value must be in its key (tenant, locale, currency...), and
// the load must read nothing else from its ctx. Partition keeps apart keys
// that an origin cannot answer in one call.
//
// The load's answer is shared out key by key: a key absent from the map is
// ErrNotFound for itself alone; a *BatchError with Keys fails those keys
// with their errors and serves the others from the map; any other error
// fails the keys of that call only, and so does a panic (a
// *singleflight.PanicError). SetTTL, NoStore and SetTags on the call's ctx
// apply to every key of the call; a member's own LoadFunc wrapper may add
// tags of its key alone (SetTags on the flight's ctx after Load returns).
//
// In cluster mode each key's flight claims its own lease before its load
// joins a call, so each key is loaded once in the cluster. The round trips
// of those claims are the Coordinator's: redislease's groups the claims
// (and the completions) that arrive while one of its calls to a Redis
// master is in progress, and sends them together in one pipeline when it
// returns, so the misses of a batch cost about two claim round trips per
// master (the first claim alone, the others together), not one per key. A
// Batcher is safe for concurrent use and needs no Close: it runs
// goroutines only while calls are in progress.
type Batcher[V any] struct {
	load        BatchLoadFunc[V]
	part        func(string) string
	maxKeys     int
	maxInFlight int
	maxDelay    time.Duration
	// fixedHold, when positive, replaces the hold computed from a call's
	// duration (tests, which cannot make a call last long enough).
	fixedHold time.Duration

	mu sync.Mutex
	// lanes holds the partitions with keys waiting or calls in progress;
	// one with neither is removed. Guarded by mu.
	lanes map[string]*lane[V]
	// inFlight counts the calls in progress, of every lane. Guarded by mu.
	inFlight int
}

// lane is one partition's queue. Every field is guarded by Batcher.mu.
type lane[V any] struct {
	name     string
	pending  []slot[V] // keys waiting, in arrival order
	inFlight int       // this lane's calls in progress
	// ready: the waiting keys go as soon as MaxInFlight allows, because a
	// call of the lane returned or MaxDelay passed. Cleared when none wait.
	ready bool
	timer *time.Timer // MaxDelay's, while keys wait
	// gen grows each time the lane empties, so a timer that fires late
	// sees that the keys it was set for are gone.
	gen uint64
	// held: a call of several keys returned; the lane's next call waits
	// for expect keys (its callers' next misses, likely on their way) or
	// for holdTimer, whichever comes first. Cleared when a call goes or
	// the hold ends; the lane stays while it is held.
	held      bool
	expect    int
	holdTimer *time.Timer
	holdGen   uint64 // grows when the hold clears, as gen does
}

// holdFraction and holdMax bound the hold after a return: a quarter of
// the call's duration, at most 5 ms (and MaxDelay when set), so that a
// slow call does not become a long hold.
const (
	holdFraction = 4
	holdMax      = 5 * time.Millisecond
)

// slot is one key of one member waiting in a lane.
type slot[V any] struct {
	m *member[V]
	i int // index of the key in the member
}

// member is one Load or LoadMany waiting for its keys. keys, vals and errs
// are written before the member is queued (keys) or by the call that
// serves key i (vals[i], errs[i]), and read by the caller only after done
// is closed, which the last answer does.
type member[V any] struct {
	ctx  context.Context
	keys []string
	vals []V
	errs []error
	left atomic.Int32 // keys not answered yet
	done chan struct{}
	// one is the storage of a Load's single key: no slices to allocate.
	one struct {
		key [1]string
		val [1]V
		err [1]error
	}
}

// answer records key i's result; the member's caller may have left.
func (m *member[V]) answer(i int, v V, err error) {
	m.vals[i], m.errs[i] = v, err
	if m.left.Add(-1) == 0 {
		close(m.done)
	}
}

// NewBatcher returns a Batcher that loads keys with load. It returns a
// *ConfigError for a nil load or a negative option.
func NewBatcher[V any](load BatchLoadFunc[V], opts BatcherOptions) (*Batcher[V], error) {
	switch {
	case load == nil:
		return nil, &ConfigError{Field: "load", Reason: "nil BatchLoadFunc"}
	case opts.MaxKeys < 0:
		return nil, &ConfigError{Field: "MaxKeys", Reason: "negative"}
	case opts.MaxDelay < 0:
		return nil, &ConfigError{Field: "MaxDelay", Reason: "negative"}
	case opts.MaxInFlight < 0:
		return nil, &ConfigError{Field: "MaxInFlight", Reason: "negative"}
	}
	b := &Batcher[V]{load: load, part: opts.Partition, maxKeys: opts.MaxKeys, maxInFlight: opts.MaxInFlight,
		maxDelay: opts.MaxDelay, lanes: make(map[string]*lane[V])}
	if b.maxKeys == 0 {
		b.maxKeys = 100
	}
	if b.maxInFlight == 0 {
		b.maxInFlight = 8
	}
	return b, nil
}

// Load returns the LoadFunc of key: cache.Get(ctx, key, b.Load(key)). Its
// flight's load joins the Batcher's next call, and returns as soon as
// that call answers or the flight's context ends.
func (b *Batcher[V]) Load(key string) LoadFunc[V] {
	return func(ctx context.Context) (V, error) {
		if ctx == nil {
			ctx = context.Background()
		}
		m := &member[V]{ctx: ctx, done: make(chan struct{})}
		m.one.key[0] = key
		m.keys, m.vals, m.errs = m.one.key[:], m.one.val[:], m.one.err[:]
		m.left.Store(1)
		b.enqueue(m, len(m.keys))
		select {
		case <-m.done:
			return m.vals[0], m.errs[0]
		case <-ctx.Done():
			var zero V
			return zero, ctx.Err()
		}
	}
}

// LoadMany is a BatchLoadFunc whose keys join the Batcher's calls, so that
// FetchMany's loads and single flights share them:
// cache.FetchMany(ctx, keys, b.LoadMany). Keys that fail for another
// reason than not existing are reported in a *BatchError's Keys.
func (b *Batcher[V]) LoadMany(ctx context.Context, keys []string) (map[string]V, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if len(keys) == 0 {
		return map[string]V{}, nil
	}
	m := &member[V]{ctx: ctx, keys: keys, vals: make([]V, len(keys)), errs: make([]error, len(keys)), done: make(chan struct{})}
	m.left.Store(int32(len(keys)))
	b.enqueue(m, len(keys))
	select {
	case <-m.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	found := make(map[string]V, len(keys))
	var be *BatchError
	for i, k := range keys {
		switch err := m.errs[i]; {
		case err == nil:
			found[k] = m.vals[i]
		case errors.Is(err, ErrNotFound):
		default:
			if be == nil {
				be = &BatchError{Err: err, Keys: make(map[string]error)}
			}
			be.Failed++
			be.Keys[k] = err
		}
	}
	if be != nil {
		return found, be
	}
	return found, nil
}

// enqueue queues the n keys of m in their lanes and sends what may go.
func (b *Batcher[V]) enqueue(m *member[V], n int) {
	var parts []string
	if b.part != nil { // user code, called outside the lock
		parts = make([]string, n)
		for i := range parts {
			parts[i] = b.part(m.keys[i])
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range n {
		name := ""
		if parts != nil {
			name = parts[i]
		}
		l := b.lanes[name]
		if l == nil {
			l = &lane[V]{name: name}
			b.lanes[name] = l
		}
		l.pending = append(l.pending, slot[V]{m: m, i: i})
		if i == n-1 || parts == nil || parts[i+1] != name {
			b.pump(l)
		}
	}
}

// pump sends the waiting keys of l that may go: all of them at once, in
// calls of at most maxKeys, when the lane is idle (no call in progress,
// no hold) or ready, or when as many keys wait as its hold expects; only
// full calls otherwise. Called with b.mu held.
func (b *Batcher[V]) pump(l *lane[V]) {
	for len(l.pending) > 0 && b.inFlight < b.maxInFlight &&
		(l.ready || len(l.pending) >= b.maxKeys ||
			(l.held && len(l.pending) >= l.expect) || (!l.held && l.inFlight == 0)) {
		n := min(len(l.pending), b.maxKeys)
		call := l.pending[:n:n]
		l.pending = l.pending[n:]
		l.inFlight++
		b.inFlight++
		if l.held { // what it waited for has gone, or a bound was reached
			l.ready = len(l.pending) > 0
			l.unhold()
		}
		go b.call(l, call)
	}
	switch {
	case len(l.pending) == 0:
		l.pending = nil // let the taken calls' array go
		l.ready = false
		l.gen++
		if l.timer != nil {
			l.timer.Stop()
			l.timer = nil
		}
		if l.inFlight == 0 && !l.held && b.lanes[l.name] == l {
			delete(b.lanes, l.name)
		}
	case b.maxDelay > 0 && l.timer == nil && !l.ready:
		gen := l.gen
		l.timer = time.AfterFunc(b.maxDelay, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if l.gen == gen && l.timer != nil {
				l.timer = nil
				l.ready = true
				b.pump(l)
			}
		})
	}
}

// unhold ends l's hold. Called with b.mu held.
func (l *lane[V]) unhold() {
	l.held, l.expect = false, 0
	l.holdGen++
	if l.holdTimer != nil {
		l.holdTimer.Stop()
		l.holdTimer = nil
	}
}

// returned accounts for a call of l that returned after took with n keys,
// and sends what waits: l's keys (the group commit), and other lanes' that
// MaxInFlight held.
//
// The callers that call answered are likely to come back with their next
// misses within a moment: a call of several keys is followed by a hold, in
// which the lane's next call waits until as many keys wait as the call
// carried (at most MaxKeys), or until a quarter of took has passed (at
// most holdMax, and MaxDelay when set). Without it, the first of those
// callers to come back finds nothing in progress and goes alone, the rest
// pile up behind it, and calls alternate between one key and many. A call
// of one key leaves no hold: the next key is as many as it carried, so a
// lone caller's next miss still goes at once.
func (b *Batcher[V]) returned(l *lane[V], n int, took time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l.inFlight--
	b.inFlight--
	hold := min(took/holdFraction, holdMax)
	if b.fixedHold > 0 {
		hold = b.fixedHold
	}
	if b.maxDelay > 0 {
		hold = min(hold, b.maxDelay)
	}
	if n > 1 && hold > 0 {
		l.expect = min(l.expect+n, b.maxKeys)
		if !l.held {
			l.held = true
			gen := l.holdGen
			l.holdTimer = time.AfterFunc(hold, func() {
				b.mu.Lock()
				defer b.mu.Unlock()
				if l.held && l.holdGen == gen {
					l.holdTimer = nil
					l.unhold()
					l.ready = len(l.pending) > 0
					b.pump(l)
				}
			})
		}
	} else {
		l.ready = true
	}
	b.pump(l)
	for _, o := range b.lanes {
		if b.inFlight >= b.maxInFlight {
			break
		}
		if o != l {
			b.pump(o)
		}
	}
}

// errBatcherAborted is the answer of a call's keys when the load called
// runtime.Goexit.
var errBatcherAborted = errors.New("flightcache: batch loader exited without returning")

// call is one origin call for slots, on its own goroutine.
func (b *Batcher[V]) call(l *lane[V], slots []slot[V]) {
	var (
		sent int           // the keys sent to the origin
		took time.Duration // how long the origin took with them
	)
	defer func() { b.returned(l, sent, took) }()
	// The members still waiting, and the distinct keys they ask.
	var (
		members []*member[V]
		ctxs    []context.Context
		keys    []string
		slotsOf = make(map[string][]slot[V], len(slots))
	)
	for _, s := range slots {
		m := s.m
		if m.ctx.Err() != nil {
			continue // its caller left before the call; it waits for nothing
		}
		if len(members) == 0 || members[len(members)-1] != m { // a member's keys are queued together
			members = append(members, m)
			ctxs = append(ctxs, m.ctx)
		}
		k := m.keys[s.i]
		if _, ok := slotsOf[k]; !ok {
			keys = append(keys, k)
		}
		slotsOf[k] = append(slotsOf[k], s)
	}
	if len(keys) == 0 {
		return
	}
	answered := false
	defer func() {
		if !answered { // the load called runtime.Goexit
			for _, ss := range slotsOf {
				for _, s := range ss {
					var zero V
					s.m.answer(s.i, zero, errBatcherAborted)
				}
			}
		}
	}()

	// The call's context belongs to no member: it ends when the last
	// member's context ends, or when the call returns.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var live atomic.Int32
	live.Store(int32(len(ctxs)))
	for _, mctx := range ctxs {
		stop := context.AfterFunc(mctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	pol := new(storePolicy)
	ctx = context.WithValue(driver.WithBatchMembers(ctx, ctxs), policyKey{}, pol)

	sent = len(keys)
	t0 := time.Now()
	found, err := callBatchLoader(ctx, b.load, keys)
	took = time.Since(t0)

	// The call's SetTTL and NoStore become every member flight's, before
	// any of them returns (a policy set after its loader returned is
	// ignored).
	if ttl := time.Duration(pol.ttl.Load()); ttl > 0 || pol.noStore.Load() {
		for _, mctx := range ctxs {
			if pol.noStore.Load() {
				NoStore(mctx)
			} else {
				SetTTL(mctx, ttl)
			}
		}
	}
	if pol.tagged.Load() { // so do its SetTags, or their error
		tags, terr := pol.tagList()
		for _, mctx := range ctxs {
			if mp := policyFrom(mctx); mp != nil {
				mp.inherit(tags, terr)
			}
		}
	}
	var keyErrs map[string]error
	if be := (*BatchError)(nil); errors.As(err, &be) && be.Keys != nil {
		keyErrs, err = be.Keys, nil
	}
	answered = true
	for _, k := range keys {
		var (
			v    V
			kerr = err
		)
		if kerr == nil {
			if e, ok := keyErrs[k]; ok && e != nil {
				kerr = e
			} else if x, ok := found[k]; ok {
				v = x
			} else {
				kerr = ErrNotFound
			}
		}
		for _, s := range slotsOf[k] {
			s.m.answer(s.i, v, kerr)
		}
	}
}
