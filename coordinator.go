package flightcache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/flightcache/flightcache/internal/coherence"
)

// Coordinator extends single-flight across the instances of a service
// (cluster mode): of all the instances that miss a key at once, one loads
// it under a lease and the others wait for its result and read it from the
// shared tier. Package redislease provides one on Redis.
//
// The Cache calls it from inside its own flight, after the double-check of
// the tiers missed, so an instance asks the Coordinator at most once per
// key at a time, however many of its callers wait for that key.
// Implementations must be safe for concurrent use.
type Coordinator interface {
	// Claim asks to load key. It returns when this instance may go on:
	//
	//   - Claim.Lease is set: this instance holds the key's lease and must
	//     load it, then end the lease with Complete or Fail.
	//   - Claim.Lease is nil and the error is nil: a load of key by another
	//     instance completed (Claim.Done is its token); its value, if it
	//     stored one, is in the shared tier. If the shared tier has no
	//     fresh value, Claim again with After set to Done, so that the same
	//     completion is not reported twice.
	//   - an error matching ErrLeaderFailed: the load failed on the
	//     instance that led it, now or within the failure window.
	//   - an error matching ErrCoalesceTimeout: req.Wait passed while
	//     another instance still held the lease.
	//   - any other error: the Coordinator could not be reached; see
	//     Options.OnCoordinatorFailure.
	//
	// While it waits, Claim takes the lease over when the holder's lease
	// expires without a result (the holder crashed or stalled); the Lease
	// it then returns has TakenOver set.
	Claim(ctx context.Context, key string, req ClaimRequest) (Claim, error)
	// Invalidate fences key: from now on the write of every load of key in
	// progress on any instance is refused, and a recorded failure of key is
	// forgotten. Cache.Set and Cache.Delete call it before writing the
	// shared tier, which is how an explicit write wins over an older load
	// running on another instance.
	//
	// Every method bounds its own calls to the coordination service; the
	// Cache calls Complete and Fail without a deadline of its own, so that
	// a load that ended at the loader timeout still reports its result.
	Invalidate(ctx context.Context, key string) error
}

// ClaimRequest is what Coordinator.Claim is asked.
type ClaimRequest struct {
	// After is the token of a completion the caller has already seen (0 for
	// none); Claim reports only newer ones.
	After uint64
	// Wait bounds how long Claim waits for another instance's load.
	Wait time.Duration
}

// Claim is Coordinator.Claim's answer; see there.
type Claim struct {
	// Lease is set when this instance must load the key.
	Lease Lease
	// Done is the fencing token of the completed load, when Lease is nil.
	Done uint64
	// Waited is how long Claim waited for another instance.
	Waited time.Duration
}

// Lease is one instance's exclusive, time-bounded right to load a key for
// the whole cluster. It is extended in the background while the load runs.
// Exactly one of Complete and Fail must be called, once.
type Lease interface {
	// Token is the lease's fencing token: higher than every token issued
	// for the key before it.
	Token() uint64
	// TakenOver reports that this lease replaced one that expired without
	// a result.
	TakenOver() bool
	// Lost is closed when the lease could not be extended (another instance
	// took over, or the Coordinator was unreachable for the lease's whole
	// TTL). The load goes on; its write will likely be refused.
	Lost() <-chan struct{}
	// Complete writes e (nil: nothing to store) to the shared tier if and
	// only if the lease's token is still the newest for the key (a fenced
	// write), tells the waiting instances the load is done and releases the
	// lease. written is false with a nil error when the write was refused
	// because a newer lease, Set or Delete superseded this load.
	Complete(ctx context.Context, e *Entry) (written bool, err error)
	// Fail releases the lease and tells the waiting instances the load
	// failed: they return an error matching ErrLeaderFailed until the
	// failure window passes. err is this instance's; implementations must
	// not carry its text to other instances (it may hold SQL, host names
	// or secrets, and would reach their callers).
	Fail(ctx context.Context, err error) error
}

// Scope is how far coalescing reaches.
type Scope uint8

// The scopes.
const (
	// ScopeNone: no load was involved (a Result from a tier, a stale value,
	// a failure).
	ScopeNone Scope = iota
	// ScopeLocal: within this process. As Result.Scope: the value came from
	// a load run in this process, by this caller or a caller it shared with.
	ScopeLocal
	// ScopeCluster: across instances, through the Coordinator. As
	// Result.Scope: the value came from a load another instance ran, handed
	// over through the Coordinator and the shared tier.
	ScopeCluster
)

