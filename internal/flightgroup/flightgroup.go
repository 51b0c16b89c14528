package flightgroup

import (
	"context"
	"hash/maphash"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// shardCount spreads keys over independently locked maps so that unrelated
// keys do not contend on one mutex. A power of two, so a mask picks a
// shard: key's is maphash.Comparable(seed, key) & (shardCount - 1), written
// out where it is needed (Do, start, Forget).
const shardCount = 32

var seed = maphash.MakeSeed()

// epoch anchors monotime. Durations for observers are differences of
// monotime readings, which read only the monotonic clock: half the cost of
// time.Now on virtual machines whose clock source is slow.
var epoch = time.Now()

func monotime() time.Duration { return time.Since(epoch) }

// Group deduplicates concurrent calls per key. The zero value is ready to use
// (no limits, no timeout, no observer); New configures one. A Group must not
// be copied after first use.
type Group[K comparable, V any] struct {
	cfg config

	closed atomic.Bool
	// total counts registered keys across all shards, but only when an
	// observer needs the total at every change (EventInFlight); otherwise
	// each shard's map length suffices and no global cache line is written
	// per execution. It changes in the same critical section (of the key's
	// shard) as the map it counts, so that InFlight and EventInFlight are
	// exact for anyone who has seen an execution finish.
	total atomic.Int64
	// loaders counts loader functions that have started and not yet
	// returned, registered or not, on time or late: the bulkhead that
	// WithMaxInFlight bounds. Maintained only under that limit. It is
	// incremented before an execution is registered and decremented as soon
	// as fn returns (or panics, or calls runtime.Goexit), before its result is
	// delivered, so a caller who has seen a result also sees the slot free.
	loaders atomic.Int64
	flights atomic.Uint64 // execution IDs; advanced only with an observer

	// The fields above are read on every call; the shards below are written
	// on every call. The padding keeps them on different cache lines (and,
	// Group being allocated in a size class that is a multiple of 64 bytes,
	// starts the shards on a line boundary so no two shards share one; the
	// fields above take 80 bytes, and TestShardsStartOnACacheLine pins it).
	_ [48]byte

	shards [shardCount]shard[K, V]
}

// shard is one lock domain. Invariants, under mu: m[k] is the current
// execution of k; c.current holds exactly when m[c.key] == c; every
// unfinished call of the shard is in exactly one of m (when current) and
// detached (otherwise), and a finished one in neither: the completion that
// marks a call finished removes it in the same critical section.
type shard[K comparable, V any] struct {
	mu sync.Mutex
	m  map[K]*call[K, V] // guarded by mu; allocated on first use
	// detached holds the unfinished executions that are not in m: those
	// Forget removed, and those whose key is not equal to itself (a NaN),
	// which a map could never find again. Close still reaches them here.
	// Guarded by mu; allocated on first use.
	detached map[*call[K, V]]struct{}
	// older holds, for an unfinished execution with more than one wave of
	// waiters (see enlist), the channels of the waves before its done's,
	// in the order they filled. Here rather than in the execution record,
	// which stays in its size class for the common execution that has
	// fewer waiters. Guarded by mu; allocated on first use.
	older map[*call[K, V]][]chan struct{}
	_     [32]byte // keep neighbouring shards' mutexes off this cache line
}

// call is one execution of a loader and everything its callers share.
type call[K comparable, V any] struct {
	// lctx is the loader's context; fn receives &lctx.
	lctx loaderCtx

	// Written once before the call is published; read-only afterwards.
	key   K
	id    uint64 // Flight in events; 0 without an observer
	shard uint8  // index of the key's shard in Group.shards (sh below)

	// Guarded by sh.mu. (The small fields share one word with shard: the
	// record stays in a smaller allocation size class.)
	finished bool          // the result below is final
	current  bool          // sh.m[key] == this call (cleared by Forget and by removal)
	shared   bool          // see val; written with it
	waiters  int32         // callers attached now, leader included
	done     chan struct{} // the newest wave's channel (see enlist); created by the first caller that must block

	// Written once, under sh.mu, by the completion that sets finished; read
	// only after observing finished under sh.mu or receiving from done.
	val V
	err error
}

// Result is what DoChan delivers.
type Result[V any] struct {
	Val    V
	Shared bool
	Err    error
}

// New returns a Group configured by opts. See Option for how invalid
// arguments are reported.
func New[K comparable, V any](opts ...Option) *Group[K, V] {
	g := new(Group[K, V])
	g.Init(opts...)
	return g
}

// Init configures g, which must not have been used yet, as New would. It
// lets a type that embeds a Group by value (singleflight.Group) configure it
// in place, without copying it.
func (g *Group[K, V]) Init(opts ...Option) {
	for _, o := range opts {
		o(&g.cfg)
	}
}

// Do runs fn once per key at a time; duplicates wait for and share its
// result.
//
// fn receives a context that carries ctx's values but not its cancellation.
// A caller whose ctx ends stops waiting at once with ctx.Err(); the loader
// goes on for the others (see WithCancelWhenAbandoned). shared reports
// whether the result went to more than one caller, this one included.
//
// When ctx can never be cancelled and no loader timeout is set, fn runs in
// the calling goroutine, as in golang.org/x/sync/singleflight; otherwise it
// runs in a new goroutine so that this caller can leave early.
//
// A call made from inside fn with fn's context for the same key runs its own
// function directly instead of waiting for itself (shared is false).
// A key that is not equal to itself (a NaN, or a struct or array holding
// one) matches no execution, as in a Go map: each such call runs its own,
// unshared, and it is never registered (InFlight and Forget do not see it;
// WithMaxInFlight, the loader timeout and Close still apply).
// A nil ctx is treated as context.Background().
func (g *Group[K, V]) Do(ctx context.Context, key K, fn func(context.Context) (V, error)) (v V, shared bool, err error) {
	if ctx == nil {
		ctx = context.Background()
	}
	obs := g.cfg.obs
	var start time.Duration
	if obs != nil {
		start = monotime()
		emit(obs, EventRequest, ctx, 0)
	}
	if fn == nil {
		return v, false, g.reject(ctx, ErrNilFunc)
	}

	si := uint8(maphash.Comparable(seed, key) & (shardCount - 1))
	sh := &g.shards[si]
	sh.mu.Lock()
	if g.closed.Load() {
		sh.mu.Unlock()
		return v, false, g.reject(ctx, ErrClosed)
	}
	if c, ok := sh.m[key]; ok {
		return g.join(ctx, sh, c, fn, start)
	}
	// A new execution: register it (which releases the shard's mutex) and
	// run it, inline, in this goroutine, or in a new one while this caller
	// waits for it.
	c, timer, done, err := g.register(ctx, si, key, true, true)
	if err != nil {
		return v, false, err
	}
	if done == nil { // inline
		g.run(c, fn, nil)
		// The result is final: run's own completion attempt took sh.mu
		// after whichever completion (its own, or Close's) wrote it.
		v, shared, err = c.val, c.shared, c.err
		if g.cfg.obs != nil {
			g.waitDone(ctx, c, true, shared, err, start)
		}
		return v, shared, err
	}
	go g.run(c, fn, timer)
	return g.wait(ctx, c, done, true, start)
}

// register makes a new execution of key current, or refuses it under
// WithMaxInFlight. The mutex of shard si is held on entry and released here.
// On success it returns the execution, now in flight, which Do or
// the caller itself (Start) must run; the loader timeout's timer, if
// ownTimer asks for one (StartMany times its executions together); and
// the channel the caller waits on, nil when fn may run inline, in the
// caller's goroutine: mayInline, ctx can never be cancelled and there is
// no loader timeout.
//
// The results are unnamed on purpose: the loader timeout's closure captures
// c, and a named result would be captured by reference, costing an
// allocation per execution (benchmark Leader: 2 allocs instead of 1).
func (g *Group[K, V]) register(ctx context.Context, si uint8, key K, ownTimer, mayInline bool) (*call[K, V], *time.Timer, chan struct{}, error) {
	sh := &g.shards[si]
	obs := g.cfg.obs
	if max := g.cfg.maxInFlight; max > 0 && g.loaders.Add(1) > max {
		g.loaders.Add(-1)
		sh.mu.Unlock()
		return nil, nil, nil, g.reject(ctx, ErrTooManyInFlight)
	}
	// A key not equal to itself (a NaN, or a struct or array holding one)
	// could be stored in m but never found again, not even by delete: its
	// execution runs detached, as no caller could ever join it anyway.
	listed := key == key
	var n int64
	if obs != nil && listed {
		n = g.total.Add(1)
	}
	inline := mayInline && ctx.Done() == nil && g.cfg.timeout == 0
	c := &call[K, V]{key: key, shard: si, waiters: 1, current: listed}
	if ctx.Done() == nil {
		// ctx can never be cancelled, so it has no cancellation to hide.
		c.lctx.parent = ctx
	} else {
		c.lctx.parent = context.WithoutCancel(ctx)
	}
	var done chan struct{}
	if !inline {
		done = make(chan struct{})
		c.done = done
	}
	if obs != nil {
		c.id = g.flights.Add(1)
	}
	var timer *time.Timer
	if d := g.cfg.timeout; d > 0 {
		c.lctx.extra.Store(&loaderExtra{deadline: time.Now().Add(d)}) // c is not published yet
		if ownTimer {
			timer = time.AfterFunc(d, func() { g.expire(c) })
		}
	}
	if listed {
		if sh.m == nil {
			sh.m = make(map[K]*call[K, V])
		}
		sh.m[key] = c
	} else {
		sh.detach(c)
	}
	sh.mu.Unlock()

	if obs != nil {
		if listed {
			emitInFlight(obs, n, 1)
		}
		emit(obs, EventLoaderStarted, &c.lctx, c.id)
	}
	return c, timer, done, nil
}

// join attaches a caller to the execution c of its key. sh.mu is held on
// entry and released here.
func (g *Group[K, V]) join(ctx context.Context, sh *shard[K, V], c *call[K, V], fn func(context.Context) (V, error), start time.Duration) (V, bool, error) {
	done, a := g.attach(ctx, sh, c)
	switch a {
	case attachReentrant:
		v, err := fn(ctx)
		return v, false, err
	case attachRefused:
		var zero V
		return zero, false, g.reject(ctx, ErrTooManyWaiters)
	}
	if obs := g.cfg.obs; obs != nil {
		emit(obs, EventShared, ctx, c.id)
	}
	return g.wait(ctx, c, done, false, start)
}

// attachment is what attach did with a caller.
type attachment uint8

const (
	attachWaits     attachment = iota // counted as a waiter of c; it must wait (or leave through wait)
	attachReentrant                   // runs inside c's own loader: it must run its fn directly
	attachRefused                     // WithMaxWaiters is reached: it must be rejected
)

// attach decides how a caller joins the execution c of its key, counting it
// as a waiter when it will wait, and then returns the channel it waits on.
// sh.mu is held on entry and released here. It is apart from join so that
// the admission decision, taken under the shard lock, reads on its own.
func (g *Group[K, V]) attach(ctx context.Context, sh *shard[K, V], c *call[K, V]) (chan struct{}, attachment) {
	// Only a caller that would wait can deadlock, so only it pays for the
	// reentrancy check: is this caller running inside c's own loader?
	if ctx.Value(ancestorKey{&c.lctx}) != nil {
		sh.mu.Unlock()
		return nil, attachReentrant
	}
	if max := g.cfg.maxWaiters; max > 0 && int(c.waiters) >= max {
		sh.mu.Unlock()
		return nil, attachRefused
	}
	done := sh.enlist(c)
	sh.mu.Unlock()
	return done, attachWaits
}

// waveSize is how many waiters share one channel (see enlist).
const waveSize = 64

// enlist counts one more waiter of c, an execution of sh, and returns the
// channel it waits on. sh.mu must be held.
//
// Waiters are enlisted in waves of waveSize, a channel each, which
// completion closes in the order the waves came (c.done is the newest,
// sh.older[c] the others). Closing one channel makes the runtime ready its
// receivers in the reverse of the order they blocked in, and the run
// queues then run all but the first few hundred latest first: in a herd
// of thousands, those who came first (and have waited longest) would run
// last, and the herd's tail latency would be its whole wake-up time
// (docs/PERFORMANCE.md, "Speed goals"). Waves keep the reversal within
// one wave.
func (sh *shard[K, V]) enlist(c *call[K, V]) chan struct{} {
	c.waiters++
	switch {
	case c.done == nil:
		c.done = make(chan struct{})
	case c.waiters%waveSize == 0:
		if sh.older == nil {
			sh.older = make(map[*call[K, V]][]chan struct{})
		}
		sh.older[c] = append(sh.older[c], c.done)
		c.done = make(chan struct{})
	}
	return c.done
}

// wait blocks until c finishes or the caller's ctx ends, whichever is
// first. done is the channel enlist gave the caller.
func (g *Group[K, V]) wait(ctx context.Context, c *call[K, V], done chan struct{}, leader bool, start time.Duration) (V, bool, error) {
	cancelled := ctx.Done()
	if cancelled == nil {
		// A plain receive is much cheaper than a select when a thousand
		// waiters wake at once.
		<-done
		if g.cfg.obs != nil {
			g.waitDone(ctx, c, leader, c.shared, c.err, start)
		}
		return c.val, c.shared, c.err
	}
	select {
	case <-done:
		if g.cfg.obs != nil {
			g.waitDone(ctx, c, leader, c.shared, c.err, start)
		}
		return c.val, c.shared, c.err
	case <-cancelled:
	}
	sh := &g.shards[c.shard]
	sh.mu.Lock()
	if c.finished {
		// The result was ready as the caller gave up: it counted as a
		// receiver, so give it the result.
		sh.mu.Unlock()
		if g.cfg.obs != nil {
			g.waitDone(ctx, c, leader, c.shared, c.err, start)
		}
		return c.val, c.shared, c.err
	}
	c.waiters--
	if c.waiters == 0 && g.cfg.cancelAbandoned {
		// Abandon in the same critical section that saw the last caller
		// leave: a caller arriving after this unlock finds the key free and
		// starts a new execution. Completing after the unlock would let it
		// join this one and inherit ErrAbandoned while its own ctx is alive.
		g.complete(c, *new(V), ErrAbandoned, ctxCanceled, ErrAbandoned)
		if obs := g.cfg.obs; obs != nil {
			emit(obs, EventAbandoned, &c.lctx, c.id)
		}
	} else {
		sh.mu.Unlock()
	}
	err := ctx.Err()
	if g.cfg.obs != nil {
		g.waitDone(ctx, c, leader, false, err, start)
	}
	var zero V
	return zero, false, err
}

// run executes fn under c's context and completes c with its outcome.
// Panics and runtime.Goexit become errors: a recover in a deferred function
// cannot tell Goexit from a normal return, so two defers cooperate, the inner
// one recovering panics and the outer one seeing that fn neither returned nor
// panicked (the technique of golang.org/x/sync/singleflight, CL 134395).
func (g *Group[K, V]) run(c *call[K, V], fn func(context.Context) (V, error), timer *time.Timer) {
	var (
		v         V
		err       error
		returned  bool
		panicked  bool
		startedAt time.Duration
	)
	obs := g.cfg.obs
	if obs != nil {
		startedAt = monotime()
	}
	defer func() {
		if !returned && !panicked {
			err = errGoexit
			panicked = true
		}
		g.loaderDone(c, timer, v, err, panicked, startedAt)
	}()
	func() {
		defer func() {
			if !returned {
				if r := recover(); r != nil {
					err = &PanicError{Value: r, Stack: debug.Stack()}
					panicked = true
				}
			}
		}()
		v, err = fn(&c.lctx)
		returned = true
	}()
}

// loaderDone delivers fn's outcome, unless a timeout, Close or abandonment
// completed c first, in which case the result is late and dropped.
func (g *Group[K, V]) loaderDone(c *call[K, V], timer *time.Timer, v V, err error, panicked bool, startedAt time.Duration) {
	if g.cfg.maxInFlight > 0 {
		g.loaders.Add(-1) // fn has returned; see Group.loaders
	}
	if timer != nil {
		timer.Stop()
	}
	g.shards[c.shard].mu.Lock()
	onTime := g.complete(c, v, err, ctxLive, nil)
	c.lctx.cancel(ctxCanceled, nil)
	obs := g.cfg.obs
	if obs == nil {
		return
	}
	e := Event{Ctx: &c.lctx, Flight: c.id, Duration: monotime() - startedAt, Err: err}
	switch {
	case !onTime:
		e.Kind = EventLateResult
	case panicked:
		e.Kind = EventLoaderPanicked
	case err != nil:
		e.Kind = EventLoaderFailed
	default:
		e.Kind = EventLoaderSucceeded
	}
	obs.ObserveFlight(e)
}

// expire runs when the loader timeout fires before fn returned. An
// execution released by StopTimeout is left alone.
func (g *Group[K, V]) expire(c *call[K, V]) {
	d := g.cfg.timeout
	if !c.lctx.fire() {
		return
	}
	g.shards[c.shard].mu.Lock()
	if !g.complete(c, *new(V), &timeoutError{after: d.String()}, ctxDeadlineExceeded, nil) {
		return
	}
	if obs := g.cfg.obs; obs != nil {
		obs.ObserveFlight(Event{Kind: EventTimeout, Ctx: &c.lctx, Flight: c.id, Duration: d})
	}
}

// complete makes (v, err) the final result of c, releases its waiters and
// removes c from its shard if it is still the current execution of its key.
// The mutex of c's shard is held on entry and released here, so that a
// caller that found c unfinished under that lock (wait, when the last
// caller leaves) completes it in the same critical section. Only the first
// completion counts; complete reports whether it was this one.
//
// When the completion does not come from the loader (timeout, Close,
// abandonment), cancel is the state its context ends in, with cause for
// context.Cause: it is cancelled in the same critical section, so anyone who sees the
// execution end also sees its loader's context ended, and a loader returning
// at that moment cannot win the race with a plain ctx.Err().
func (g *Group[K, V]) complete(c *call[K, V], v V, err error, cancel uint32, cause error) bool {
	sh := &g.shards[c.shard]
	if c.finished {
		sh.mu.Unlock()
		return false
	}
	if cancel != ctxLive {
		c.lctx.cancel(cancel, cause)
	}
	c.finished = true
	c.val, c.err, c.shared = v, err, c.waiters > 1
	n := int64(-1)
	if c.current {
		c.current = false
		delete(sh.m, c.key)
		if g.cfg.obs != nil {
			n = g.total.Add(-1)
		}
	} else {
		delete(sh.detached, c)
	}
	if len(sh.older) > 0 {
		if older, ok := sh.older[c]; ok {
			for _, ch := range older {
				close(ch)
			}
			delete(sh.older, c)
		}
	}
	if c.done != nil {
		close(c.done)
	}
	sh.mu.Unlock()
	if obs := g.cfg.obs; obs != nil && n >= 0 {
		emitInFlight(obs, n, -1)
	}
	return true
}

// detach records c, which is not in sh.m, as running, so that Close can
// still cancel it. sh.mu must be held.
func (sh *shard[K, V]) detach(c *call[K, V]) {
	if sh.detached == nil {
		sh.detached = make(map[*call[K, V]]struct{})
	}
	sh.detached[c] = struct{}{}
}

// reject reports a refused call. Kept out of line like emit: inlined, its
// Event would sit in the frames of Do and join on every waiter's stack.
//
//go:noinline
func (g *Group[K, V]) reject(ctx context.Context, err error) error {
	if obs := g.cfg.obs; obs != nil {
		obs.ObserveFlight(Event{Kind: EventRejected, Ctx: ctx, Err: err})
	}
	return err
}

// waitDone reports the end of one caller's wait. Callers check for an
// observer first, so that without one the waiting goroutine's stack never
// has to make room for an Event.
//
//go:noinline
func (g *Group[K, V]) waitDone(ctx context.Context, c *call[K, V], leader, shared bool, err error, start time.Duration) {
	g.cfg.obs.ObserveFlight(Event{Kind: EventWaitDone, Ctx: ctx, Flight: c.id, Leader: leader, Shared: shared, Duration: monotime() - start, Err: err})
}

// emit and emitInFlight build an Event in their own frame, kept out of line
// so that the hot paths' frames (and the stacks of a thousand waiting
// goroutines) do not carry one. obs is not nil.
//
//go:noinline
func emit(obs Observer, kind EventKind, ctx context.Context, flight uint64) {
	obs.ObserveFlight(Event{Kind: kind, Ctx: ctx, Flight: flight})
}

//go:noinline
func emitInFlight(obs Observer, n int64, delta int) {
	obs.ObserveFlight(Event{Kind: EventInFlight, InFlight: int(n), InFlightDelta: delta})
}

// DoChan is Do delivering one Result on a buffered channel; an unread
// channel leaks nothing. The call runs in a new goroutine, which ends when Do
// would have returned.
func (g *Group[K, V]) DoChan(ctx context.Context, key K, fn func(context.Context) (V, error)) <-chan Result[V] {
	ch := make(chan Result[V], 1)
	go func() {
		sent := false
		defer func() {
			// fn ran inline here and called runtime.Goexit: the channel
			// still gets its one Result.
			if !sent {
				ch <- Result[V]{Err: errGoexit}
			}
		}()
		v, shared, err := g.Do(ctx, key, fn)
		ch <- Result[V]{Val: v, Shared: shared, Err: err}
		sent = true
	}()
	return ch
}

// Forget makes later calls for key start a new execution. The running one is
// not disturbed: its callers still get its result, its completion will not
// remove the newer execution, and its loader counts against WithMaxInFlight
// until it returns.
func (g *Group[K, V]) Forget(key K) {
	si := uint8(maphash.Comparable(seed, key) & (shardCount - 1))
	sh := &g.shards[si]
	sh.mu.Lock()
	n := int64(-1)
	if c, ok := sh.m[key]; ok {
		c.current = false
		delete(sh.m, key)
		if g.cfg.obs != nil {
			n = g.total.Add(-1)
		}
		sh.detach(c)
	}
	sh.mu.Unlock()
	if obs := g.cfg.obs; obs != nil && n >= 0 {
		emitInFlight(obs, n, -1)
	}
}

// ForgetFunc is Forget for every registered key for which match returns
// true (bulk invalidation). match runs under a shard's lock: it must be
// fast and must not call back into the Group.
func (g *Group[K, V]) ForgetFunc(match func(K) bool) {
	for i := range g.shards {
		sh := &g.shards[i]
		var counts []int64 // one per key forgotten, reported after the lock
		sh.mu.Lock()
		for key, c := range sh.m {
			if match(key) {
				c.current = false
				delete(sh.m, key)
				if g.cfg.obs != nil {
					counts = append(counts, g.total.Add(-1))
				}
				sh.detach(c)
			}
		}
		sh.mu.Unlock()
		if obs := g.cfg.obs; obs != nil {
			for _, n := range counts {
				emitInFlight(obs, n, -1)
			}
		}
	}
}

// InFlight returns the number of keys whose execution is still registered,
// that is, that a new caller would join. It is not what WithMaxInFlight
// bounds: a loader that outlived its timeout, or whose key was forgotten,
// still holds its slot until it returns, but its key is no longer counted
// here.
func (g *Group[K, V]) InFlight() int {
	n := 0
	for i := range g.shards {
		sh := &g.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Close cancels every running loader's context with cause ErrClosed, releases
// their waiters with ErrClosed, and makes every later call return ErrClosed
// without running fn. It does not wait for loaders to return. Close is
// idempotent and always returns nil.
func (g *Group[K, V]) Close() error {
	if !g.closed.CompareAndSwap(false, true) {
		return nil
	}
	var running []*call[K, V]
	for i := range g.shards {
		sh := &g.shards[i]
		// Do checks closed under this lock, so after it no new execution
		// can be registered in this shard.
		sh.mu.Lock()
		for _, c := range sh.m {
			running = append(running, c)
		}
		for c := range sh.detached {
			running = append(running, c)
		}
		sh.mu.Unlock()
	}
	for _, c := range running {
		g.shards[c.shard].mu.Lock()
		g.complete(c, *new(V), ErrClosed, ctxCanceled, ErrClosed)
	}
	return nil
}
