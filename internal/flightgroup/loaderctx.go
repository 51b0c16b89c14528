package flightgroup

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// loaderCtx is the context.Context a loader runs under. It lives inside the
// call record, so starting an execution allocates no context of its own.
//
// It carries the values of the leader's context (trace IDs, loggers) but never
// the leader's cancellation: it ends only when the execution does (the loader
// returned, the loader timeout fired, the Group was closed, or every caller
// left under WithCancelWhenAbandoned).
type loaderCtx struct {
	// parent supplies Value. It is the leader's context when that context
	// can never be cancelled (Done() == nil), and context.WithoutCancel of it
	// otherwise, so that context.Cause never reports the leader's cause.
	// Written once before the loader starts; read-only afterwards.
	parent context.Context

	// flags holds the state (ctxLive until cancellation, then ctxCanceled or
	// ctxDeadlineExceeded; it changes once) and flagWatched, set under mu by
	// the first Done or AfterFunc call. Until someone watches, cancel is a
	// single compare-and-swap; afterwards it takes mu to close done and run
	// the AfterFunc registrations.
	flags atomic.Uint32

	mu sync.Mutex
	// done is created on the first Done call (most loaders never ask) and
	// closed on cancellation. Guarded by mu.
	done chan struct{}
	// extra holds what only some executions need (a deadline, AfterFunc
	// registrations, a cancellation cause), so that the common execution
	// record stays small. Set at most once; see loaderExtra for its fields.
	extra atomic.Pointer[loaderExtra]
}

// The states in loaderCtx.flags, and its watched bit.
const (
	ctxLive uint32 = iota
	ctxCanceled
	ctxDeadlineExceeded

	stateMask   uint32 = 3
	flagWatched uint32 = 4
)

// loaderExtra is the rarely needed part of a loaderCtx.
type loaderExtra struct {
	// deadline is the loader timeout's deadline, zero without one. Written
	// before the loader starts; read-only afterwards.
	deadline time.Time
	// timeout is the loader timeout's state (timeoutArmed, then at most one
	// change: timeoutReleased by StopTimeout, or timeoutFired by the timer).
	// The first change wins, so a released execution is never expired, and
	// an expired one never reported released.
	timeout atomic.Uint32
	// afters lists the AfterFunc registrations that have neither run nor
	// been stopped (a list, not a slice: the struct stays in the 64-byte
	// size class that every execution with a deadline allocates). Guarded
	// by the loaderCtx's mu.
	afters *afterFunc
	// caused is a standard context cancelled with the cancellation cause,
	// set (before state changes) when that cause is neither Canceled nor
	// DeadlineExceeded. Value delegates to it once set, which is how
	// context.Cause finds ErrClosed or ErrAbandoned on a context type it does
	// not know.
	caused atomic.Pointer[causedCtx]
	// load is the context LoadContext made for the execution's origin
	// call, which ends when this context does (with its state and cause).
	// Guarded by the loaderCtx's mu.
	load *loadCtx
}

type causedCtx struct{ context.Context }

// The states in loaderExtra.timeout.
const (
	timeoutArmed uint32 = iota
	timeoutReleased
	timeoutFired
)

// StopTimeout releases the execution whose loader context is ctx from the
// Group's loader timeout: the timeout no longer completes it, and ctx
// reports no deadline from then on (Close and the other cancellations
// still apply). ctx must be the context the Group passed to fn, or a
// Flight's Context, not one derived from it. StopTimeout reports whether
// the execution is released: false when the timeout already fired, for any
// other context, and without a loader timeout.
//
// A caller whose fn has finished its time-critical part (the origin) and
// goes on with work bounded otherwise (writes under their own deadline)
// calls it so that the loader timeout cannot cut that work short and lose
// a result obtained in time. The waiters are then bounded by fn alone.
// The cancel function of LoadContext does it too.
func StopTimeout(ctx context.Context) bool {
	l, ok := ctx.(*loaderCtx)
	return ok && l.release()
}