// String returns "none", "local" or "cluster", usable as a metric label.
func (s Scope) String() string {
	switch s {
	case ScopeLocal:
		return "local"
	case ScopeCluster:
		return "cluster"
	}
	return "none"
}

// WaitPolicy is what a follower does when Options.CoalesceWait passes
// while another instance still holds the lease.
type WaitPolicy uint8

// The wait policies.
const (
	// WaitStaleOrLoad, the default: serve the stale value if there is one,
	// else load without caching the result (the behaviour of nginx's
	// proxy_cache_lock_timeout): the caller gets an answer, and the slow
	// leader's write, when it comes, is not raced.
	WaitStaleOrLoad WaitPolicy = iota
	// WaitFail: return an error matching ErrCoalesceTimeout.
	WaitFail
)

// FailurePolicy is what a Cache does when its Coordinator cannot be
// reached at run time.
type FailurePolicy uint8

// The failure policies.
const (
	// DegradeToLocal, the default: coalesce within the process only until
	// the Coordinator answers again, loudly (an EventScopeChanged and a
	// rate-limited warning). Every flight still asks the Coordinator first,
	// so cluster scope comes back by itself.
	DegradeToLocal FailurePolicy = iota
	// FailOnCoordinatorError: the Get fails with an error matching
	// ErrCoordinatorUnavailable.
	FailOnCoordinatorError
)

// Errors of cluster mode.
var (
	// ErrLeaderFailed is matched by the error of a Get whose key's load
	// failed on another instance, just now or within the failure window.
	ErrLeaderFailed = errors.New("flightcache: the load failed on the instance that led it")
	// ErrCoalesceTimeout is matched by the error of a Get that waited
	// Options.CoalesceWait for another instance's load, under WaitFail.
	ErrCoalesceTimeout = errors.New("flightcache: timed out waiting for another instance's load")
	// ErrCoordinatorUnavailable is matched by the error of a Get that could
	// not reach the Coordinator, under FailOnCoordinatorError.
	ErrCoordinatorUnavailable = errors.New("flightcache: coordinator unavailable")
)

// Scope returns the scope the Cache coalesces in right now: ScopeCluster
// with a Coordinator that answers, ScopeLocal without one or while
// degraded (see DegradeToLocal).
func (c *Cache[V]) Scope() Scope {
	return Scope(c.scope.Load())
}

// setScope records the scope and reports a change.
func (c *Cache[V]) setScope(ctx context.Context, s Scope, why error) {
	if Scope(c.scope.Swap(uint32(s))) == s {
		return
	}
	if c.obs != nil {
		c.observe(Event{Kind: EventScopeChanged, Ctx: ctx, Cache: c.name, Scope: s, Err: why})
	}
	if s == ScopeLocal {
		c.log.LogAttrs(ctx, slog.LevelWarn, "flightcache: coordinator unreachable; coalescing within this process only",
			slog.String("cache", c.name), slog.Any("error", why))
	} else {
		c.log.LogAttrs(ctx, slog.LevelInfo, "flightcache: coordinator reachable again; coalescing across the cluster",
			slog.String("cache", c.name))
	}
}

