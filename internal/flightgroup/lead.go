package flightgroup

import (
	"context"
	"time"
)

// DoChanLead is DoChan for a caller that must know at once whether it
// leads. led is true when fn is key's new execution (or, for a reentrant
// call, runs directly): fn will then be called, in another goroutine,
// whatever happens next. led is false when the call joined the execution in
// flight, whose result the channel will deliver, or was refused (closed,
// limits, nil fn), and fn will not be called.
//
// A caller that leads some keys and joins others (a batch that still
// passes a function per key) needs this to go on with the keys it leads
// without waiting for the ones it joined, which another caller is loading
// and which may in turn wait for keys it leads. The decision is made in the
// calling goroutine, before fn can run, so fn may wait for something the
// caller does after DoChanLead returns. Start is the same decision for a
// caller that loads the keys it leads itself, as the Cache's batches do.
//
// It is not part of package singleflight's API, which is fixed.
func (g *Group[K, V]) DoChanLead(ctx context.Context, key K, fn func(context.Context) (V, error)) (<-chan Result[V], bool) {
	if ctx == nil {
		ctx = context.Background()
	}
	ch := make(chan Result[V], 1)
	// Admission is Do's, step for step, except that nothing here waits or
	// runs fn: that happens in the goroutines started below.
	obs := g.cfg.obs
	var start time.Duration
	if obs != nil {
		start = monotime()
		emit(obs, EventRequest, ctx, 0)
	}
	if fn == nil {
		ch <- Result[V]{Err: g.reject(ctx, ErrNilFunc)}
		return ch, false
	}
	si := shardOf(key)
	sh := &g.shards[si]
	sh.mu.Lock()
	if g.closed.Load() {
		sh.mu.Unlock()
		ch <- Result[V]{Err: g.reject(ctx, ErrClosed)}
		return ch, false
	}
	if c, ok := sh.m[key]; ok {
		switch g.attach(ctx, sh, c) {
		case attachReentrant:
			go deliver(ch, func() (V, bool, error) {
				v, err := fn(ctx)
				return v, false, err
			})
			return ch, true
		case attachRefused:
			ch <- Result[V]{Err: g.reject(ctx, ErrTooManyWaiters)}
			return ch, false
		}
		if obs != nil {
			emit(obs, EventShared, ctx, c.id)
		}
		go deliver(ch, func() (V, bool, error) { return g.wait(ctx, c, false, start) })
		return ch, false
	}
	c, timer, inline, err := g.register(ctx, si, key)
	if err != nil {
		ch <- Result[V]{Err: err}
		return ch, false
	}
	go deliver(ch, func() (V, bool, error) { return g.execute(ctx, c, fn, timer, inline, start) })
	return ch, true
}

// deliver sends call's outcome on ch, which has room for it. When call ends
// the goroutine instead (fn ran inline here and called runtime.Goexit), ch
// still gets its one Result.
func deliver[V any](ch chan<- Result[V], call func() (V, bool, error)) {
	sent := false
	defer func() {
		if !sent {
			ch <- Result[V]{Err: errGoexit}
		}
	}()
	v, shared, err := call()
	ch <- Result[V]{Val: v, Shared: shared, Err: err}
	sent = true
}