// release is StopTimeout for l.
func (l *loaderCtx) release() bool {
	x := l.extra.Load()
	if x == nil || x.deadline.IsZero() {
		return false
	}
	return x.timeout.CompareAndSwap(timeoutArmed, timeoutReleased) || x.timeout.Load() == timeoutReleased
}

// fire marks l's loader timeout fired, unless StopTimeout released it
// first: only then may the timeout complete the execution.
func (l *loaderCtx) fire() bool {
	x := l.extra.Load()
	return x == nil || x.timeout.CompareAndSwap(timeoutArmed, timeoutFired)
}

// extraLocked returns l's loaderExtra, creating it. l.mu must be held, or l
// not yet published.
func (l *loaderCtx) extraLocked() *loaderExtra {
	x := l.extra.Load()
	if x == nil {
		x = new(loaderExtra)
		l.extra.Store(x)
	}
	return x
}

// loadCtx is the context LoadContext makes: a loader context of its own,
// with its own deadline, inside the execution's.
type loadCtx struct {
	loaderCtx
	x     loaderExtra // its extra: the deadline
	timer *time.Timer // ends it at the deadline
}

// LoadContext is context.WithTimeout(ctx, d) for the part of fn that calls
// the origin, when ctx is the context the Group passed to fn or a Flight's
// Context: the context it returns carries ctx's values and ends d from now
// (context.DeadlineExceeded; no later than ctx's own deadline), when ctx
// ends (with ctx's error and cause), or when cancel is called
// (context.Canceled), whichever comes first. Unlike a standard context
// derived from ctx, it costs ctx no Done channel and no AfterFunc
// registration (nor, under a value context, a goroutine). For any other
// ctx, for one that has ended or runs without a loader timeout, and for a
// second load context of one execution while the first is live, it is
// context.WithTimeout.
//
// cancel also says that the origin call is over: it releases the execution
// from the Group's loader timeout, as StopTimeout does, so that the work
// fn does after the origin answered (writes bounded by their own
// deadlines) cannot be cut short and lose a result obtained in time. A
// caller therefore calls cancel once the origin has returned, not before.
func LoadContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	p, ok := ctx.(*loaderCtx)
	if !ok {
		return context.WithTimeout(ctx, d)
	}
	// Its parent for Value is ctx without its cancellation, as a loader
	// context's own parent is: context.Cause must find this context's
	// cause, not ctx's.
	lc := &loadCtx{loaderCtx: loaderCtx{parent: context.WithoutCancel(p)}}
	lc.extra.Store(&lc.x)
	p.mu.Lock()
	// Watched: cancel now takes the locked path, which ends lc too.
	if p.flags.Or(flagWatched)&stateMask != ctxLive {
		p.mu.Unlock()
		return p.timeoutReleasing(d)
	}
	// Without a loader timeout (no extra yet, or one without a deadline)
	// there is no hard timeout to release and no reason to avoid the
	// standard context; nor for a second load context while one is live.
	px := p.extra.Load()
	if px == nil || px.deadline.IsZero() || (px.load != nil && px.load.flags.Load()&stateMask == ctxLive) {
		p.mu.Unlock()
		return p.timeoutReleasing(d)
	}
	px.load = lc
	// The deadline: d from now, or ctx's own when earlier (its Deadline,
	// read here under its lock, where px is at hand).
	lc.x.deadline = time.Now().Add(d)
	if pd := px.deadline; px.timeout.Load() != timeoutReleased && pd.Before(lc.x.deadline) {
		lc.x.deadline = pd
	}
	p.mu.Unlock()
	lc.timer = time.AfterFunc(time.Until(lc.x.deadline), func() { lc.cancel(ctxDeadlineExceeded, nil) })
	// cancel: end lc and its timer, and release the execution from the
	// loader timeout. StopTimeout's work, without its answer: px exists,
	// and without a deadline its timeout state is never read.
	return lc, func() {
		lc.timer.Stop()
		lc.cancel(ctxCanceled, nil)
		px.timeout.CompareAndSwap(timeoutArmed, timeoutReleased)
	}
}