// coordinated is the flight's cluster layer, run by miss.run after the
// double-check of the tiers missed. The story, per instance (the engine
// already made this the only flight of the key in the process):
//
//  1. Claim. The Coordinator either hands this instance the lease (it
//     leads: load, fenced write, broadcast, release; see lead), or waits
//     for the instance that holds it.
//  2. A follower woken by a completion reads the shared tier again. A fresh
//     value there is the result (ScopeCluster). None (the leader stored
//     nothing, or its write was fenced and the newer writer's value is gone
//     already) means Claim again, past that completion: this instance may
//     now lead.
//  3. A leader's failure is every follower's error at once (the
//     Coordinator also remembers it for a short window, so a retry storm
//     stays off the origin).
//  4. A lease that expires without a result is taken over inside Claim by
//     exactly one waiting instance, with a higher token; the old leader's
//     write, should it come back, is then refused by the fence.
//  5. A follower that waits CoalesceWait gives up per OnCoalesceTimeout; a
//     Coordinator that fails is handled per OnCoordinatorFailure. A Get
//     that already found the shared tier unavailable (timeout, open
//     breaker) does not ask the Coordinator, which lives on the same
//     Redis: it pays at most one shared timeout, as without cluster mode.
func (m *miss[V]) coordinated(ctx context.Context, t coherence.Ticket) (*flight[V], error) {
	c := m.c
	if m.sharedDown != sharedUsable {
		return m.coordinatorFailed(ctx, t, fmt.Errorf("flightcache: coordinator not asked, the shared tier is unavailable: %w", m.sharedDown.err()))
	}
	var after uint64
	deadline := time.Now().Add(c.coalesceWait)
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			return m.waitTimedOut(ctx, t, ErrCoalesceTimeout)
		}
		// Bounded as the flight's hard timeout budgets it (see New): the
		// wait, and one shared call's time to answer.
		cctx, cancel := context.WithTimeout(ctx, wait+c.sharedTimeout)
		cl, err := c.coord.Claim(cctx, m.key, ClaimRequest{After: after, Wait: wait})
		cancel()
		switch {
		case err == nil:
			c.setScope(ctx, ScopeCluster, nil)
		case errors.Is(err, ErrLeaderFailed):
			c.setScope(ctx, ScopeCluster, nil)
			c.emitWoken(ctx, cl.Waited, err)
			return nil, err
		case errors.Is(err, ErrCoalesceTimeout):
			c.emitWoken(ctx, cl.Waited, err)
			return m.waitTimedOut(ctx, t, err)
		case ctx.Err() != nil:
			return nil, err
		default:
			return m.coordinatorFailed(ctx, t, err)
		}
		if cl.Lease != nil {
			if c.obs != nil {
				kind := EventLeaseAcquired
				if cl.Lease.TakenOver() {
					kind = EventLeaseTakenOver
				}
				c.emit(ctx, kind, TierShared, nil)
			}
			return m.lead(ctx, t, cl.Lease)
		}
		c.emitWoken(ctx, cl.Waited, nil)
		if it, ok := m.recheck(ctx, c.now(), t); ok {
			return &flight[V]{item: it, found: true, remote: true}, nil
		}
		after = cl.Done
	}
}

// scope is Result.Scope for a caller of the flight.
func (fl *flight[V]) scope() Scope {
	switch {
	case fl.remote:
		return ScopeCluster
	case !fl.found:
		return ScopeLocal
	}
	return ScopeNone
}

func (c *Cache[V]) emitWoken(ctx context.Context, waited time.Duration, err error) {
	if c.obs != nil {
		c.observe(Event{Kind: EventFollowerWoken, Ctx: ctx, Cache: c.name, Tier: TierShared, Duration: waited, Err: err})
	}
}

// lead loads the key under lease and ends the lease on every path: a
// failed load fails it, a panicking loader or codec too (the engine turns
// the panic into the callers' error afterwards); completeLease sets ended
// just before it hands the lease its result.
func (m *miss[V]) lead(ctx context.Context, t coherence.Ticket, lease Lease) (*flight[V], error) {
	ended := false
	defer func() {
		if !ended {
			m.failLease(ctx, lease, errLoaderAborted)
		}
	}()
	fl, pol, err := m.loadOrigin(ctx)
	if err != nil {
		ended = true
		m.failLease(ctx, lease, err)
		return fl, err
	}
	fl = m.completeLease(ctx, t, lease, fl, pol.noStore.Load(), &ended)
	if m.newerThan != 0 {
		m.c.refreshDone(m)
	}
	return fl, nil
}

// loadWithoutLease is the flight without the cluster layer: the load, and
// the write-back when store is set (and the loader did not say NoStore).
func (m *miss[V]) loadWithoutLease(ctx context.Context, t coherence.Ticket, store bool) (*flight[V], error) {
	fl, pol, err := m.loadOrigin(ctx)
	if err != nil {
		return fl, err
	}
	if store && !pol.noStore.Load() {
		fl.writeErr = m.writeBack(ctx, t, &fl.item)
	}
	fl.uncached = !store
	if m.newerThan != 0 {
		m.c.refreshDone(m)
	}
	return fl, nil
}

