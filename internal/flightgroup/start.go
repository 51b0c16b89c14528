package flightgroup

import (
	"context"
	"errors"
	"hash/maphash"
	"sync/atomic"
	"time"
)

// Flight is one caller's part in an execution that Start registered or
// joined. It is a small value; copy it freely, but Complete and Wait each
// at most once per Start.
type Flight[K comparable, V any] struct {
	g         *Group[K, V]
	c         *call[K, V]
	done      chan struct{} // the channel Wait waits on
	timer     *time.Timer   // the loader timeout of a led execution (Start)
	shared    *sharedTimer  // the loader timeout it shares with others (StartMany)
	start     time.Duration // when Start was called (observer only)
	startedAt time.Duration // when a led execution started (observer only)
	led       bool
}

// sharedTimer is the one loader-timeout timer of the executions a
// StartMany registered: they start together, so they expire together. The
// last Complete stops it, so it never holds finished executions (and their
// values) until the timeout.
type sharedTimer struct {
	t    *time.Timer
	left atomic.Int32 // led executions not yet completed
}

// Start is Do for a caller that runs the loads itself, for many keys in
// one call of its own (a batch). For a key with an execution in flight it
// joins that execution, like Do; otherwise it registers a new execution of
// which the caller is the leader (Led), and no function runs: the caller
// loads the key however it likes and delivers the result with Complete.
// Either way the caller learns at once which it is, and gets the result
// with Wait.
//
// A caller that starts many keys should pass a ctx that cannot be
// cancelled (context.WithoutCancel of its own, once) and Wait on its own:
// the execution then keeps that ctx as is instead of wrapping it per key.
//
// A led execution is like one started by Do: other callers of the key join
// it, the loader timeout completes it if Complete comes too late, Close
// cancels its Context, and it holds a WithMaxInFlight slot until Complete,
// which a led Flight must therefore always get. A refused call
// (closed, limits) returns the error and a zero Flight. Unlike Do, Start
// cannot see that it is called from inside the execution it would join:
// a caller must not Start keys it is itself loading.
func (g *Group[K, V]) Start(ctx context.Context, key K) (Flight[K, V], error) {
	if ctx == nil {
		ctx = context.Background()
	}
	return g.start(ctx, key, true)
}

// StartMany is Start for every key of keys, into flights and errs (both as
// long as keys), with one loader-timeout timer for all the executions it
// registers instead of one each: a batch registers its keys together, and
// they time out together.
func (g *Group[K, V]) StartMany(ctx context.Context, keys []K, flights []Flight[K, V], errs []error) {
	if ctx == nil {
		ctx = context.Background()
	}
	var led []*call[K, V]
	for i, k := range keys {
		flights[i], errs[i] = g.start(ctx, k, false)
		if flights[i].led {
			led = append(led, flights[i].c)
		}
	}
	d := g.cfg.timeout
	if d <= 0 || len(led) == 0 {
		return
	}
	st := &sharedTimer{}
	st.left.Store(int32(len(led)))
	st.t = time.AfterFunc(d, func() {
		for _, c := range led {
			g.expire(c)
		}
	})
	for i := range flights {
		if flights[i].led {
			flights[i].shared = st
		}
	}
}

// start registers or joins key's execution; ownTimer gives a registered
// one its own loader-timeout timer (Start), else the caller sets one
// (StartMany). Each led execution's deadline is set here either way.
func (g *Group[K, V]) start(ctx context.Context, key K, ownTimer bool) (Flight[K, V], error) {
	obs := g.cfg.obs
	f := Flight[K, V]{g: g}
	if obs != nil {
		f.start = monotime()
		emit(obs, EventRequest, ctx, 0)
	}
	si := uint8(maphash.Comparable(seed, key) & (shardCount - 1))
	sh := &g.shards[si]
	sh.mu.Lock()
	if g.closed.Load() {
		sh.mu.Unlock()
		return Flight[K, V]{}, g.reject(ctx, ErrClosed)
	}
	if c, ok := sh.m[key]; ok {
		if max := g.cfg.maxWaiters; max > 0 && int(c.waiters) >= max {
			sh.mu.Unlock()
			return Flight[K, V]{}, g.reject(ctx, ErrTooManyWaiters)
		}
		f.done = sh.enlist(c)
		sh.mu.Unlock()
		if obs != nil {
			emit(obs, EventShared, ctx, c.id)
		}
		f.c = c
		return f, nil
	}

	// A new execution, registered as Do registers one that runs in its own
	// goroutine; here the caller is that goroutine, and its Complete is the
	// loader returning (which frees the WithMaxInFlight slot).
	c, timer, done, err := g.register(ctx, si, key, ownTimer, false)
	if err != nil {
		return Flight[K, V]{}, err
	}
	if obs != nil {
		f.startedAt = monotime()
	}
	f.timer = timer
	f.c, f.done, f.led = c, done, true
	return f, nil
}

// Led reports whether the caller leads the execution: it must then call
// Complete.
func (f Flight[K, V]) Led() bool { return f.led }

// Context is the context of a led execution, to load under: it carries the
// values of the ctx given to Start, not its cancellation, and it ends at the
// loader timeout, on Close, or once Complete has delivered the result.
func (f Flight[K, V]) Context() context.Context { return &f.c.lctx }

// Complete delivers the result of a led execution to every caller that
// shares it, as a returning loader does; a result after the loader timeout
// or Close is dropped (EventLateResult). An error matching *PanicError is
// reported as a panic. It does nothing for a joined execution.
func (f Flight[K, V]) Complete(v V, err error) {
	if !f.led {
		return
	}
	panicked := false
	if err != nil {
		var pe *PanicError
		panicked = errors.As(err, &pe)
	}
	if f.shared != nil && f.shared.left.Add(-1) == 0 {
		f.shared.t.Stop()
	}
	f.g.loaderDone(f.c, f.timer, v, err, panicked, f.startedAt)
}

// Wait returns the execution's result, or ctx's error as soon as ctx ends,
// as Do does; the execution goes on for its other callers.
func (f Flight[K, V]) Wait(ctx context.Context) (v V, shared bool, err error) {
	if ctx == nil {
		ctx = context.Background()
	}
	return f.g.wait(ctx, f.c, f.done, f.led, f.start)
}