// timeoutReleasing is LoadContext's standard fallback for l: its cancel
// releases l's execution from the loader timeout too.
func (l *loaderCtx) timeoutReleasing(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(l, d)
	return ctx, func() {
		cancel()
		l.release()
	}
}

// afterFunc is one AfterFunc registration; its pointer identifies it.
type afterFunc struct {
	f    func()
	next *afterFunc
}

// closedchan is returned by Done after cancellation when no channel existed.
var closedchan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// ancestorKey asks a context chain whether it runs inside the execution l:
// loaderCtx.Value answers it with l. It is how Do detects a reentrant call
// without any cost on the path that starts an execution.
type ancestorKey struct{ l *loaderCtx }

func (l *loaderCtx) Deadline() (time.Time, bool) {
	if x := l.extra.Load(); x != nil && !x.deadline.IsZero() && x.timeout.Load() != timeoutReleased {
		return x.deadline, true
	}
	return time.Time{}, false
}

func (l *loaderCtx) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		if l.flags.Or(flagWatched)&stateMask != ctxLive {
			l.done = closedchan
		} else {
			l.done = make(chan struct{})
		}
	}
	return l.done
}

func (l *loaderCtx) Err() error {
	switch l.flags.Load() & stateMask {
	case ctxCanceled:
		return context.Canceled
	case ctxDeadlineExceeded:
		return context.DeadlineExceeded
	}
	return nil
}

func (l *loaderCtx) Value(key any) any {
	if k, ok := key.(ancestorKey); ok && k.l == l {
		return l
	}
	if x := l.extra.Load(); x != nil {
		if c := x.caused.Load(); c != nil {
			return c.Value(key)
		}
	}
	return l.parent.Value(key)
}

// AfterFunc lets context.AfterFunc and context.WithCancel children of a loader
// context hook into its cancellation without starting a goroutine each.
func (l *loaderCtx) AfterFunc(f func()) (stop func() bool) {
	a := &afterFunc{f: f}
	l.mu.Lock()
	if l.flags.Or(flagWatched)&stateMask != ctxLive {
		l.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	x := l.extraLocked()
	a.next, x.afters = x.afters, a
	l.mu.Unlock()
	return func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for p := &x.afters; *p != nil; p = &(*p).next {
			if *p == a {
				*p = a.next
				return true
			}
		}
		return false
	}
}

func (l *loaderCtx) String() string { return "singleflight.loaderContext" }

// cancel ends the context with state (ctxCanceled or ctxDeadlineExceeded)
// and, for context.Cause, cause. Only the first call has an effect.
func (l *loaderCtx) cancel(state uint32, cause error) {
	if cause == nil && l.flags.CompareAndSwap(ctxLive, state) {
		return // nobody watches: nothing to close, nothing to run
	}
	l.mu.Lock()
	if l.flags.Load()&stateMask != ctxLive {
		l.mu.Unlock()
		return
	}
	if cause != nil {
		// Rare path (Close, abandonment): pay for a standard context only
		// here, so that context.Cause can report the cause. It is published
		// before the state changes, so whoever sees Err also finds it.
		c, cancelCause := context.WithCancelCause(l.parent)
		cancelCause(cause)
		l.extraLocked().caused.Store(&causedCtx{c})
	}
	// Done and AfterFunc change flags only under mu; the lock-free path
	// above may still move it from 0 to a state, so change it with a CAS,
	// and let the first cancellation win.
	for {
		old := l.flags.Load()
		if old&stateMask != ctxLive {
			l.mu.Unlock()
			return
		}
		if l.flags.CompareAndSwap(old, old|state) {
			break
		}
	}
	var afters *afterFunc
	var load *loadCtx
	if x := l.extra.Load(); x != nil {
		afters, x.afters = x.afters, nil
		load = x.load
	}
	if l.done == nil {
		l.done = closedchan
	} else {
		close(l.done)
	}
	l.mu.Unlock()
	if load != nil {
		load.cancel(state, cause)
	}
	for a := afters; a != nil; a = a.next {
		go a.f()
	}
}