// waitTimedOut applies OnCoalesceTimeout. A stale value is served by the
// caller (settle) on the error; loading here, with nothing to serve, skips
// the lease and the write: the leader is still at work, and its fenced
// write is the one that should land. An early refresh never loads here:
// the value it refreshes is still fresh, and the lease holder stores the
// new one; a load it could not store would be an origin call for nothing.
func (m *miss[V]) waitTimedOut(ctx context.Context, t coherence.Ticket, err error) (*flight[V], error) {
	if m.c.onCoalesceTimeout == WaitFail || m.hasStale || m.newerThan != 0 {
		return nil, err
	}
	return m.loadWithoutLease(ctx, t, false)
}

// coordinatorFailed applies OnCoordinatorFailure to a Claim that failed.
func (m *miss[V]) coordinatorFailed(ctx context.Context, t coherence.Ticket, err error) (*flight[V], error) {
	c := m.c
	if c.onCoordFailure == FailOnCoordinatorError {
		return nil, fmt.Errorf("%w: %w", ErrCoordinatorUnavailable, err)
	}
	c.setScope(ctx, ScopeLocal, err)
	if ok, suppressed := c.coordLog.allow(); ok {
		c.log.LogAttrs(ctx, slog.LevelWarn, "flightcache: coordinator failed; this load is coalesced within the process only",
			slog.String("cache", c.name), slog.Any("error", err), slog.Int64("suppressed", suppressed))
	}
	return m.loadWithoutLease(ctx, t, true)
}

// completeLease ends a successful load under a lease: the fenced write,
// the broadcast and the release, in the Lease's Complete. The local tier
// gets the value only if the shared write was not refused: a refused write
// means a newer load, Set or Delete superseded this one, and the flight
// then hands its callers what that newer writer stored, when it is there.
// A load that finishes after Close stores nothing (the lease is still
// completed, so the followers lead at once), and neither does one whose
// value the codec cannot encode, even by panicking. It sets *ended just
// before Complete.
func (m *miss[V]) completeLease(ctx context.Context, t coherence.Ticket, lease Lease, fl *flight[V], noStore bool, ended *bool) *flight[V] {
	c := m.c
	var e *Entry
	if !noStore && c.coh.SharedWritable(coherence.Leased, false) {
		if enc, err := c.encodeSafely(&fl.item); err != nil {
			fl.writeErr = err
			c.writeFailed(ctx, TierShared, err)
		} else {
			e = &enc
		}
	}
	// Not the flight's context: the loader timeout may have just ended it,
	// and the followers must hear the result anyway. The Coordinator
	// bounds its own calls.
	*ended = true
	written, err := lease.Complete(context.WithoutCancel(ctx), e)
	select {
	case <-lease.Lost():
		if c.obs != nil {
			c.emit(ctx, EventLeaseLost, TierShared, nil)
		}
	default:
	}
	switch {
	case err != nil:
		fl.writeErr = err
		c.writeFailed(ctx, TierShared, err)
	case e != nil && !written:
		if c.obs != nil {
			c.emit(ctx, EventFencedWriteRejected, TierShared, nil)
		}
		if it, ok := m.recheck(ctx, c.now(), t); ok {
			return &flight[V]{item: it, found: true, remote: true, loadCtx: fl.loadCtx}
		}
		return fl
	}
	if e != nil {
		c.fill(t, m.key, &fl.item, c.wallRead(&fl.item, e), nil)
	}
	return fl
}

// failLease ends a failed load under a lease. A load whose context was
// cancelled (every caller left, or the Cache closed) did not fail: the
// lease is completed with nothing stored, which wakes the followers to
// look again and lets one of them lead at once, instead of failing them
// all. That is decided on the context's state, not on err: an origin's
// own error may wrap context.Canceled (a driver's cancelled statement) and
// is a failure like any other.
func (m *miss[V]) failLease(ctx context.Context, lease Lease, err error) {
	var ferr error
	if errors.Is(ctx.Err(), context.Canceled) {
		_, ferr = lease.Complete(context.WithoutCancel(ctx), nil)
	} else {
		ferr = lease.Fail(context.WithoutCancel(ctx), err)
	}
	if ferr != nil {
		// The followers find out when the lease expires instead.
		m.c.writeFailed(ctx, TierShared, ferr)
	}
}
